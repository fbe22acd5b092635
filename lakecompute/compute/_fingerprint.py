"""Fingerprints of evals: what makes a rerun "the same eval".

A fingerprint hashes the code of every compute function together with what that code depends on —
its bound arguments, the variables it captured in a closure, and the module globals it reads (by
value, recursively into the user's own functions) — plus the input's identity (location, version and
positions for datasets; content for plain sequences), the output tensors and the options that change
what is written. It is how a rerun finds the checkpoints of an interrupted run, and how an identical
completed eval is recognised and not written twice.

Everything a function binds is covered: its bound arguments, its parameters' defaults (positional and
keyword-only: ``def f(sample_in, sample_out, s=i)`` in a loop makes a different eval for each ``i``),
the variables it captured in a closure, the object a bound method is bound to, a class's attributes, the
globals it reads, and what a class inherits from its user base classes (their code, attributes and
globals; library bases by name). A value with no stable identity (a model object, a lock) inside the
functions is identified by its type alone, and the eval warns once, naming it and ``rerun=True`` (an
eval that differs from an earlier one only in that value counts as the same eval); a random key would
silently defeat resume and the no-op rerun. An *input* without an identity raises `FingerprintError`
(the eval is not recorded). Library code (the standard library, installed packages, lakecompute) is
identified by its qualified name only, a library module by its name. A module of the user's read as a
global (``config.SCALE``) is covered by what the code reads through it (the attribute chains after it in
the bytecode); code that uses it otherwise (passes it whole) names it as uncovered. Code whose source
cannot be read (``exec``, ``python -c``) is identified by its compiled form: bytecode, names, variables,
signature and constants (nested code the same way).
"""

from __future__ import annotations

import dataclasses
import dis
import hashlib
import inspect
import os
import struct
import sys
import sysconfig
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import FingerprintError, warn

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline

__all__ = ["describe_for_fingerprints", "fingerprint_eval", "fingerprint_job", "fingerprint_value"]

#: What identifies values of kinds lakecompute does not own (see `describe_for_fingerprints`).
_DESCRIBERS: list[Callable[[Any], Any]] = []


def describe_for_fingerprints(describer: Callable[[Any], Any]) -> None:
    """Teach fingerprints a kind of value whose type cannot carry ``__lakecompute_fingerprint__`` (a
    library's class), as ``copyreg`` teaches pickle: ``describer(value)`` returns plain data identifying a
    value it knows (an albumentations pipeline: ``A.to_dict``), or ``NotImplemented`` for any other.
    Asked only for values fingerprints could not identify otherwise, in the order registered."""
    _DESCRIBERS.append(describer)


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL"})


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lakecompute itself
    return tuple(os.path.abspath(r) + os.sep for r in roots)


_LIBRARY_ROOTS = _library_roots()


