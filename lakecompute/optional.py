"""Optional dependencies: a package imported when a feature first needs it (``import lakecompute`` loads
none of them), or one library error that says which feature needs it and how to install it.

Example:
    >>> math = require("math", "Counting")
    >>> try:
    ...     require("nope", "Counting")
    ... except InvalidArgumentError as exc:
    ...     print(exc)
    Counting needs the package 'nope', which is not installed. Install it with: pip install nope
"""

from __future__ import annotations

import importlib
from types import ModuleType

from lakecompute.errors import InvalidArgumentError

__all__ = ["require"]


def require(module: str, purpose: str, install: str = "", instead: str = "") -> ModuleType:
    """Import ``module`` (a dotted name imports its package too).

    Args:
        module: what to import, e.g. ``"pyarrow.parquet"``.
        purpose: the feature that needs it, the error's subject ("to_ray()", "Tables").
        install: the command that installs it (default: ``pip install <package>``).
        instead: what to do without it, said after the install command.

    Raises:
        InvalidArgumentError: the package is not installed (or fails to import), naming it, ``purpose``
            and the install command.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        message = (
            f"{purpose} needs the package {package!r}, which is not installed. "
            f"Install it with: {install or 'pip install ' + package}"
        )
        raise InvalidArgumentError(message + (f"; {instead}" if instead else "")) from exc
