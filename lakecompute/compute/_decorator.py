"""``@lc.compute`` and ``lc.compose``: turning user functions into runnable transforms."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, overload

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, LakeComputeError, TransformError

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.compute._engine import EvalResult
    from lakecompute.compute._options import EvalKwargs

__all__ = ["ComputeFunction", "Pipeline", "Transform", "compose", "compute"]

P = ParamSpec("P")


class Transform:
    """What ``eval`` runs: a `ComputeFunction` (one function with its arguments bound) or a `Pipeline`.

    Both take ``eval``'s options, typed once in `lakecompute.compute.EvalKwargs` (so a misspelt option
    is a type error in an editor and in mypy, and an `InvalidTypeError` at run time).
    """

    def _stages(self) -> Pipeline:
        """The pipeline this transform runs."""
        raise NotImplementedError

    def eval(self, data_in: Any, data_out: Any = None, **options: Unpack[EvalKwargs]) -> EvalResult:
        """Run the transform over ``data_in`` and write the outputs into ``data_out``.

        Args:
            data_in: a Dataset or view, a sequence (list, numpy array, anything with ``__len__`` and
                ``__getitem__``), or an iterable without a length (streamed).
            data_out: the Dataset to write; None to transform ``data_in`` (a Dataset) in place: the tensors
                the functions write are replaced in one commit, the others keep their content.
            **options: the options of `lakecompute.compute.EvalKwargs`, by keyword.

        Returns:
            An `EvalResult`.

        Raises:
            TransformError: user code failed on a sample (``.index``, ``.sample``, ``__cause__``).
            InvalidTypeError: an option of the wrong type, or one ``eval`` does not take.
            InvalidArgumentError: an option out of range (a negative ``num_workers``, say).
        """
        from lakecompute.compute._engine import run_eval
        from lakecompute.compute._options import EvalOptions

        try:
            parsed = EvalOptions.parse(dict(options))
            stages = self._stages()
        except LakeComputeError as exc:
            from lakecompute.compute._distributed import refuse_on_every_rank

            refuse_on_every_rank(exc)  # in a torch.distributed job the other ranks raise too, not wait
            raise
        try:
            return run_eval(stages, data_in, data_out, parsed)
        except TransformError as err:
            # Raised again from here: the traceback shows the user's call and this frame, not the
            # engine's internals (the worker's full traceback is in err.remote_traceback).
            raise err.with_traceback(None) from err.__cause__


class ComputeFunction(Transform):
    """A compute function with its extra arguments bound; nothing runs until `eval`.

    Attributes:
        func: the decorated function, or the decorated class.
        args: bound positional arguments (after ``sample_in, sample_out``).
        kwargs: bound keyword arguments.
    """

    def __init__(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs

    @property
    def name(self) -> str:
        return getattr(self.func, "__qualname__", None) or repr(self.func)

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.func)

    @property
    def wants_rng(self) -> bool:
        """Whether the function (or the class's ``__call__``) takes an ``rng`` argument: a seeded
        ``numpy.random.Generator`` per sample (see ``eval(seed=)``)."""
        return _takes_rng(self.func)

    def instantiate(self) -> Callable[..., Any]:
        """The per-sample callable, ``call(sample_in, sample_out)`` (plus ``rng=`` if it takes one): a
        bound function, or a new instance of the class (its ``__init__`` runs here — once per worker)."""
        if self.is_class:
            instance: Callable[..., Any] = self.func(*self.args, **self.kwargs)
            return instance
        func, args, kwargs = self.func, self.args, self.kwargs
        if not args and not kwargs:
            return func
        return lambda sample_in, sample_out, **rng: func(sample_in, sample_out, *args, **kwargs, **rng)

    def _stages(self) -> Pipeline:
        return Pipeline([self])

    def __repr__(self) -> str:
        bound = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(bound)})"


class Pipeline(Transform):
    """Compute functions run one after another on each sample, fused inside one worker.

    Every output sample of step k is a ``sample_in`` of step k+1; nothing is written between steps.
    """

    def __init__(self, functions: Sequence[ComputeFunction]) -> None:
        self.functions = list(functions)

    def __len__(self) -> int:
        return len(self.functions)

    def __repr__(self) -> str:
        return f"Pipeline([{', '.join(repr(f) for f in self.functions)}])"

    def _stages(self) -> Pipeline:
        return self


class _ComputeFactory(Generic[P]):
    """What ``@lc.compute`` returns: call it with the extra arguments to get a ComputeFunction."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> ComputeFunction:
        if "rng" in kwargs and _takes_rng(self.func):
            raise InvalidArgumentError(
                f"{getattr(self.func, '__name__', self.func)}(rng=...): rng is given to the function by "
                "eval, one seeded generator per sample. Pass seed= to eval instead."
            )
        return ComputeFunction(self.func, tuple(args), dict(kwargs))

    def eval(self, *args: Any, **kwargs: Any) -> Any:
        """Refuse, explaining: a factory must be called (binding its arguments) before ``.eval``."""
        name = getattr(self.func, "__name__", "fn")
        raise InvalidTypeError(
            f"{name}.eval(...) is called on the compute factory itself: call it first to bind its "
            f"arguments, then eval: {name}().eval(...) (or {name}(arg=...).eval(...))."
        )

    def __repr__(self) -> str:
        return f"<lakecompute.compute {getattr(self.func, '__qualname__', self.func)!r}>"


class _PerSample(Protocol):
    """An instance of a class `compute` decorates: called once per sample (``rng=`` too, if it takes it)."""

    def __call__(self, sample_in: Any, sample_out: Any, /, *args: Any, **kwargs: Any) -> Any: ...


# Typed so that the factory's call takes what the function takes after (sample_in, sample_out), or
# what the class's __init__ takes: a misspelt or mistyped bound argument is a type error. A class is
# matched first (its instances are per-sample callables, which a plain function's result is not).
# mypy ignores what a class decorator returns, so it checks `@lc.compute class C` as C itself: C(...)'s
# arguments are checked against __init__ all the same (pyright, and `lc.compute(C)`, see the factory).
@overload
def compute(func: Callable[P, _PerSample]) -> _ComputeFactory[P]: ...
@overload
def compute(func: Callable[Concatenate[Any, Any, P], Any]) -> _ComputeFactory[P]: ...
def compute(func: Callable[..., Any]) -> _ComputeFactory[Any]:
    """Make a transform of ``f(sample_in, sample_out, *args, **kwargs)`` (or of a class).

    Calling the result binds the extra arguments and returns a `ComputeFunction`; nothing
    runs until ``.eval(...)``. On a class, ``__init__(*args, **kwargs)`` runs once per worker (load a
    model once) and ``__call__(sample_in, sample_out)`` runs per sample.

    Example:
        >>> @lc.compute
        ... def double(sample_in, sample_out, factor=2):
        ...     sample_out.x.append(sample_in * factor)
        >>> double(factor=3)
        double(factor=3)
    """
    if not callable(func):
        raise InvalidTypeError(f"@lc.compute decorates a function or a class. Got {type(func).__name__}.")
    if inspect.isclass(func):
        if not callable(getattr(func, "__call__", None)):  # noqa: B004 (classes are callable; we need instances to be)
            raise InvalidTypeError(
                f"@lc.compute on class {func.__name__}: it needs __call__(self, sample_in, sample_out)."
            )
    else:
        try:
            params = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        if params and len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in params):
            raise InvalidArgumentError(
                f"@lc.compute function {getattr(func, '__name__', func)!r} must take "
                "(sample_in, sample_out, ...). "
                f"Got parameters {[p.name for p in params]!r}."
            )
    return _ComputeFactory(func)


