"""In a checkout, ``gradient_lab`` is the code in ``lib/``, under the name it is installed by.

``pip install .`` maps the package ``gradient_lab`` to ``lib/`` (``pyproject.toml``); this file does
the same for a checkout that is not installed (``streamlit run app.py``, ``python -m pytest``): it
points the package's path at ``lib/`` and runs ``lib/__init__.py`` as its own, so every module has
one name and one copy, whichever way Gradient Lab is run. See ``docs/DESIGN.md``.
"""

import os as _os

__path__ = [_os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "lib")]
with open(_os.path.join(__path__[0], "__init__.py"), encoding="utf-8") as _init:
    exec(compile(_init.read(), _init.name, "exec"))  # noqa: S102 - lib/__init__.py, as this package's own