def _is_library(obj: Any) -> bool:
    """Whether ``obj`` is defined by library code (identified by name, not by its source)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return module is not None and _is_library_module(module)


def _is_library_module(module: types.ModuleType) -> bool:
    """Whether ``module`` is library code: built in, or its files under the standard library, the
    installed packages or lakecompute (not ``__main__``, not a module of the user's own)."""
    if module.__name__ == "__main__":
        return False
    path = getattr(module, "__file__", None)
    paths = [path] if path is not None else list(getattr(module, "__path__", None) or [])
    return all(os.path.abspath(str(p)).startswith(_LIBRARY_ROOTS) for p in paths)


class _Hasher:
    """Feeds a canonical byte form of values into a sha256.

    A value with no stable identity raises FingerprintError, or, when ``lenient`` (what functions bind),
    is fed as its type's name and listed in ``uncovered`` (what -> type name), shared with sub-hashers.
    """

    def __init__(self, lenient: bool = False, uncovered: dict[str, str] | None = None) -> None:
        self._h = hashlib.sha256()
        self._code_seen: set[int] = set()
        self.lenient = lenient
        self.uncovered: dict[str, str] = {} if uncovered is None else uncovered

    def _sub(self, value: Any, what: str) -> str:
        """The digest of ``value`` alone (a dict's or set's item, sorted by it), as leniently as this."""
        h = _Hasher(self.lenient, self.uncovered)
        h.value(value, what)
        return h.digest()

    def digest(self) -> str:
        return self._h.hexdigest()[:32]

    def key(self, text: str) -> None:
        """Feed a name that labels the next value (a keyword argument's, say)."""
        self._text(b"k", text)

    def _put(self, tag: bytes, data: bytes = b"") -> None:
        self._h.update(tag + struct.pack("<Q", len(data)) + data)

    def _text(self, tag: bytes, text: str) -> None:
        self._put(tag, text.encode("utf-8", "surrogatepass"))

    # -- values ----------------------------------------------------------------------------------
    def value(self, value: Any, what: str) -> None:
        """Feed ``value`` (named ``what`` in errors)."""
        if value is None or isinstance(value, (bool, int, float, complex, str)):
            self._text(b"p" + type(value).__name__.encode(), repr(value))
            return
        if isinstance(value, bytes):
            self._put(b"y", value)
            return
        if isinstance(value, np.generic):
            self._text(b"g", f"{value.dtype.str}:{value.item()!r}")
            return
        if isinstance(value, np.ndarray):
            self._array(value, what)
            return
        if isinstance(value, (list, tuple, range, dict, set, frozenset)):
            self._container(value, what)
            return
        self._object(value, what)

    def _array(self, value: np.ndarray, what: str) -> None:
        if value.dtype.kind == "O":
            self._container(value.tolist(), what)
            return
        self._text(b"a", f"{value.dtype.str}{value.shape}")
        self._h.update(np.ascontiguousarray(value).tobytes())

    def _container(self, value: Any, what: str) -> None:
        if isinstance(value, range):
            self._text(b"r", f"{value.start}:{value.stop}:{value.step}")
        elif isinstance(value, dict):
            items = sorted((repr(k), self._sub(v, f"{what}[{k!r}]")) for k, v in value.items())
            self._text(b"d", repr(items))
        elif isinstance(value, (set, frozenset)):
            self._text(b"s", repr(sorted(self._sub(v, what) for v in value)))
        else:
            self._text(b"l" + type(value).__name__.encode(), str(len(value)))
            stacked = _homogeneous(value)
            if stacked is not None:  # one hash of the stacked values: 1M ints in ~0.1 s, not ~1 s
                self._array(stacked, what)
                if stacked.dtype.kind == "U":  # its padding hides trailing NULs ("a" and "a\x00"): lengths
                    self._array(np.fromiter(map(len, value), np.int64, len(value)), what)
                return
            for i, v in enumerate(value):
                self.value(v, f"{what}[{i}]")

    def _object(self, value: Any, what: str) -> None:
        custom = getattr(value, "__lakecompute_fingerprint__", None)
        if callable(custom) and not isinstance(value, type):
            self._text(b"c", type(value).__qualname__)
            self.value(custom(), what)
            return
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            self.code(type(value), what)
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            self.value(fields, what)
            return
        inner = getattr(value, "func", None)
        if inner is not None and hasattr(value, "args") and callable(inner):
            # functools.partial, our ComputeFunction and compute factories: the function and its arguments.
            self.code(inner, what)
            self.value(tuple(getattr(value, "args", ())), f"{what}.args")
            self.value(dict(getattr(value, "kwargs", None) or getattr(value, "keywords", None) or {}), what)
            return
        if isinstance(value, types.ModuleType) and _is_library_module(value):
            self._text(b"m", value.__name__)
            return
        if isinstance(value, types.ModuleType):  # a module of the user's: what is read from it is unknown
            self._unknown(value, what)
            return
        if inspect.isroutine(value) or inspect.isclass(value) or isinstance(value, np.ufunc):
            self.code(value, what)  # instances are values, never code: a model object is not its class
            return
        self._unknown(value, what)

    def _unknown(self, value: Any, what: str) -> None:
        """A value no registered describer knows has no stable identity: by its type's name (listed in
        ``uncovered``) when lenient."""
        kind = type(value)
        for describer in _DESCRIBERS:
            described = describer(value)
            if described is not NotImplemented:
                self._text(b"d", f"{kind.__module__}.{kind.__qualname__}")
                self.value(described, what)
                return
        if self.lenient:
            self._text(b"u", f"{kind.__module__}.{kind.__qualname__}")
            self.uncovered.setdefault(what, kind.__name__)
            return
        raise FingerprintError(
            f"Cannot fingerprint {what} of type {type(value).__name__}: it has no stable identity, so a "
            "rerun could not be recognised as the same eval. Pass plain values (numbers, strings, lists, "
            "dicts, numpy arrays), give the type a __lakecompute_fingerprint__() method, or run without "
            "checkpoint_interval."
        )

    # -- code ------------------------------------------------------------------------------------
    def code(self, obj: Any, what: str) -> None:
        """Feed a function or class: its name, its source, and (for user code) what it depends on."""
        name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', None) or repr(obj)}"
        self._text(b"n", name)
        if _is_library(obj) or id(obj) in self._code_seen:
            return  # library code by name; user code once (it may refer to itself)
        self._code_seen.add(id(obj))
        if inspect.ismethod(obj):  # a bound method: the object it is bound to is an argument of it
            self.value(obj.__self__, f"the object {name} is bound to")
            obj = obj.__func__
        try:
            self._text(b"S", _source(obj, name))
        except FingerprintError:
            if not self.lenient:
                raise
            self._text(b"u", name)
            self.uncovered.setdefault(f"the code of {name}", "source not available")
        for function in _functions_of(obj):
            self._defaults(function, name)
            self._closure(function, name)
            self._globals(function, name)
        if inspect.isclass(obj):
            self._class_attributes(obj, name)
            for base in obj.__bases__:  # what it inherits: user bases' code, globals and attributes
                self.code(base, f"base {base.__qualname__} of {name}")

    def _defaults(self, function: types.FunctionType, name: str) -> None:
        """The defaults of its parameters: the loop idiom ``def f(sample_in, sample_out, s=i)`` binds
        ``i`` there, with the same source for every ``i``."""
        code = function.__code__
        defaults = function.__defaults__ or ()
        params = code.co_varnames[: code.co_argcount]
        bound = dict(zip(params[len(params) - len(defaults) :], defaults, strict=True))
        bound.update(function.__kwdefaults__ or {})
        for param in sorted(bound):
            self._text(b"D", param)
            self.value(bound[param], f"the default of {param!r} in {name}")

    def _class_attributes(self, cls: type, name: str) -> None:
        """A class's own attributes other than its functions (``class C: scale = i`` in a loop)."""
        for attr, value in sorted(vars(cls).items()):
            if attr.startswith("__") or isinstance(value, (staticmethod, classmethod, property)):
                continue  # dunders are the class machinery; methods and properties are code (below)
            if inspect.isfunction(value):
                continue
            self._text(b"A", attr)
            self.value(value, f"attribute {attr!r} of {name}")

    def _closure(self, function: types.FunctionType, name: str) -> None:
        for var, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=False):
            self._text(b"v", var)
            try:
                contents = cell.cell_contents
            except ValueError:
                self._text(b"e", "empty")
                continue
            self.value(contents, f"variable {var!r} captured by {name}")

    def _globals(self, function: types.FunctionType, name: str) -> None:
        namespace = function.__globals__
        for var in sorted(_global_names(function.__code__)):
            if var not in namespace:
                continue
            self._text(b"G", var)
            value = namespace[var]
            if isinstance(value, types.ModuleType) and not _is_library_module(value):
                self._module_reads(function.__code__, var, value, name)
            else:
                self.value(value, f"global {var!r} read by {name}")

    def _module_reads(self, code: types.CodeType, var: str, module: types.ModuleType, name: str) -> None:
        """A module of the user's read as global ``var``: the values the code reads through it
        (``cfg.SCALE``, ``cfg.sub.X``); used otherwise (passed whole), it is uncovered."""
        self._text(b"m", module.__name__)
        chains = _attribute_reads(code, var)
        if chains is None:
            self._unknown(module, f"module {var!r}, which {name} uses whole (not only by its attributes)")
            return
        reads = dict(_read_through(module, var, chain) for chain in chains)
        for label in sorted(reads):
            self._text(b"R", label)
            if reads[label] is _MISSING:
                self._text(b"e", "missing")
            else:
                self.value(reads[label], f"global {label!r} read by {name}")


