"""Every declared htype runs the conformance suite (`lakecompute.testing.htypes.HTypeTests`): an htype
added to the declarations is covered here without touching this file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.htypes import CODECS, HTypeCodec, codec_registry
from lakecompute.specs import HTYPES

pytest.importorskip("hypothesis")
from lakecompute.testing.htype_cases import HTYPE_CASES  # after the importorskip
from lakecompute.testing.htypes import HTypeTests


class TestEveryHType(HTypeTests):
    @pytest.fixture(params=list(HTYPES))
    def htype(self, request: pytest.FixtureRequest) -> str:
        """Each declared htype in turn."""
        return str(request.param)


def test_cases_are_for_declared_htypes() -> None:
    """The conformance cases name only declared htypes (a renamed or removed htype leaves none behind)."""
    assert set(HTYPE_CASES) <= set(HTYPES)


@lc.compute
def copy_boxes(sample_in: Any, sample_out: Any) -> None:
    """boxes out = boxes in (a padded row's are its tensor's pad)."""
    sample_out.boxes.append(sample_in.boxes.numpy())


def test_a_padded_bbox_row_is_no_boxes_which_stores_again(tmp_path: Path) -> None:
    """eval(pad_data_in=True) hands the missing rows of a shorter bbox tensor over as no boxes, (0, 4) of
    its dtype, which a bbox output stores as they are."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("ids", dtype="int64")
    ds.create_tensor("boxes", htype="bbox", dtype="float64")
    ds.ids.extend(np.arange(3))
    ds.boxes.extend([np.array([[0.0, 0.0, 1.0, 1.0]]), np.zeros((0, 4))])
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("boxes", htype="bbox", dtype="float64")
    copy_boxes().eval(ds, out, pad_data_in=True)
    assert [out.boxes[i].numpy().shape for i in range(3)] == [(1, 4), (0, 4), (0, 4)]
    assert out.boxes[2].numpy().dtype == np.float64


class VideoCodec(HTypeCodec):
    """A codec for an htype nobody declared."""

    htype = "video"


def test_registry_takes_exactly_one_codec_per_declared_htype() -> None:
    """The codec registry refuses a declared htype left without a codec, a second codec for one, and a
    codec for an htype that is not declared, naming each; all of them registered once make CODECS."""
    every = tuple(CODECS.values())
    assert dict(codec_registry(every)) == dict(CODECS)
    with pytest.raises(lc.InvalidArgumentError, match=r"Got none for \['json'\]"):
        codec_registry(tuple(c for c in every if c.declaration.name != "json"))
    with pytest.raises(
        lc.InvalidArgumentError, match=r"TextCodec for htype 'text', which has a codec already"
    ):
        codec_registry(every, (CODECS["text"],))
    with pytest.raises(lc.InvalidArgumentError, match=r"VideoCodec for htype 'video', which is not declared"):
        codec_registry(every, (VideoCodec(),))