def compose(functions: Sequence[ComputeFunction | Pipeline]) -> Pipeline:
    """Chain compute functions into a `Pipeline`.

    Example:
        >>> @lc.compute
        ... def a(sample_in, sample_out):
        ...     sample_out.x.append(sample_in)
        >>> lc.compose([a(), a()])
        Pipeline([a(), a()])
    """
    if isinstance(functions, (ComputeFunction, Pipeline)) or not isinstance(functions, Sequence):
        raise InvalidTypeError(
            f"lc.compose takes a list of compute functions. Got {type(functions).__name__}."
        )
    flat: list[ComputeFunction] = []
    for f in functions:
        if isinstance(f, Pipeline):
            flat.extend(f.functions)
        elif isinstance(f, ComputeFunction):
            flat.append(f)
        elif isinstance(f, _ComputeFactory):
            raise InvalidTypeError(
                f"lc.compose got {f!r}, a compute factory: call it to bind its arguments, "
                f"e.g. {f.func.__name__}()."
            )
        else:
            raise InvalidTypeError(f"lc.compose takes compute functions (made with @lc.compute). Got {f!r}.")
    if not flat:
        raise InvalidArgumentError("lc.compose needs at least one compute function. Got an empty list.")
    return Pipeline(flat)


def as_pipeline(transform: ComputeFunction | Pipeline) -> Pipeline:
    """A pipeline of one function, or the pipeline itself.

    Raises:
        InvalidTypeError: ``transform`` is neither (a factory that was not called, say).
    """
    if isinstance(transform, Pipeline):
        return transform
    if isinstance(transform, ComputeFunction):
        return Pipeline([transform])
    if isinstance(transform, _ComputeFactory):
        raise InvalidTypeError(
            f"Got {transform!r}, a compute factory: call it to bind its arguments, "
            f"e.g. {transform.func.__name__}()."
        )
    raise InvalidTypeError(
        "Expected a compute function (made with @lc.compute and called) or lc.compose([...]). "
        f"Got {transform!r}."
    )


def _takes_rng(func: Callable[..., Any]) -> bool:
    target = getattr(func, "__call__", None) if inspect.isclass(func) else func  # noqa: B004 (the class's instances' call)
    try:
        params = inspect.signature(target).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    rng = params.get("rng")
    return rng is not None and rng.kind in (rng.POSITIONAL_OR_KEYWORD, rng.KEYWORD_ONLY)