_PLAIN = (int, float, str, bool)


def _homogeneous(items: list[Any] | tuple[Any, ...]) -> np.ndarray | None:
    """``items`` stacked into one array when they are many values of exactly one plain type (int, float,
    str, bool), or arrays of one dtype and shape — so equal stacks mean equal items; else None."""
    if len(items) < 64:
        return None
    first = items[0]
    kind = type(first)
    if kind in _PLAIN:
        if not all(type(v) is kind for v in items):
            return None
    elif kind is np.ndarray and first.dtype.kind in "biufc":
        shape, dtype = first.shape, first.dtype
        if not all(type(v) is np.ndarray and v.shape == shape and v.dtype == dtype for v in items):
            return None
    else:
        return None
    try:
        stacked = np.asarray(items)
    except (ValueError, OverflowError):
        return None  # ints too large for int64, say: hashed one by one
    return stacked if stacked.dtype.kind != "O" else None


def _source(obj: Any, name: str) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        pass
    code = getattr(obj, "__code__", None)
    if code is None and inspect.isclass(obj):
        code = getattr(inspect.getattr_static(obj, "__call__", None), "__code__", None)
    if code is None:
        raise FingerprintError(
            f"Cannot fingerprint {name}: its source code is not available. "
            "Define it in a module file, or run without checkpoint_interval."
        ) from None
    return _code_bytes(code).hex()


