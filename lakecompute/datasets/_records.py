"""What a dataset remembers about the evals written into it: typed records in the version manifests.

An eval whose inputs can be fingerprinted leaves an `EvalRecord` under its fingerprint in the
manifest of every version it commits: at each checkpoint (``status="running"``) and at the end
(``status="done"``). The record is how a rerun is recognised — resumed after the last checkpoint, or
skipped when it already completed — and it is part of the version, so it is committed atomically
with the outputs it describes.

A record is kept whole only in the manifest of the version that committed it; every later manifest
carries a *reference* instead (`lakecompute.versioned._evals`). A rerun that finds a reference reads the
record from its version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lakecompute.errors import DatasetCorruptError
from lakecompute.parsing import parse_count
from lakecompute.versioned import Fragment, Manifest

__all__ = [
    "MAX_RECORDED_FAILURES",
    "EvalProgress",
    "EvalRecord",
    "FailedSample",
    "parse_records",
    "reference_of",
]

#: Failures kept in full in a record (``ignore_errors=True`` may skip many; the manifest stays small).
MAX_RECORDED_FAILURES = 1000
_MAX_TRACEBACK = 4000


@dataclass(frozen=True, slots=True)
class FailedSample:
    """A sample skipped with ``ignore_errors=True``.

    Attributes:
        index: its position in ``data_in``.
        function: the compute function that failed.
        error_type: the exception's type name.
        message: the exception's message.
        traceback: the formatted traceback from where it ran.
        row: for dataset input (a view included), the dataset row it was read from; None otherwise (and
            in records written before rows were kept).
    """

    index: int
    function: str
    error_type: str
    message: str
    traceback: str
    row: int | None = None

    def to_json(self) -> list[Any]:
        tb = self.traceback[-_MAX_TRACEBACK:]
        fields = [self.index, self.function, self.error_type, self.message, tb]
        return fields if self.row is None else [*fields, self.row]

    @classmethod
    def from_json(cls, row: Any) -> FailedSample:
        index, function, error_type, message, tb, *rest = row
        at = int(rest[0]) if rest and rest[0] is not None else None
        return cls(int(index), str(function), str(error_type), str(message), str(tb), at)

    def __repr__(self) -> str:
        at = "" if self.row is None else f", row={self.row}"
        return f"FailedSample(index={self.index}{at}, {self.error_type}: {self.message!s:.80})"


@dataclass(frozen=True, slots=True)
class EvalProgress:
    """How far an eval got, as its engine reports it at a checkpoint or at the end.

    Attributes:
        done: inputs whose outputs are applied (a prefix of the input).
        outputs: samples written per tensor.
        failed: samples skipped with ``ignore_errors=True``.
        seed: the seed of the eval's ``rng`` generators.
        seconds: wall time so far.
    """

    done: int
    outputs: Mapping[str, int]
    failed: tuple[FailedSample, ...] = ()
    seed: int | None = None
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class EvalRecord:
    """One eval's progress as a version records it.

    Attributes:
        fingerprint: what identifies the eval (its code, arguments, input, output and options).
        status: ``"running"`` at a checkpoint, ``"done"`` once complete.
        done: inputs whose outputs this version holds (all of them when done).
        outputs: samples written per tensor up to ``done``.
        failed: samples skipped with ``ignore_errors=True`` up to ``done`` (at most
            `MAX_RECORDED_FAILURES` of them).
        failed_count: how many samples were skipped in all.
        base_version: the version the eval started from (its input, for an in-place eval).
        version: the version this record was committed in.
        label: the compute functions, for logs and messages.
        seed: the seed the eval's ``rng`` generators were derived from.
        in_place: whether the eval transforms its input in place.
        written: for an in-place eval, the tensors it replaces (the others keep their content).
        open_dtypes: generic tensors whose dtype the eval's data decides; a checkpoint commits the dtype
            of the values so far, which the rest of the eval may still widen.
        parked: for an in-place eval at a checkpoint, the new fragments of ``written`` tensors, kept
            aside until the final commit swaps them in (readers still see the old content).
        seconds: wall time up to ``done``.
        job: what the eval is for (its functions' names, input and output, not their code): a run
            with the same job and changed code continues this one (``fingerprint_job``).
    """

    fingerprint: str
    status: Literal["running", "done"]
    done: int
    outputs: Mapping[str, int]
    failed: tuple[FailedSample, ...] = ()
    failed_count: int = 0
    base_version: int = 0
    version: int = 0
    label: str = ""
    seed: int | None = None
    in_place: bool = False
    written: tuple[str, ...] = ()
    open_dtypes: tuple[str, ...] = ()
    parked: Mapping[str, tuple[Fragment, ...]] = field(default_factory=dict)
    seconds: float = 0.0
    job: str = ""

    @property
    def complete(self) -> bool:
        return self.status == "done"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "done": self.done,
            "outputs": dict(self.outputs),
            "failed": [f.to_json() for f in self.failed[:MAX_RECORDED_FAILURES]],
            "failed_count": self.failed_count,
            "base_version": self.base_version,
            "version": self.version,
            "label": self.label,
            "seed": self.seed,
            "in_place": self.in_place,
            "written": list(self.written),
            "open_dtypes": list(self.open_dtypes),
            "parked": {k: [f.to_json() for f in v] for k, v in self.parked.items()},
            "seconds": self.seconds,
            "job": self.job,
        }

    @classmethod
    def from_json(cls, fingerprint: str, obj: Mapping[str, Any]) -> EvalRecord:
        """Rebuild a record; raises ValueError/TypeError/KeyError on a malformed one."""
        status = obj["status"]
        if status not in ("running", "done"):
            raise ValueError(f"status {status!r}")
        seed = obj.get("seed")
        return cls(
            fingerprint=fingerprint,
            status=status,
            done=parse_count("done", obj["done"]),
            outputs={str(k): parse_count(f"outputs[{k!r}]", v) for k, v in dict(obj["outputs"]).items()},
            failed=tuple(FailedSample.from_json(r) for r in obj.get("failed", [])),
            failed_count=parse_count("failed_count", obj.get("failed_count", len(obj.get("failed", [])))),
            base_version=parse_count("base_version", obj.get("base_version", 0)),
            version=parse_count("version", obj.get("version", 0)),
            label=str(obj.get("label", obj.get("functions", ""))),  # "functions": records before 0.2
            seed=None if seed is None else int(seed),
            in_place=bool(obj.get("in_place", False)),
            written=tuple(str(n) for n in obj.get("written", [])),
            open_dtypes=tuple(str(n) for n in obj.get("open_dtypes", [])),
            parked={
                str(k): tuple(Fragment.from_json(r) for r in v)
                for k, v in dict(obj.get("parked", obj.get("pending", {}))).items()  # "pending": before 0.2
            },
            seconds=float(obj.get("seconds", 0.0)),
            job=str(obj.get("job", "")),
        )


def reference_of(
    fingerprint: str, obj: dict[str, Any], url: str, manifest: Manifest
) -> tuple[int, EvalRecord]:
    """A reference's version, and the record as much as the reference itself tells (for when that
    version is gone: ``vacuum(keep_versions=...)``).

    Raises:
        DatasetCorruptError: the reference is malformed.
    """
    try:
        at, status = parse_count("at", obj["at"]), obj["status"]
        if status not in ("running", "done"):
            raise ValueError(f"status {status!r}")
        return at, EvalRecord(fingerprint, status, parse_count("done", obj.get("done", 0)), {}, version=at)
    except (ValueError, TypeError, KeyError) as exc:
        reason = f"eval record reference {fingerprint!r}: {type(exc).__name__}: {exc}"
        raise DatasetCorruptError(url, manifest.key, reason) from exc


def parse_records(manifest: Manifest, url: str) -> dict[str, EvalRecord]:
    """The typed eval records a version's manifest keeps whole (those it committed), by fingerprint.

    Raises:
        DatasetCorruptError: a record is malformed (names the manifest file, the record and the problem).
    """
    out: dict[str, EvalRecord] = {}
    for fp, obj in manifest.evals.items():
        if "at" in obj:
            continue  # a reference to a record kept whole in an earlier version
        try:
            out[fp] = EvalRecord.from_json(fp, obj)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            reason = f"eval record {fp!r}: {type(exc).__name__}: {exc}"
            raise DatasetCorruptError(url, manifest.key, reason) from exc
    return out
