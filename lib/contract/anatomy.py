"""The anatomy of a custom autograd Function: what its forward saved, what its backward returned,
the autograd graph around it, what it costs, and which rule of the Function contract it breaks.

Most bugs in real custom Functions break a rule of the contract rather than the maths, and
PyTorch reports them late and cryptically, or not at all (a tensor kept on ``ctx`` instead of
saved, ``None`` for an input that needs a gradient, a gradient silently cast or summed to size, a
saved tensor changed in place, a backward that detaches). ``anatomy`` runs the formula once
under ``saved_tensors_hooks`` and calls each custom node's own backward directly (``node.apply``:
the raw return, before PyTorch checks or casts it), and ``lint`` names every broken rule in words.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import math
import textwrap
import threading
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Sequence

import torch
import torch.utils.benchmark as benchmark

from ..engine.signature import function_class
from ..engine.kernels import describe_writes

Tensor = torch.Tensor
SEVERITIES = ("error", "warning", "note")  # error: wrong or rejected; warning: silently lossy; note: worth knowing
COST_RUN_TIME = 0.02  # seconds each timing takes (torch.utils.benchmark's blocked_autorange): the page stays quick


@dataclass(frozen=True)
class SavedTensor:
    node: str  # the graph node it was saved for, where known
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    kind: str  # "input x1", "output", or "intermediate"
    version: int  # its version counter when saved
    changed: str = ""  # where it was changed in place after it was saved ("inside forward", "after forward"), if it was


@dataclass(frozen=True)
class Returned:
    """What a custom node's backward returned for one of its forward's inputs."""

    input: str
    needs_grad: bool
    input_shape: tuple[int, ...] | None  # None: the input is not a tensor
    input_dtype: str
    shape: tuple[int, ...] | None  # None: the backward returned None
    dtype: str


@dataclass(frozen=True)
class Kept:
    """A tensor a node keeps on ctx outside save_for_backward: where it sits and the line that put it there."""

    path: str  # from ctx: "ctx.y", "ctx.kept[0]", "ctx.cache['h']", "ctx.layers[0]['act']", "ctx.state.h" (a namedtuple's field)
    line: int | None  # the line of the user's forward (or setup_context) that stored it, where its source shows it
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Broken:
    rule: str  # the rule of the contract, in a few words
    severity: str  # one of SEVERITIES
    message: str  # which tensor or input, and what PyTorch does about it
    kept: tuple[Kept, ...] = ()  # for a tensor kept on ctx: each such tensor the message is about


@dataclass(frozen=True)
class Cost:
    forward_ms: float
    backward_ms: float  # forward and backward together, minus the forward


@dataclass
class Anatomy:
    function: str  # the custom Function's name, or the callable's
    custom: tuple[str, ...]  # names of the custom nodes in the graph
    saved: list[SavedTensor]
    reference_saved: list[SavedTensor] | None
    attributes: dict[str, str]  # ctx attribute -> what it holds
    returned: list[Returned]
    broken: list[Broken]
    dot: str  # the autograd graph from the output back to the inputs, as DOT
    cost: dict[str, Cost] = field(default_factory=dict)  # "formula", "reference"

    @property
    def saved_bytes(self) -> int:
        return sum(s.bytes for s in self.saved)

    @property
    def reference_bytes(self) -> int | None:
        return None if self.reference_saved is None else sum(s.bytes for s in self.reference_saved)

    def errors(self) -> list[Broken]:
        return [b for b in self.broken if b.severity != "note"]


# ---- recording -------------------------------------------------------------------------------------


def _fresh(inputs: Sequence[Tensor], requires_grad: Sequence[bool] | None = None) -> tuple[Tensor, ...]:
    flags = requires_grad or [x.is_floating_point() or x.is_complex() for x in inputs]
    return tuple(x.detach().clone().requires_grad_(flag) for x, flag in zip(inputs, flags))


def _kind(t: Tensor, inputs: Sequence[Tensor], names: Sequence[str]) -> str:
    for x, name in zip(inputs, names):
        if t is x or (t.data_ptr() == x.data_ptr() and t.shape == x.shape and t.dtype == x.dtype and t.data_ptr() != 0):
            return f"input {name}"
    return "intermediate"  # outputs are told apart once the output exists


_SAVING = threading.local()  # the save_for_backward calls of this thread's recording, if one is on


def _recording_save_for_backward(original):
    def save_for_backward(ctx, *tensors):
        calls = getattr(_SAVING, "calls", None)
        # Only a node autograd will keep saves anything (it has edges): a Function applied inside
        # another's forward, where grad mode is off, never packs what it asks to save.
        if calls is not None and ctx.next_functions:
            # the version each tensor has as its own ctx asks; a second call replaces the first, as in PyTorch
            calls[:] = [c for c in calls if c[0] is not ctx]
            calls.append((ctx, [(t, t._version) for t in tensors if isinstance(t, Tensor)]))
        return original(ctx, *tensors)

    return save_for_backward


# Installed once, for good: a wrapper swapped in and out per call would race between the server's
# session threads. Outside a recording (no calls list on this thread) it only passes the call on.
if not getattr(torch.autograd.function.FunctionCtx.save_for_backward, "_gradient_lab", False):
    _wrapped = _recording_save_for_backward(torch.autograd.function.FunctionCtx.save_for_backward)
    _wrapped._gradient_lab = True
    torch.autograd.function.FunctionCtx.save_for_backward = _wrapped  # type: ignore[method-assign]  # the patch, installed once


def _asked(t: Tensor):
    """The ctx whose save_for_backward asked for ``t``, and ``t``'s version then; (None, None) for a
    tensor a built-in op saves. A node packs its tensors as its apply ends, and a Function applied
    inside another's forward ends first: so the latest ctx still waiting on ``t`` is the one."""
    for ctx, waiting in reversed(_SAVING.calls):
        for i, (s, version) in enumerate(waiting):
            if s is t:
                del waiting[i]  # packed: a tensor saved twice is packed twice
                return ctx, version
    return None, None


