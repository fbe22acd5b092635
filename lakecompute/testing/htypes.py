"""A conformance suite every htype runs: ``HTypeTests`` (as `BackendTests` for storage backends and
`SchedulerTests` for schedulers).

Subclass it in a test module and give the ``htype`` fixture; parametrised over the declarations, every
registered htype runs it, and a new one is covered the moment it is declared::

    import pytest
    from lakecompute.specs import HTYPES
    from lakecompute.testing.htypes import HTypeTests

    class TestEveryHType(HTypeTests):
        @pytest.fixture(params=list(HTYPES))
        def htype(self, request: pytest.FixtureRequest) -> str:
            return request.param

Each htype's tensors and samples come from its cases (`lakecompute.testing.htype_cases`). The suite
checks that the declaration and the codec agree, that valid samples read back exactly (dtype, shape and
bytes) whichever way they are written (one by one, as a list, as one stacked array) and after the
dataset is reopened from disk, that hostile values are refused with an `InvalidSampleError` naming the
tensor and store nothing, that any near-valid value is stored (and stores again as it reads back) or
refused so, that damaged blobs fail as library errors, that the pad value fits the tensor, and that its
samples survive a round trip through an Arrow table (``lc.from_arrow(ds.to_arrow())``) exactly: the
tensor's declaration, its info and every sample, encoded ones as the same stored bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.datasets import pad_value
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, LakeComputeError
from lakecompute.htypes import CODECS, decode_sample
from lakecompute.specs import HType, htype_declaration
from lakecompute.testing.htype_cases import HOSTILE_TO_EVERY_HTYPE, HTypeCase, cases_of, near_valid_samples
from lakecompute.testing.internals import dataset_core

__all__ = ["HTypeTests", "assert_same_sample", "read_sample"]

_NUMERIC_DTYPES = ("bool", "uint8", "int16", "int64", "uint32", "float16", "float32", "float64", "complex64")
_serial = itertools.count()


def read_sample(tensor: Any, index: int) -> Any:
    """One sample as a user reads it: ``.numpy()`` for numbers (a list for polygons), ``.data()`` for
    values that are not numbers."""
    if htype_declaration(tensor.htype).numeric:
        return tensor[index].numpy()
    return tensor[index].data()


def assert_same_sample(got: Any, want: Any, *, lossy: bool = False, where: str = "") -> None:
    """``got`` is ``want`` exactly: arrays of one dtype, shape and bytes (nan and -0.0 included; with
    ``lossy``, dtype and shape only), lists item by item, other values equal and of one type."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: expected an array, got {type(got).__name__}"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{where}: {got!r:.200} != {want!r:.200}"
        assert lossy or got.tobytes() == want.tobytes(), f"{where}: {got!r:.200} != {want!r:.200}"
    elif isinstance(want, list):
        assert isinstance(got, list), f"{where}: expected a list, got {got!r:.200}"
        assert len(got) == len(want), f"{where}: {got!r:.200} != {want!r:.200}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_sample(g, w, lossy=lossy, where=f"{where}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: expected a dict, got {got!r:.200}"
        assert list(got) == list(want), f"{where}: keys {list(got)!r:.200} != {list(want)!r:.200}"
        for k in want:
            assert_same_sample(got[k], want[k], lossy=lossy, where=f"{where}[{k!r}]")
    else:
        assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
        assert got == want, f"{where}: {got!r:.80} != {want!r:.80}"


def _fresh(url: str) -> lc.Dataset:
    return lc.empty(url, overwrite=True)


def _create(ds: lc.Dataset, name: str, case: HTypeCase) -> Any:
    return ds.create_tensor(name, htype=case.htype, **case.options)


def _stackable(declared: HType, samples: list[Any]) -> bool:
    """Whether the samples can be written as one stacked array (numbers of one shape and dtype)."""
    if not declared.numeric or not declared.stacks or not all(isinstance(s, np.ndarray) for s in samples):
        return False
    return len({(s.shape, s.dtype) for s in samples}) == 1


