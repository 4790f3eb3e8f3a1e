"""Names a package exports from its modules, loaded on first use (PEP 562 module ``__getattr__``)."""
from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(namespace: dict, exports: dict[str, str]) -> Callable[[str], object]:
    """The ``__getattr__`` of the package whose globals are ``namespace``: ``exports`` maps each exported
    name to the module defining it, imported at the name's first use (then kept in ``namespace``)."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