def _code_bytes(code: types.CodeType) -> bytes:
    """Compiled code in full, where its source is not available (``exec``, ``python -c``): the bytecode
    alone refers to names by position, so ``math.sin`` and ``math.cos`` had one form. Its names,
    variables, signature and constants (nested functions' code in the same form), each length-prefixed."""
    names = (code.co_name, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
    signature = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)
    parts = [repr((names, signature)).encode(), code.co_code, *map(_const_bytes, code.co_consts)]
    return b"".join(struct.pack("<Q", len(part)) + part for part in parts)


def _const_bytes(const: Any) -> bytes:
    if isinstance(const, types.CodeType):
        return _code_bytes(const)
    if isinstance(const, frozenset):  # ``x in {"a", "b"}``: its repr's order changes with the hash seed
        return repr(sorted(map(_const_bytes, const))).encode()
    return repr(const).encode()


def _functions_of(obj: Any) -> list[types.FunctionType]:
    """The Python functions whose closures and globals ``obj`` depends on (a class: its methods)."""
    if inspect.isfunction(obj):
        return [obj]
    if not inspect.isclass(obj):
        return []
    out: list[types.FunctionType] = []
    for attr in vars(obj).values():
        if isinstance(attr, property):
            targets = [attr.fget, attr.fset, attr.fdel]
        else:
            targets = [attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr]
        out.extend(t for t in targets if inspect.isfunction(t))
    return out


_ATTRIBUTE_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_MISSING: Any = object()  # what a module does not have (yet)


def _attribute_reads(code: types.CodeType, var: str) -> set[tuple[str, ...]] | None:
    """The attribute chains ``code`` (and the code nested in it) reads through global ``var``
    (``var.a.b``: ``("a", "b")``); None where it uses ``var`` otherwise (passes it to a call, say)."""
    instructions = list(dis.get_instructions(code))
    chains: set[tuple[str, ...]] = set()
    for i, instruction in enumerate(instructions):
        if instruction.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or instruction.argval != var:
            continue
        chain: list[str] = []
        for following in instructions[i + 1 :]:
            if following.opname not in _ATTRIBUTE_OPS:
                break
            chain.append(following.argval)
        if not chain:
            return None
        chains.add(tuple(chain))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = _attribute_reads(const, var)
            if inner is None:
                return None
            chains |= inner
    return chains