def _record(function: Callable, inputs: tuple[Tensor, ...], names: Sequence[str]):
    """Run ``function`` once, recording every tensor autograd saves, the node that saved it and
    whether it changed between its own save_for_backward and forward's end: (output, records, tensors)."""
    records, tensors = [], []

    def pack(t: Tensor):
        ctx, asked = _asked(t)
        changed = asked is not None and asked != t._version
        records.append({"shape": tuple(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "ctx": ctx,
                        "bytes": t.numel() * t.element_size(), "kind": _kind(t, inputs, names), "version": t._version,
                        "changed": ("inside forward, after save_for_backward: PyTorch records the version when forward returns, so "
                                    "it does not notice, and backward silently reads the changed values") if changed else ""})
        tensors.append(t)
        return t

    _SAVING.calls = []
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            output = function(*inputs)
    finally:
        _SAVING.calls = None
    return output, records, tensors


def _saved(output: Tensor, records: list[dict], tensors: list[Tensor]) -> list[SavedTensor]:
    nodes = _saved_nodes(output)
    in_graph = {id(node) for node in _walk(output)}
    found = []
    for record, t in zip(records, tensors):
        ctx = record["ctx"]
        if ctx is not None and id(ctx) not in in_graph:  # a Function applied inside forward, under enable_grad: its graph is dropped
            continue
        kind = record["kind"]
        if kind == "intermediate" and isinstance(output, Tensor) and t.data_ptr() == output.data_ptr() and t.shape == output.shape:
            kind = "output"
        changed = record["changed"] or ("after forward returned: PyTorch raises at backward time (\"one of the variables needed for "
                                        "gradient computation has been modified by an inplace operation\")" if t._version != record["version"] else "")
        found.append(SavedTensor(_node_name(ctx) if ctx is not None else nodes.get(_identity(t), ""), record["shape"], record["dtype"], record["bytes"], kind,
                                 record["version"], changed))
    return found


def _walk(output: Tensor):
    """Every node of the graph behind ``output``, each once, from the output back."""
    seen, order = set(), []
    stack: list[torch.autograd.graph.Node | None] = [output.grad_fn] if isinstance(output, Tensor) and output.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        stack.extend(n for n, _ in reversed(node.next_functions))
    return order


def _is_custom(node) -> bool:
    return isinstance(node, torch.autograd.function.BackwardCFunction)


_GENERATED = "GeneratedBackwardFor_"  # the autograd.Function torch.library makes for a custom op's register_autograd


def _node_name(node) -> str:
    """A node's name; a custom op's by its op (``ns::name``), not by the class torch.library generated."""
    name = type(node).__name__
    if not name.startswith(_GENERATED):
        return name
    from torch._library.custom_ops import OPDEFS

    mangled = name.removeprefix(_GENERATED).removesuffix("Backward")
    op = next((qualified for qualified in OPDEFS if qualified.replace("::", "_") + "_default" == mangled), mangled)
    return f"custom op {op}"


def _identity(t: Tensor) -> tuple:
    """A saved tensor as unpacking gives it back: another object over the same memory."""
    return t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype


def _saved_nodes(output: Tensor) -> dict[tuple, str]:
    """id of a saved tensor -> the name of the node that saved it (custom nodes' saved_tensors,
    built-in nodes' _saved_* attributes)."""
    names: dict[tuple, str] = {}
    for node in _walk(output):
        try:
            tensors = list(node.saved_tensors) if _is_custom(node) else [getattr(node, a) for a in dir(node) if a.startswith("_saved_")]
        except RuntimeError:  # freed, or changed in place: the lint says so
            continue
        for t in tensors:
            if isinstance(t, Tensor):
                names.setdefault(_identity(t), _node_name(node))
    return names


# ---- the graph ------------------------------------------------------------------------------------------


def graph_dot(output: Tensor, names: Sequence[str], inputs: Sequence[Tensor], saved: Sequence[SavedTensor]) -> str:
    """The autograd graph from the loss's output back to the inputs, as DOT: custom nodes marked
    (orange), each node with what it saved, the inputs as leaves."""
    leaves = {id(x): name for x, name in zip(inputs, names)}
    by_node: dict[str, list[str]] = {}
    for s in saved:
        by_node.setdefault(s.node, []).append(f"{'×'.join(map(str, s.shape)) or 'scalar'} {s.dtype}")
    lines = ["digraph autograd {", '  rankdir="BT"; node [shape=box, style="rounded,filled", fillcolor="#eeeeee", fontname="Helvetica"];',
             '  out [label="output", shape=ellipse, fillcolor="#ffffff"];']
    ids: dict[int, str] = {}
    for node in _walk(output):
        key = f"n{len(ids)}"
        ids[id(node)] = key
        name = _node_name(node)
        if type(node).__name__ == "AccumulateGrad":
            leaf = leaves.get(id(node.variable), "leaf")
            lines.append(f'  {key} [label="{leaf}\\n{tuple(node.variable.shape)}", shape=ellipse, fillcolor="#d9f2e3"];')
            continue
        held = by_node.get(name, [])
        label = name + ("\\n(custom Function)" if _is_custom(node) else "") + ("\\nsaved: " + ", ".join(held[:3]) if held else "")
        colour = "#f6c28b" if _is_custom(node) else "#eeeeee"
        lines.append(f'  {key} [label="{label}", fillcolor="{colour}"];')
    if isinstance(output, Tensor) and output.grad_fn is not None:
        lines.append(f"  {ids[id(output.grad_fn)]} -> out;")
    for node in _walk(output):
        for child, _ in node.next_functions:
            if child is not None and id(child) in ids:
                lines.append(f"  {ids[id(child)]} -> {ids[id(node)]};")
    lines.append("}")
    return "\n".join(lines)


# ---- the contract ------------------------------------------------------------------------------------------

_CTX_INTERNALS = {"to_save", "non_differentiable", "dirty_tensors", "materialize_grads", "needs_input_grad", "saved_variables"}


_ANY = object()  # a key the source does not fix (a subscript by a variable), or a set's member, which has none


def _contents(value, path: str, keys: tuple = (), depth: int = 0) -> list[tuple[str, tuple, Tensor]]:
    """The tensors a ctx attribute holds, each with its path from ctx and the keys that reach it: the
    attribute itself, or inside a list, tuple, namedtuple (by field), set or dict (three levels down at most)."""
    if isinstance(value, Tensor):
        return [(path, keys, value)]
    if depth > 2:
        return []
    if isinstance(value, dict):
        items = [(f"{path}[{key!r}]", key, item) for key, item in value.items()]
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        items = [(f"{path}.{name}", index, item) for index, (name, item) in enumerate(zip(value._fields, value))]
    elif isinstance(value, (list, tuple)):
        items = [(f"{path}[{index}]", index, item) for index, item in enumerate(value)]
    elif isinstance(value, (set, frozenset)):
        items = [(path, _ANY, item) for item in value]
    else:
        return []
    return [found for item_path, key, item in items for found in _contents(item, item_path, (*keys, key), depth + 1)]


def _precision(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits if dtype.is_floating_point else 0


def _forward_parameters(cls) -> list[str]:
    """The names of forward's parameters as autograd passes them, by position (ctx first, in the old
    style), up to a ``*args``, which names none: read from forward as the class gives it, so a
    classmethod's cls is already bound and left out."""
    try:
        parameters = inspect.signature(cls.forward).parameters.values()
    except (AttributeError, TypeError, ValueError):
        return []
    by_position = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in itertools.takewhile(lambda p: p.kind in by_position, parameters)]


def _forward_arguments(cls) -> list[str]:
    """The names of forward's inputs, where its signature says them: after ctx, whatever it is called,
    in the old style (no setup_context of its own)."""
    parameters = _forward_parameters(cls)
    old_style = inspect.getattr_static(cls, "setup_context", None) is inspect.getattr_static(torch.autograd.Function, "setup_context")
    return parameters[1:] if parameters and (old_style or parameters[0] == "ctx") else parameters


def _returned(node, inputs: Sequence[Tensor], names: Sequence[str], raw: Sequence) -> list[Returned]:
    """Per forward input of a custom node: the formula's inputs by their names, others by forward's
    parameters' names, or by position."""
    # next_functions holds edges for tensor inputs only, None for one that needs no gradient: so the
    # k-th input that needs a gradient is the k-th live edge (a non-tensor argument before it shifts nothing)
    needing = [position for position, needs in enumerate(node.needs_input_grad) if needs]
    edges = [edge for edge, _ in node.next_functions if edge is not None]
    leaves = {position: edge.variable for position, edge in zip(needing, edges) if hasattr(edge, "variable")}
    arguments = dict(enumerate(_forward_arguments(node._forward_cls)))
    found = []
    for position, needs in enumerate(node.needs_input_grad):
        x: Tensor | None
        if len(node.needs_input_grad) == len(names):  # forward's arguments are the formula's inputs, in order
            x, name = inputs[position], names[position]
        else:
            x = leaves.get(position)
            name = next((n for i, n in zip(inputs, names) if i is x), arguments.get(position, f"input {position + 1}"))
        shape = tuple(x.shape) if x is not None else None
        dtype = str(x.dtype).replace("torch.", "") if x is not None else ""
        g = raw[position] if position < len(raw) else None
        found.append(Returned(name, bool(needs), shape, dtype, None if g is None else tuple(g.shape) if isinstance(g, Tensor) else (),
                              "" if not isinstance(g, Tensor) else str(g.dtype).replace("torch.", "")))
    return found


def lint_class(cls) -> list[Broken]:
    """The rules a Function breaks in its very definition."""
    function, broken = cls.__name__, []
    for method in ("forward", "backward"):
        # apply, gradcheck and double backward call either decorator's method on the class; only a plain one is wrong
        if method in vars(cls) and not isinstance(vars(cls)[method], (staticmethod, classmethod)):
            broken.append(Broken(f"{method} is a staticmethod or classmethod", "error",
                                 f"{function}.{method} is neither a @staticmethod nor a @classmethod: autograd calls it on the class, so "
                                 "its first parameter gets ctx, not an instance (PyTorch deprecates instance-method Functions)"))
    if "setup_context" in vars(cls) and "forward" in vars(cls):
        parameters = _forward_parameters(cls)
        if parameters and parameters[0] == "ctx":
            broken.append(Broken("one style of forward", "note",
                                 f"{function} has setup_context, yet its forward still takes ctx (the old style): with setup_context, "
                                 "forward(*inputs) must not take ctx, and saving belongs in setup_context"))
    return broken


_RNG_STATE_SHAPE = torch.get_rng_state().shape  # what the CPU generator's state is (a uint8 tensor)


def _is_rng_state(t: Tensor) -> bool:
    return t.dtype == torch.uint8 and t.device.type == "cpu" and t.shape == _RNG_STATE_SHAPE


def _in_graph(t: Tensor) -> bool:
    """An input or output of forward, or a view of one: what a gradient flows through (inside forward,
    only those require grad, and a view made there keeps its base)."""
    return t.requires_grad or (t._base is not None and t._base.requires_grad)


def _held(value) -> str:
    """What a ctx attribute holds, in a few words."""
    if not isinstance(value, Tensor):
        return f"{type(value).__name__} {value!r}"[:80]
    what = f"tensor {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    return what + (": the CPU random generator's state (torch.get_rng_state()), fine to keep on ctx" if _is_rng_state(value) else "")


# ---- where forward put a tensor on ctx: its source, read -----------------------------------------------------

_GROWERS = {"append", "extend", "insert", "add", "+="}  # what adds to a list (or a set) kept on ctx
_KEYED = {"update", "setdefault"}  # what adds to a dict kept on ctx


@dataclass(frozen=True, eq=False)
class _Store:
    """A statement of forward (or setup_context) that puts something on ctx: ``ctx.a = value`` (also
    in a tuple of targets, or by setattr), ``ctx.a[k] = value``, ``ctx.a.append(value)``, ``ctx.a += [...]``."""

    attribute: str
    keys: tuple  # the subscripts after ctx.attribute, as constants (_ANY: not a constant)
    line: int  # the statement's, in its file
    value: ast.AST | None = None  # what was stored, where the source pairs it with its target
    method: str = ""  # a call's (append, extend, insert, add, update, setdefault) or "+="
    args: tuple = ()
    keywords: tuple = ()
    looped: bool = False  # inside a loop or a comprehension: it may run any number of times


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _ANY


def _on_ctx(node: ast.AST, ctx: str) -> tuple[str, tuple] | None:
    """(attribute, keys) where ``node`` is ``ctx.attribute[k1][k2]...``."""
    keys = []
    while isinstance(node, ast.Subscript):
        keys.append(_literal(node.slice))
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == ctx:
        return node.attr, tuple(reversed(keys))
    return None


class _Stores(ast.NodeVisitor):
    def __init__(self, ctx: str):
        self.ctx, self.loops = ctx, 0
        self.found: list[_Store] = []

    def _store(self, target: ast.AST, value: ast.AST | None, line: int, **call) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):  # ctx.a, ctx.b = a, b: each target with its own value
            elements = target.elts
            paired = (value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elements)
                      and not any(isinstance(e, ast.Starred) for e in (*elements, *value.elts)) else None)
            for i, element in enumerate(elements):
                self._store(element.value if isinstance(element, ast.Starred) else element, paired[i] if paired is not None else None, line)
            return
        found = _on_ctx(target, self.ctx)
        if found is not None:
            self.found.append(_Store(found[0], found[1], line, value, looped=self.loops > 0, **call))

    def _loop(self, node: ast.AST) -> None:
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    visit_For = visit_AsyncFor = visit_While = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _loop

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._store(target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._store(node.target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._store(node.target, None, node.lineno, method="+=" if isinstance(node.op, ast.Add) else "", args=(node.value,))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr in _GROWERS | _KEYED:
            self._store(function.value, None, node.lineno, method=function.attr, args=tuple(node.args), keywords=tuple(node.keywords))
        elif (isinstance(function, ast.Name) and function.id == "setattr" and len(node.args) == 3 and isinstance(node.args[0], ast.Name)
              and node.args[0].id == self.ctx and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self.found.append(_Store(node.args[1].value, (), node.lineno, node.args[2], looped=self.loops > 0))
        self.generic_visit(node)


def _ctx_stores(cls) -> list[_Store]:
    """Every statement of ``cls``'s forward and setup_context that puts something on ctx, in source order,
    with its line in the file; none where the source cannot be read (a class made by exec, or builtin)."""
    base, stores = torch.autograd.Function, []
    old_style = inspect.getattr_static(cls, "setup_context", None) is inspect.getattr_static(base, "setup_context")
    for method in ("forward", "setup_context"):
        if inspect.getattr_static(cls, method, None) is inspect.getattr_static(base, method):
            continue  # torch's own: nothing of the user's
        try:
            function = getattr(cls, method)
            parameters = _forward_parameters(cls) if method == "forward" else list(inspect.signature(function).parameters)
            if not parameters or (method == "forward" and not old_style and parameters[0] != "ctx"):
                continue  # a forward in the new style takes no ctx
            lines, start = inspect.getsourcelines(inspect.unwrap(function))
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, ValueError, SyntaxError, AttributeError):
            continue
        ast.increment_lineno(tree, start - 1)
        visitor = _Stores(parameters[0])
        visitor.visit(tree)
        stores += visitor.found
    return stores


def _same(a, b) -> bool:
    if a is _ANY or b is _ANY:
        return True
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # noqa: BLE001 - a key whose == is not a bool (a tensor): not the same
        return False


def _child(node: ast.AST, key) -> ast.expr | None:
    """The expression that gives ``node[key]``, where ``node`` is a literal (or dict(...)) that shows it."""
    if isinstance(node, (ast.List, ast.Tuple)) and isinstance(key, int) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return node.elts[key] if 0 <= key < len(node.elts) else None
    if isinstance(node, ast.Dict):
        matches = [v for k, v in zip(node.keys, node.values) if k is not None and key is not _ANY and _same(_literal(k), key)]
        return matches[-1] if matches else None  # {"h": a, "h": b} keeps b
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        matches = [k.value for k in node.keywords if k.arg is not None and k.arg == key]
        return matches[-1] if matches else None
    return None


def _length(node: ast.AST | None) -> int | None:
    """How many elements a list or tuple literal has; None where the source does not say (a starred element, a call)."""
    if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return len(node.elts)
    return None


def _descend(node: ast.AST | None, keys: tuple) -> tuple[int | None, int]:
    """The line of the element at ``keys`` inside ``node``, as deep as the source shows it, and how many keys it went down."""
    reached, line = 0, None
    for key in keys:
        child = _child(node, key) if node is not None else None
        if child is None:
            break
        node, reached, line = child, reached + 1, child.lineno
    return line, reached


def _added(stores: list[_Store], store: _Store, keys: tuple) -> tuple[int | None, int]:
    """Where a call that adds to a container on ctx (``store``) put the element at ``keys`` (relative to
    that container): its line and how many keys it accounts for; (None, 0) where it did not, or where
    the source cannot tell which of several calls did (a loop, an insert, an extend of a variable)."""
    if not keys:
        return None, 0
    key, rest = keys[0], keys[1:]
    if store.method in _KEYED:
        if store.method == "setdefault" and len(store.args) == 2 and _same(_literal(store.args[0]), key) and key is not _ANY:
            value = store.args[1]
        else:
            value = next((k.value for k in reversed(store.keywords) if k.arg is not None and k.arg == key), None)
            if value is None and store.method == "update" and store.args:
                value = _child(store.args[0], key)
        if value is None:
            return None, 0
        line, reached = _descend(value, rest)
        return line or store.line, 1 + reached
    growers = [s for s in stores if s.attribute == store.attribute and s.keys == store.keys and s.method in _GROWERS]
    first = next(i for i, s in enumerate(stores) if s is growers[0])
    made = [s for s in stores[:first] if s.attribute == store.attribute and s.keys == store.keys and not s.method]
    length = _length(made[-1].value) if made else None  # what the list held before the first call added to it
    if isinstance(key, int) and length is not None and key < length:
        return None, 0  # the literal that made the list holds it
    counts = [(1 if s.method == "append" else _length(s.args[0]) if s.method in ("extend", "+=") else None) if s.args else None for s in growers]
    if isinstance(key, int) and length is not None and not any(s.looped for s in growers) and None not in counts:
        position = length
        for grower, count in zip(growers, counts):
            assert count is not None  # None not in counts
            if position <= key < position + count:
                if grower is not store:
                    return None, 0
                element = grower.args[0] if grower.method == "append" else grower.args[0].elts[key - position]
                line, reached = _descend(element, rest)
                return line or element.lineno, 1 + reached
            position += count
        return None, 0
    if len({s.line for s in growers}) == 1 and store is growers[-1]:  # one call adds them all
        element = store.args[0] if store.method in ("append", "add") and store.args else None
        line, reached = _descend(element, rest)
        return line or store.line, 1 + reached
    return None, 0


def _line(stores: list[_Store], attribute: str, keys: tuple) -> int | None:
    """The line that put the tensor at ``keys`` into ctx.attribute: the store that shows it most
    precisely (an element of a literal, a keyed store, the call that added it), the latest of equals,
    else the line that set the attribute; None where forward's source shows none (a helper set it)."""
    best, line = -1, None
    for store in stores:
        depth = len(store.keys)
        if store.attribute != attribute or depth > len(keys) or not all(_same(a, b) for a, b in zip(store.keys, keys)):
            continue
        if store.method:
            found, reached = _added(stores, store, keys[depth:])
            if found is None:
                continue
        else:
            found, reached = _descend(store.value, keys[depth:])
        if depth + reached >= best:
            best, line = depth + reached, found or store.line
    return line


def _severity(t: Tensor, input_shapes) -> str | None:
    """The rule for a tensor kept on ctx (see _lint_ctx)."""
    if _in_graph(t):
        return "error"
    if t.is_floating_point() or t.is_complex():
        return "warning" if tuple(t.shape) in input_shapes else "note"
    return None


def _at(line: int | None) -> str:
    return f" (line {line})" if line is not None else ""


def _places(kept: Sequence[Kept], shown: int = 4) -> str:
    """The paths of several tensors kept on ctx, each with its line, or the line once where they share it."""
    more = f" and {len(kept) - shown} more" if len(kept) > shown else ""
    lines = {k.line for k in kept}
    if len(lines) == 1:
        line = next(iter(lines))
        return ", ".join(k.path for k in kept[:shown]) + more + (f"; line {line}" if line is not None else "")
    return ", ".join(k.path + (f" line {k.line}" if k.line is not None else "") for k in kept[:shown]) + more


def _kept_words(severity: str, attribute: str, value, kept: Sequence[Kept]) -> str:
    """What a finding about tensors kept on ctx says: where each is (its path and line), and what it costs."""
    one = len(kept) == 1
    it, them = ("it", "it") if one else ("they", "them")
    if one:
        place = "as an attribute" if isinstance(value, Tensor) else f"in a {type(value).__name__} on ctx"
        subject = f"{kept[0].path}{_at(kept[0].line)} holds a tensor {kept[0].shape}"
    else:
        place = "on ctx"
        subject = f"ctx.{attribute} holds {len(kept)} tensor(s) in a {type(value).__name__} ({_places(kept)})"
    if severity == "error":
        what = "an input or output of forward (or a view of one)" if one else "inputs or outputs of forward (or views of them)"
        return (f"{subject}, {what}, {place} instead of saving {them} with ctx.save_for_backward: first order works, but double "
                f"backward can lose its graph, in-place changes to {them} go unseen, and {it} can leak with the graph")
    if severity == "warning":
        return (f"{subject} computed in forward from its input, {place}: backward works, but a double backward through {them} cannot "
                f"see how {it} {'depends' if one else 'depend'} on the input, and saved-tensor hooks never see {them}; save the input or "
                f"output with ctx.save_for_backward and recompute {them} in backward")
    return (f"{subject} that no gradient flows through, {place}: fine for backward, but saved-tensor hooks "
            f"(torch.autograd.graph.saved_tensors_hooks: offloading, packing) never see {them}")


def _lint_ctx(node, input_shapes: AbstractSet[tuple[int, ...]] = frozenset()) -> list[Broken]:
    """The tensors a node keeps on ctx, as attributes or inside lists, tuples, dicts or sets there,
    each named by its path (``ctx.cache['h']``) and the line of forward that put it there. Kept there
    rather than saved, an input or output (or a view of one) is what save_for_backward exists for:
    double backward loses its graph, in-place changes to it go unseen, and an output on its own ctx
    makes a cycle that leaks. Any other floating tensor (an activation made inside forward) no gradient
    flows through: where it has an input's shape it was computed from that input element by element
    (exp(x), a norm's scale, a CDF's denominator), and a double backward through backward cannot see
    how it depends on it, a warning (the PyTorch tutorial's "what not to do"); else only saved-tensor
    hooks miss it, a note. An integer or bool one carries no gradient at all (a generator's state, as
    torch.utils.checkpoint keeps it, shapes, indices, masks): nothing to say. Per attribute, one
    finding per severity, naming each tensor it is about (``Broken.kept``)."""
    broken, stores = [], None
    for attribute, value in vars(node).items():
        held = [] if attribute in _CTX_INTERNALS or attribute.startswith("_") else _contents(value, f"ctx.{attribute}")
        by_severity: dict[str, list[Kept]] = {}
        for path, keys, t in held:
            severity = _severity(t, input_shapes)
            if severity is None:
                continue
            if stores is None:
                try:
                    stores = _ctx_stores(node._forward_cls)
                except Exception:  # noqa: BLE001 - reading the user's source is a courtesy: without it, no line
                    stores = []
            by_severity.setdefault(severity, []).append(Kept(path, _line(stores, attribute, keys), tuple(t.shape),
                                                             str(t.dtype).replace("torch.", "")))
        for severity, kept in by_severity.items():
            broken.append(Broken("tensors are saved with save_for_backward", severity, _kept_words(severity, attribute, value, kept),
                                 tuple(kept)))
    return broken


def _lint_node(node, inputs, names, raw: Sequence) -> list[Broken]:
    shapes = {tuple(x.shape) for x in inputs if isinstance(x, Tensor)}
    broken = lint_class(node._forward_cls) + _lint_ctx(node, shapes)
    # what backward returned
    n_inputs = len(node.needs_input_grad)
    if len(raw) != n_inputs:
        extra = raw[n_inputs:]
        if len(raw) < n_inputs:
            broken.append(Broken("one gradient per input", "error",
                                 f"backward returned {len(raw)} gradient(s) for {n_inputs} inputs of forward: PyTorch raises "
                                 "\"function backward returned an incorrect number of gradients\""))
        elif any(g is not None for g in extra):
            broken.append(Broken("one gradient per input", "error",
                                 f"backward returned {len(raw)} values for {n_inputs} inputs, and the extra ones are not None: PyTorch "
                                 "raises \"function backward returned an incorrect number of gradients\""))
        else:
            broken.append(Broken("one gradient per input", "note",
                                 f"backward returned {len(raw) - n_inputs} extra None(s) beyond its {n_inputs} inputs: PyTorch lets it pass"))
    for r, g in zip(_returned(node, inputs, names, raw), raw):
        if r.needs_grad and g is None:
            broken.append(Broken("a gradient for every input that needs one", "error",
                                 f"backward returned None for {r.input}, which needs a gradient: no error, the input silently gets no "
                                 "gradient (its .grad stays None or 0)"))
        elif not r.needs_grad and isinstance(g, Tensor) and r.input_shape is None and not r.input_dtype:
            broken.append(Broken("one gradient per input", "error",
                                 f"backward returned a tensor for {r.input}, which is not a tensor input of forward: PyTorch raises "
                                 "(\"returned a gradient different than None ... but the corresponding forward input was not a Variable\")"))
        elif not r.needs_grad and isinstance(g, Tensor):
            broken.append(Broken("no gradient where none is needed", "note",
                                 f"backward computed a gradient for {r.input}, which does not need one (ctx.needs_input_grad is False "
                                 "there): wasted work, thrown away"))
        if not isinstance(g, Tensor) or r.input_shape is None:
            continue
        if tuple(g.shape) != r.input_shape:
            try:
                summable = torch.broadcast_shapes(r.input_shape, tuple(g.shape)) == tuple(g.shape)
            except RuntimeError:
                summable = False
            if summable:
                broken.append(Broken("a gradient shaped like its input", "note",
                                     f"the gradient for {r.input} is {tuple(g.shape)}, not {r.input_shape}: PyTorch silently sums it "
                                     "to size, which is right only if forward broadcast that input"))
            else:
                broken.append(Broken("a gradient shaped like its input", "error",
                                     f"the gradient for {r.input} is {tuple(g.shape)}, not {r.input_shape}: PyTorch rejects it at backward "
                                     f"time, naming only the node ({_node_name(node)})"))
        x_dtype = getattr(torch, r.input_dtype, None) if r.input_dtype else None
        if x_dtype is not None and g.dtype != x_dtype and _precision(g.dtype) < _precision(x_dtype):
            broken.append(Broken("a gradient in its input's precision", "warning",
                                 f"the gradient for {r.input} is {r.dtype}, its input {r.input_dtype}: PyTorch silently casts it, so it "
                                 f"carries only {r.dtype}'s precision (about {torch.finfo(g.dtype).eps:.0e})"))
    return broken


def _raw_backward(node, output: Tensor, create_graph: bool = False) -> tuple:
    """What a custom node's own backward returns, called directly (before PyTorch checks, sums
    or casts it), for a grad_output of ones shaped like the node's output, in the grad mode
    autograd calls it in: off for first order (so out= ops work), on with ``create_graph``, where
    the grad_output requires grad, as double backward asks."""
    upstreams = (torch.ones_like(output),) if node is output.grad_fn and _outputs_of(node) == 1 else _upstreams_for(node, output)
    with torch.enable_grad() if create_graph else torch.no_grad():
        raw = node.apply(*(u.requires_grad_() if create_graph and u.is_floating_point() else u for u in upstreams))
    return raw if isinstance(raw, tuple) else (raw,)


def _outputs_of(node) -> int:
    try:
        return len(node._input_metadata)
    except Exception:  # noqa: BLE001 - an internal attribute
        return 1


def _upstreams_for(node, output: Tensor) -> tuple[Tensor, ...]:
    """A grad_output per output of a custom node (a Function may return several): ones shaped like
    each floating output, from the metadata autograd keeps for it, and zeros for the others (an
    output marked non-differentiable gets zeros, as autograd gives it)."""
    try:
        metadata = node._input_metadata
        return tuple(torch.ones(m.shape, dtype=output.dtype) if m.dtype.is_floating_point else torch.zeros(m.shape, dtype=m.dtype)
                     for m in metadata) or (torch.ones_like(output),)
    except Exception:  # noqa: BLE001 - an internal attribute: fall back to the graph's output shape
        return (torch.ones_like(output),)


def _lint_double_backward(node, output: Tensor) -> list[Broken]:
    """The raw backward called as double backward calls it (create_graph): whether its gradients
    carry a graph. Apart from first order: what fails here says nothing about first order."""
    function = node._forward_cls.__name__
    try:
        raw = _raw_backward(node, output, create_graph=True)
    except Exception as error:  # noqa: BLE001 - PyTorch raises too: loud, not silently wrong
        return [Broken("a differentiable backward", "note",
                       f"{function}'s backward raises when double backward is asked for (create_graph=True), as PyTorch would: "
                       f"{type(error).__name__}: {error}; first order is unaffected")]
    tensors = [g for g, needs in zip(raw, node.needs_input_grad) if needs and isinstance(g, Tensor) and g.is_floating_point()]
    if all(g.requires_grad for g in tensors):
        return []
    return [Broken("a differentiable backward", "error",
                   f"{function}'s backward is not differentiable: its gradient carries no graph when double backward is asked "
                   "for (it detaches, computes it without a graph, or goes through .numpy() or .item()), so second derivatives "
                   "are silently wrong or missing")]


# ---- cost ------------------------------------------------------------------------------------------------


def _cost(function: Callable, inputs: Sequence[Tensor]) -> Cost:
    fresh = _fresh(inputs)

    def forward():
        with torch.no_grad():
            function(*fresh)

    def both():
        out = function(*fresh)
        for x in fresh:
            x.grad = None
        out.backward(torch.ones_like(out))  # not autograd.grad, which reentrant checkpointing refuses

    f = benchmark.Timer(stmt="forward()", globals={"forward": forward}).blocked_autorange(min_run_time=COST_RUN_TIME).median
    fb = benchmark.Timer(stmt="both()", globals={"both": both}).blocked_autorange(min_run_time=COST_RUN_TIME).median
    return Cost(f * 1e3, max(fb - f, 0.0) * 1e3)


# ---- the whole anatomy -------------------------------------------------------------------------------------


def anatomy(function: Callable, inputs: Sequence[Tensor], names: Sequence[str], reference: Callable | None = None,
            timed: bool = True, owner: type | None = None) -> Anatomy:
    """The anatomy of ``function`` (a formula: a callable that applies a custom Function) on
    ``inputs``; ``reference``'s saved tensors and cost beside it. ``owner``: the Function class
    behind ``function`` where known (``MyFunction.apply``'s own), linted even if forward raises."""
    xs = _fresh(inputs)
    try:
        output, records, tensors = _record(function, xs, names)
        if not isinstance(output, Tensor):
            raise TypeError(f"the formula returned {type(output).__name__}, not a tensor")
    except Exception as error:  # noqa: BLE001 - the user's forward may raise anything: said in words, beside what its class shows
        owner = owner or function_class(function)
        static = lint_class(owner) if isinstance(owner, type) and issubclass(owner, torch.autograd.Function) else []
        name = owner.__name__ if isinstance(owner, type) else getattr(function, "__name__", "formula")  # static: of a class
        raised = Broken("forward runs", "error", f"the formula raised {type(error).__name__}: {error}")
        return Anatomy(name, (), [], None, {}, [], _unique([*static, raised]), "digraph autograd {}", {})
    saved = _saved(output, records, tensors)
    reference_saved = None
    if reference is not None:
        rs = _fresh(inputs)
        ref_out, ref_records, ref_tensors = _record(reference, rs, names)
        reference_saved = _saved(ref_out, ref_records, ref_tensors) if isinstance(ref_out, Tensor) else None
    customs = [n for n in _walk(output) if _is_custom(n)]
    attributes, returned, broken = {}, [], []
    for node in customs:
        for attribute, value in vars(node).items():
            if attribute not in _CTX_INTERNALS and not attribute.startswith("_"):
                attributes[attribute] = _held(value)
        try:
            raw = _raw_backward(node, output)
        except Exception as error:  # noqa: BLE001 - the user's backward may raise anything: said in words
            broken.append(Broken("backward runs", "error", f"{node._forward_cls.__name__}.backward raised {type(error).__name__}: {error}"))
            continue
        returned += _returned(node, xs, names, raw)
        broken += _lint_node(node, xs, names, raw) + (_lint_double_backward(node, output) if node is output.grad_fn else [])
    broken += [Broken("saved tensors are not changed in place", "error", f"saved tensor #{number} ({s.kind}, {s.shape}, saved for "
                      f"{s.node or 'backward'}) was changed in place {s.changed}") for number, s in enumerate(saved, 1) if s.changed]
    if len(xs) > 1 and customs:  # ask again with the last input not needing a gradient: is one computed anyway?
        broken += _wasted(function, inputs, names)
    cost = {}
    if timed:
        for name, timed_function in (("formula", function), ("reference", reference)):
            try:
                if timed_function is not None:
                    cost[name] = _cost(timed_function, inputs)
            except Exception:  # noqa: BLE001 - a backward PyTorch rejects cannot be timed; the lint says why
                continue
    first = customs[0] if customs else None
    return Anatomy((_node_name(first) if _node_name(first).startswith("custom op") else first._forward_cls.__name__) if first is not None
                   else getattr(function, "__name__", "formula"),
                   tuple(_node_name(n) for n in customs), saved, reference_saved, attributes, returned, _unique(broken),
                   graph_dot(output, names, xs, saved), cost)


def unseen_writes_broken(writes: Sequence) -> list[Broken]:
    """A kernel's writes that autograd cannot see (``engine.kernels.unseen_writes``), as the rules they
    break, each with its element. Notes: worth knowing, never a wrong gradient (kernels such as
    Liger-Kernel's write so by design, to save memory); the verdict's report names them too."""
    rules = {"input": "inputs are not written in place", "saved tensor": "saved tensors are not written in place",
             "grad_output": "grad_output is not written in place", "a second backward": "backward can run twice"}
    return [Broken(rules[target], "note", sentence) for target, sentence in describe_writes(writes)]


def _wasted(function: Callable, inputs: Sequence[Tensor], names: Sequence[str]) -> list[Broken]:
    flags = [True] * (len(inputs) - 1) + [False]
    xs = _fresh(inputs, flags)
    try:
        output = function(*xs)
    except Exception:  # noqa: BLE001
        return []
    found = []
    for node in (n for n in _walk(output) if _is_custom(n)):
        try:
            raw = _raw_backward(node, output)
        except Exception:  # noqa: BLE001 - named by the first run already
            continue
        found += [b for b in _lint_node(node, xs, names, raw) if b.rule == "no gradient where none is needed"]
    return found


def _unique(broken: list[Broken]) -> list[Broken]:
    seen, kept = set(), []
    for b in broken:
        if (b.rule, b.message) not in seen:
            seen.add((b.rule, b.message))
            kept.append(b)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(kept, key=lambda b: order[b.severity])


def rows_saved(saved: Sequence[SavedTensor]) -> list[dict]:
    return [{"#": i, "saved for": s.node or "-", "kind": s.kind, "shape": str(s.shape), "dtype": s.dtype, "bytes": s.bytes,
             "version when saved": s.version, "changed in place after saving": s.changed or "no"} for i, s in enumerate(saved, 1)]


def rows_returned(returned: Sequence[Returned]) -> list[dict]:
    return [{"input": r.input, "needs a gradient": r.needs_grad, "input shape": str(r.input_shape), "input dtype": r.input_dtype,
             "returned": "None" if r.shape is None else str(r.shape), "returned dtype": r.dtype or "-"} for r in returned]


def rows_broken(broken: Sequence[Broken]) -> list[dict]:
    return [{"severity": b.severity, "rule": b.rule, "what": b.message} for b in broken]


def describe(cost: dict[str, Cost]) -> str:
    f = cost.get("formula")
    r = cost.get("reference")
    if f is None:
        return ""
    text = f"forward {f.forward_ms:.3g} ms, backward {f.backward_ms:.3g} ms"
    if r is not None and r.forward_ms > 0 and math.isfinite(r.forward_ms):
        text += (f"; the reference: forward {r.forward_ms:.3g} ms, backward {r.backward_ms:.3g} ms "
                 f"(the formula takes {f.forward_ms / r.forward_ms:.2g}× the reference's forward)")
    return text
