"""A call that may take the process down with it (a kernel that segfaults on an empty tensor, as
``pdist``'s backward does), run in a forked child so that the checker survives it.

The child inherits everything (the problem, its tensors) by fork, runs the call, and sends back its
pickled result; a child that dies by a signal or does not answer in time gives ``Crashed``. Where
the platform cannot fork, the call runs in this process."""

from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
from dataclasses import dataclass
from typing import Any, Callable

TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Crashed:
    """The call killed its process (``signal``: the signal's name) or did not finish in time."""

    how: str

    def describe(self) -> str:
        return f"crashed the process ({self.how})"


def isolated(call: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    """``call()``'s result, computed in a forked child; ``Crashed`` where the child died."""
    if not hasattr(os, "fork"):
        return call()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send, and leave without running the parent's exit handlers
        os.close(read)
        faulthandler.disable()  # a crash here is the parent's to report, not a traceback dump
        try:
            payload = pickle.dumps(("ok", call()))
        except BaseException as error:  # noqa: BLE001 - carried to the parent, raised there
            try:
                payload = pickle.dumps(("raised", error))
            except Exception:  # noqa: BLE001 - an exception that cannot be pickled: its words
                payload = pickle.dumps(("raised", RuntimeError(f"{type(error).__name__}: {error}")))
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
        os._exit(0)
    os.close(write)
    chunks = []
    with os.fdopen(read, "rb") as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], timeout_s)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return Crashed(f"no answer in {timeout_s:g} s")
            chunk = os.read(pipe.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return Crashed(signal.Signals(os.WTERMSIG(status)).name)
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "raised":
        raise value
    return value