def _read_through(module: types.ModuleType, var: str, chain: tuple[str, ...]) -> tuple[str, Any]:
    """What ``var.<chain>`` reads from ``module``, by its label: the chain followed while it names the
    user's modules (``pkg.sub.X``), up to the first other value (``cfg.table``, whole)."""
    label = var
    target: Any = module
    for attr in chain:
        label, target = f"{label}.{attr}", getattr(target, attr, _MISSING)
        if not isinstance(target, types.ModuleType) or _is_library_module(target):
            break
    return label, target


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def fingerprint_value(value: Any, what: str) -> str:
    """A digest of ``value`` that is equal exactly when the value is.

    Raises:
        FingerprintError: the value has no stable identity (named by ``what``).
    """
    return _Hasher()._sub(value, what)


def fingerprint_eval(pipeline: Pipeline, input_identity: Any, output: Any) -> str:
    """The fingerprint of an eval: functions (and what they read), arguments, input and output.

    A value the functions bind that has no stable identity is identified by its type alone, with one
    `LakeComputeWarning` naming every such value and ``rerun=True``.

    Raises:
        FingerprintError: the input or output cannot be fingerprinted (named in the message).
    """
    h = _Hasher()
    _functions(h, pipeline)
    h.value(input_identity, "data_in")
    h.value(output, "data_out")
    if h.uncovered:
        _warn_uncovered(pipeline, h.uncovered)
    return h.digest()


def _warn_uncovered(pipeline: Pipeline, uncovered: Mapping[str, str]) -> None:
    named = "; ".join(f"{what} (a {kind})" for what, kind in uncovered.items())
    names = " → ".join(f.name for f in pipeline.functions)
    warn(
        f"The eval of {names} cannot fingerprint {named}: no stable identity, so it is identified by its "
        "type alone, and an eval into the same output that differs only in it counts as the same eval (a "
        "completed one is not run again, an interrupted one resumes). Pass rerun=True to run it anyway, "
        "or give the type a __lakecompute_fingerprint__() method returning what identifies the value."
    )


def fingerprint_code(pipeline: Pipeline) -> str:
    """The fingerprint of a pipeline's functions alone: their code, what they read, their arguments (the
    lineage a version records: which code made it, whatever its input).

    A value with no stable identity is identified by its type (quietly: the eval's fingerprint warns).
    """
    h = _Hasher()
    _functions(h, pipeline)
    return h.digest()


def _functions(h: _Hasher, pipeline: Pipeline) -> None:
    """Feed the functions, leniently: what they bind that has no identity is named in ``h.uncovered``."""
    h.lenient = True
    try:
        _feed_functions(h, pipeline)
    finally:
        h.lenient = False


def _feed_functions(h: _Hasher, pipeline: Pipeline) -> None:
    for f in pipeline.functions:
        h.code(f.func, f.name)
        for i, a in enumerate(f.args):
            h.value(a, f"argument {i} of {f.name}")
        for k in sorted(f.kwargs):
            h.key(k)
            h.value(f.kwargs[k], f"argument {k!r} of {f.name}")


def fingerprint_job(pipeline: Pipeline, input_identity: Any, output: Any) -> str:
    """What an eval is *for*: its functions' names (not their code or arguments), input and output.

    Two evals with the same job and different fingerprints are one eval whose code was fixed between
    runs: the second continues after what the first kept.

    Raises:
        FingerprintError: the input or output cannot be fingerprinted.
    """
    h = _Hasher()
    h.value([f.name for f in pipeline.functions], "the function names")
    h.value(input_identity, "data_in")
    h.value(output, "data_out")
    return h.digest()