def _settings(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class HTypeTests:
    """Tests every htype must pass. Subclass it and give the ``htype`` fixture."""

    examples: ClassVar[int] = 15
    """Hypothesis examples per property and htype (kept small: the suite runs for every htype)."""

    @pytest.fixture
    def htype(self) -> str:
        """The htype under test; override (parametrised over `lakecompute.specs.HTYPES`)."""
        raise NotImplementedError("give HTypeTests an htype fixture")

    # -- the declaration and its codec --------------------------------------------------------------

    def test_declaration_has_its_codec_and_cases(self, htype: str) -> None:
        """The htype is declared, has exactly its own codec registered, and has conformance cases."""
        declared = htype_declaration(htype)
        assert declared.name == htype
        assert CODECS[htype].declaration is declared
        assert {case.htype for case in cases_of(htype)} == {declared.name}

    def test_created_tensor_follows_the_declaration(self, htype: str) -> None:
        """A tensor created with the htype gets its declared dtype, storage, class names and info."""
        declared = htype_declaration(htype)
        ds = _fresh("mem://htype-tests-create")
        t = ds.create_tensor("t", htype=htype)
        spec = dataset_core(ds).state("t").spec
        assert (spec.dtype, spec.kind) == (declared.dtype, "bytes" if declared.blob else "array")
        if not declared.numeric:
            assert t.dtype == np.dtype(object)  # text and json values are objects
        else:
            assert t.dtype == (None if declared.dtype is None else np.dtype(declared.dtype))
        always: dict[str, Any] = {"class_names": []} if declared.class_names == "always" else {}
        assert dict(t.info) == declared.parse_info("t", {}) | always
        if declared.class_named:
            assert list(ds.create_tensor("named", htype=htype, class_names=["a"]).info.class_names) == ["a"]
        else:
            with pytest.raises(InvalidArgumentError, match="class_names is for htypes"):
                ds.create_tensor("named", htype=htype, class_names=["a"])

    def test_dtypes_are_accepted_as_declared(self, htype: str) -> None:
        """create_tensor takes exactly the dtypes the declaration names, and refuses the others by name."""
        declared = htype_declaration(htype)
        ds = _fresh("mem://htype-tests-dtypes")
        for i, name in enumerate(_NUMERIC_DTYPES):
            dtype = np.dtype(name)
            ok = declared.numeric and (
                dtype == np.dtype(declared.dtype) if declared.exact_dtype else dtype.kind in declared.dtypes
            )
            if ok:
                assert ds.create_tensor(f"t{i}", htype=htype, dtype=name).dtype == dtype
            else:
                with pytest.raises(InvalidArgumentError, match=f"{htype}"):
                    ds.create_tensor(f"t{i}", htype=htype, dtype=name)

    def test_sample_compression_as_declared(self, htype: str) -> None:
        """A sample compression is taken (making the tensor the declared htype) or refused, as declared."""
        declared = htype_declaration(htype)
        ds = _fresh("mem://htype-tests-compression")
        if declared.with_sample_compression is None:
            with pytest.raises(InvalidArgumentError, match="sample_compression='png' needs htype"):
                ds.create_tensor("t", htype=htype, sample_compression="png")
        else:
            t = ds.create_tensor("t", htype=htype, sample_compression="png")
            assert (t.htype, t.sample_compression) == (declared.with_sample_compression, "png")

    # -- samples -------------------------------------------------------------------------------------

    def test_samples_round_trip_exactly(self, htype: str) -> None:
        """Valid samples read back exactly (dtype, shape, bytes), appended one by one, extended as a
        list, or extended as one stacked array; numpy() of them all is what the declaration says."""
        declared = htype_declaration(htype)

        @_settings(self.examples)
        @given(st.sampled_from(cases_of(htype)).flatmap(lambda c: st.tuples(st.just(c), c.samples)))
        def run(drawn: tuple[HTypeCase, list[Any]]) -> None:
            case, samples = drawn
            ds = _fresh("mem://htype-tests-round-trip")
            ways = {"one": _create(ds, "one", case), "many": _create(ds, "many", case)}
            if _stackable(declared, samples):
                ways["block"] = _create(ds, "block", case)
            with ds:
                for s in samples:
                    ways["one"].append(s)
                ways["many"].extend(samples)
                if "block" in ways:
                    ways["block"].extend(np.stack(samples))
            for way, t in ways.items():
                assert len(t) == len(samples)
                for i, s in enumerate(samples):
                    assert_same_sample(read_sample(t, i), s, lossy=case.lossy, where=f"{case} {way} [{i}]")
            _check_numpy_of_all(declared, ways["many"], samples, case)

        run()

    def test_samples_survive_reopening(self, htype: str, tmp_path: Path) -> None:
        """Samples written to a dataset on disk read back exactly from a fresh load (every stored byte
        goes through storage, checksums included)."""

        @_settings(max(3, self.examples // 3))
        @given(st.sampled_from(cases_of(htype)).flatmap(lambda c: st.tuples(st.just(c), c.samples)))
        def run(drawn: tuple[HTypeCase, list[Any]]) -> None:
            case, samples = drawn
            path = tmp_path / f"ds{next(_serial)}"
            ds = _fresh(str(path))
            _create(ds, "t", case).extend(samples)
            again = lc.load(str(path))
            for i, s in enumerate(samples):
                assert_same_sample(read_sample(again["t"], i), s, lossy=case.lossy, where=f"{case} [{i}]")

        run()

    def test_hostile_values_are_refused_naming_the_tensor(self, htype: str) -> None:
        """Every hostile value is refused with an InvalidSampleError naming the tensor, alone or after
        valid samples in one call, and nothing of the call is stored."""

        @_settings(max(3, self.examples // 3))
        @given(st.sampled_from(cases_of(htype)).flatmap(lambda c: st.tuples(st.just(c), c.samples)))
        def run(drawn: tuple[HTypeCase, list[Any]]) -> None:
            case, samples = drawn
            ds = _fresh("mem://htype-tests-hostile")
            t = _create(ds, "target", case)
            for value in (*case.hostile, *HOSTILE_TO_EVERY_HTYPE):
                for given_as in ([value], [*samples, value]):
                    refused = _refusal(t, given_as)
                    assert refused is not None, f"{case}: {value!r:.60} was stored"
                    assert refused.tensor == "target", str(refused)
                    assert "'target'" in str(refused), str(refused)
                    assert len(t) == 0, f"{case}: {value!r:.60} left {len(t)} samples"

        run()

    def test_any_value_is_stored_or_refused(self, htype: str) -> None:
        """Any near-valid value is stored, and then stores again as it reads back (the same value), or
        is refused with an InvalidSampleError naming the tensor, storing nothing; never another error."""

        @_settings(self.examples * 2)
        @given(st.sampled_from(cases_of(htype)), st.lists(near_valid_samples(), min_size=1, max_size=3))
        def run(case: HTypeCase, values: list[Any]) -> None:
            ds = _fresh("mem://htype-tests-near-valid")
            t = _create(ds, "target", case)
            refused = _refusal(t, values)
            if refused is not None:
                assert refused.tensor == "target", str(refused)
                assert len(t) == 0
                return
            got = [read_sample(t, i) for i in range(len(values))]
            again = _create(ds, "again", case)
            again.extend(got)
            for i, g in enumerate(got):
                assert_same_sample(read_sample(again, i), g, lossy=case.lossy, where=f"{case} [{i}]")

        run()

    def test_damaged_blobs_fail_as_library_errors(self, htype: str) -> None:
        """A blob the codec did not write (random bytes, any stored shape) decodes to a value or raises
        ValueError or a LakeComputeError (which readers report as a damaged dataset); nothing else."""
        blob = htype_declaration(htype).blob
        cases = [c for c in cases_of(htype) if blob or "sample_compression" in c.options]
        if not cases:
            pytest.skip(f"htype {htype!r} stores arrays: no blob to damage")
        ds = _fresh("mem://htype-tests-damaged")
        specs = [dataset_core(ds).state(_create(ds, f"t{i}", c).name).spec for i, c in enumerate(cases)]
        shapes = st.lists(st.integers(0, 6), max_size=3).map(tuple)

        @_settings(self.examples * 3)
        @given(st.sampled_from(specs), st.binary(max_size=64), shapes)
        def run(spec: Any, raw: bytes, shape: tuple[int, ...]) -> None:
            try:
                decode_sample(spec, raw, shape)
            except (ValueError, LakeComputeError):
                pass

        run()

    def test_samples_round_trip_through_arrow(self, htype: str) -> None:
        """``lc.from_arrow(ds.to_arrow())`` is the dataset again: the tensor's htype, dtype, compressions
        and info, the Arrow column its htype declares, and every sample exactly (an encoded one, even a
        JPEG, as the same stored bytes); and so is ``lc.from_pandas(ds.to_pandas())``."""
        pytest.importorskip("pyarrow")
        declared = htype_declaration(htype)

        @_settings(max(3, self.examples // 2))
        @given(st.sampled_from(cases_of(htype)).flatmap(lambda c: st.tuples(st.just(c), c.samples)))
        def run(drawn: tuple[HTypeCase, list[Any]]) -> None:
            case, samples = drawn
            ds = _fresh("mem://htype-tests-arrow")
            _create(ds, "t", case).extend(samples)
            table = ds.to_arrow()
            field = table.schema.field("t")
            assert declared.arrow.column != "text" or str(field.type) == "string", f"{case}: {field.type}"
            arrow = lc.from_arrow(table, "mem://htype-tests-arrow-back", overwrite=True, progressbar=False)
            frame = lc.from_pandas(
                ds.to_pandas(), "mem://htype-tests-pandas", overwrite=True, progressbar=False
            )
            for again, way in ((arrow, "arrow"), (frame, "pandas")):
                _check_same_tensor(ds, again, f"{case} {way}")
                for i in range(len(samples)):
                    where = f"{case} {way} [{i}]"
                    assert_same_sample(read_sample(again["t"], i), read_sample(ds["t"], i), where=where)
                    if (
                        dataset_core(ds).state("t").spec.kind == "bytes"
                        and declared.arrow.column != "polygons"
                    ):
                        assert again["t"][i].tobytes() == ds["t"][i].tobytes(), f"{where}: stored bytes"

        run()

    def test_pad_value_fits_the_tensor(self, htype: str) -> None:
        """The declared pad of a tensor holding samples is an empty array of its rank and dtype, or a value
        the tensor stores and reads back as it is."""

        @_settings(max(3, self.examples // 3))
        @given(st.sampled_from(cases_of(htype)).flatmap(lambda c: st.tuples(st.just(c), c.samples)))
        def run(drawn: tuple[HTypeCase, list[Any]]) -> None:
            case, samples = drawn
            ds = _fresh("mem://htype-tests-pad")
            t = _create(ds, "t", case)
            t.extend(samples)
            pad = pad_value(ds, "t")
            if isinstance(pad, np.ndarray):
                assert (pad.dtype, pad.ndim) == (t.dtype, t.ndim), f"{case}: pad {pad!r}"
                assert pad.size == 0 or pad.ndim == 0, f"{case}: pad {pad!r}"
            else:
                t.append(pad)
                assert_same_sample(read_sample(t, len(t) - 1), pad, where=f"{case} pad")

        run()


def _check_same_tensor(ds: lc.Dataset, again: lc.Dataset, where: str) -> None:
    """Tensor ``t`` of ``again`` is declared as in ``ds``: htype, dtype, compressions, info, length."""
    a, b = ds["t"], again["t"]
    assert list(again.tensors) == ["t"], where
    assert (b.htype, b.dtype, b.sample_compression) == (a.htype, a.dtype, a.sample_compression), where
    assert b.chunk_compression == a.chunk_compression, where
    assert dict(b.info) == dict(a.info), f"{where}: info {dict(b.info)} != {dict(a.info)}"
    assert len(b) == len(a), where


def _refusal(t: Any, values: list[Any]) -> InvalidSampleError | None:
    """Write ``values`` (append one, extend several): the InvalidSampleError that refused them, if any;
    any other exception propagates and fails the test."""
    try:
        if len(values) == 1:
            t.append(values[0])
        else:
            t.extend(values)
    except InvalidSampleError as exc:
        return exc
    return None


def _check_numpy_of_all(declared: HType, t: Any, samples: list[Any], case: HTypeCase) -> None:
    """``numpy()`` of several samples: one stacked array where the declaration stacks them and their
    shapes agree, else a list (``aslist=True``, or always for an htype that never stacks)."""
    if not declared.numeric:
        return
    if not declared.stacks:
        assert_same_sample(t.numpy(), samples, where=f"{case} numpy()")
        return
    # A 0-d sample comes back as a numpy scalar in the list (values of one stacked array).
    listed = [np.asarray(v) for v in t.numpy(aslist=True)]
    assert_same_sample(listed, samples, lossy=case.lossy, where=f"{case} numpy(aslist=True)")
    if len({s.shape for s in samples}) == 1:
        assert_same_sample(t.numpy(), np.stack(samples), lossy=case.lossy, where=f"{case} numpy()")
    else:
        with pytest.raises(lc.RaggedShapeError):
            t.numpy()
