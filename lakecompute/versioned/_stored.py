"""How a version's manifest is stored: whole, or as the change from its parent.

A manifest stored whole lists every tensor's fragments; after many small commits (1,000 single-row
edits make a tensor of a couple of thousand fragments) that is what each new version would cost, so
storing every version whole makes metadata grow with the square of the history. So a commit stores
only what it changed from its parent (a *delta*: per changed tensor, the fragments that replace a run of
the parent's; the eval records and info that changed), as long as that stays cheaper than storing the
version whole again:

- while the content is small (under `WHOLE_BELOW` bytes as plain JSON), every version is stored whole,
  as plain JSON (format ``lakecompute/1``, what every version was before);
- otherwise a delta is stored, until the deltas since the nearest whole version add up to more bytes than
  that version takes, or `MAX_DEPTH` of them follow each other: then the version is stored whole again.
  So the bytes of a commit are proportional to its change (amortised: the whole versions cost at most
  what the deltas before them did), and a read costs one whole version and at most `MAX_DEPTH` deltas;
- a version stored whole with a large content is compressed (zlib, in base64: the file stays JSON).

Both kinds of the newer format (``lakecompute/2``) carry, besides the history fields, what the log prints
(per tensor its length and digest, the eval records the version committed) so that ``ds.log()`` reads no
fragment. A delta names its base version and that version's content digest, which a reader checks before
applying it. This module is the format (encoding, and parsing with the schema's checks); following the
chain of deltas is ``_versions``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import dataclass, replace
from typing import Any, Final

from lakecompute.errors import LakeComputeError
from lakecompute.specs import parse_tensor_name
from lakecompute.versioned._header import Stored, VersionHeader, header_fields, load_json
from lakecompute.versioned._manifest import FORMAT, Fragment, Manifest, TensorState, check_fits, evals_of
from lakecompute.versioned._schema import (
    MAX_OFFSET,
    InvalidField,
    check_int,
    check_str,
    check_str_dict,
    nested,
)

__all__ = [
    "FORMAT_2",
    "MAX_DEPTH",
    "PACK_ABOVE",
    "WHOLE_BELOW",
    "Decoded",
    "decode",
    "encode",
    "whole_bytes",
]

#: The format of manifests stored as a delta, or whole and compressed.
FORMAT_2: Final = "lakecompute/2"
#: A version whose content takes fewer bytes than this (as plain JSON) is stored whole: a delta would
#: save little, and small datasets keep the plain format.
WHOLE_BELOW: Final = 4096
#: A version stored whole whose content takes more bytes than this is compressed.
PACK_ABOVE: Final = 4096
#: At most this many deltas follow each other: a read of any version reads at most this many files
#: besides the version stored whole they start from.
MAX_DEPTH: Final = 32
#: The largest content a compressed manifest may declare (checked before anything is decompressed).
_MAX_PLAIN: Final = 1 << 30
# What the log shows of an eval record, kept in the history fields of the version that committed it.
_RECORD_SUMMARY: Final = ("status", "done", "label", "seed")
_TENSOR_DIGEST: Final = re.compile(r"[0-9a-f]{32}")
# Tensor names found valid (a log checks each version's names; most histories have a handful).
_NAMES_CHECKED: set[str] = set()


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


# -- encoding ----------------------------------------------------------------------------------------


def encode(manifest: Manifest, base: Manifest | None) -> tuple[bytes, Stored]:
    """The bytes that store ``manifest``, and how: as the change from ``base`` (its parent, as read or
    committed) when that is cheaper, else whole (see the module docstring)."""
    chain = base.stored if base is not None and base.version == manifest.parent else None
    if base is not None and chain is not None and chain.plain >= WHOLE_BELOW and chain.depth < MAX_DEPTH:
        delta = _delta_text(base, manifest)
        if chain.changes + len(delta) <= chain.whole:
            return _delta_file(manifest, base, delta, chain)
    return _whole_file(manifest)


def whole_bytes(manifest: Manifest) -> bytes:
    """The bytes that store ``manifest`` whole (what ``vacuum`` rewrites a version as when it removes
    the version its delta was based on)."""
    return _whole_file(manifest)[0]


def _summary(manifest: Manifest) -> dict[str, Any]:
    """The history fields of the newer format: the version's place, and what the log prints."""
    fields = manifest.history_fields()
    fields["format"] = FORMAT_2
    fields["states"] = {name: [t.length, t.digest] for name, t in manifest.tensors.items()}
    records = {
        fp: {key: obj.get(key) for key in _RECORD_SUMMARY}
        for fp, obj in manifest.evals.items()
        if isinstance(obj, dict) and "at" not in obj and obj.get("version") == manifest.version
    }
    if records:
        fields["records"] = records
    return fields


def _whole_file(manifest: Manifest) -> tuple[bytes, Stored]:
    content = manifest.content_text()
    if len(content) <= PACK_ABOVE:
        data = manifest.to_bytes()
        return data, Stored(0, 0, len(data), len(content))
    raw = f"{{{content}}}".encode()
    packed = base64.b64encode(zlib.compress(raw, 1)).decode("ascii")
    fields = {**_summary(manifest), "plain": len(raw), "packed": packed}
    data = _dumps(fields).encode()
    return data, Stored(0, 0, len(data), len(raw))


def _delta_file(manifest: Manifest, base: Manifest, delta: str, chain: Stored) -> tuple[bytes, Stored]:
    stored = Stored(chain.depth + 1, chain.changes + len(delta), chain.whole, chain.plain)
    fields = {
        **_summary(manifest),
        "base": base.version,
        "base_digest": base.digest,
        "chain": [stored.depth, stored.changes, stored.whole, stored.plain],
    }
    return f'{_dumps(fields)[:-1]},"delta":{delta}}}'.encode(), stored


def _delta_text(base: Manifest, manifest: Manifest) -> str:
    """What changed from ``base`` to ``manifest``, as the JSON text of a delta."""
    tensors: dict[str, Any] = {}
    before = {state.key: (name, state) for name, state in base.tensors.items()}
    for name, state in manifest.tensors.items():
        old_name, old = before.get(state.key, (None, None))
        if old is not None and old_name == name and (old is state or old == state):
            continue
        tensors[name] = state.to_json() if old is None or old_name is None else _splice(old_name, old, state)
    evals: dict[str, Any] = {fp: obj for fp, obj in manifest.evals.items() if base.evals.get(fp) != obj}
    evals.update({fp: None for fp in base.evals if fp not in manifest.evals})
    delta: dict[str, Any] = {}
    if tensors:
        delta["tensors"] = tensors
    if evals:
        delta["evals"] = evals
    if manifest.info != base.info:
        delta["info"] = manifest.info
    return _dumps(delta)


def _splice(old_name: str, old: TensorState, new: TensorState) -> dict[str, Any]:
    """``new`` as a change of ``old`` (the same tensor): its fragments ``at`` a run of the old ones
    replaced by ``fragments``, renamed ``from`` the old name; or whole, when more than fragments changed."""
    if (old.spec.htype, old.spec.dtype, old.spec.sample_compression, old.spec.chunk_compression) != (
        new.spec.htype,
        new.spec.dtype,
        new.spec.sample_compression,
        new.spec.chunk_compression,
    ) or (old.info, old.ndim, old.tid) != (new.info, new.ndim, new.tid):
        return new.to_json()
    a, b = old.fragments, new.fragments
    start = 0
    while start < len(a) and start < len(b) and (a[start] is b[start] or a[start] == b[start]):
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and (a[end_a - 1] is b[end_b - 1] or a[end_a - 1] == b[end_b - 1]):
        end_a, end_b = end_a - 1, end_b - 1
    out: dict[str, Any] = {"at": [start, end_a], "fragments": [f.to_json() for f in b[start:end_b]]}
    if old_name != new.spec.name:
        out["from"] = old_name
    return out


# -- decoding ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decoded:
    """A stored manifest, parsed as far as can be without its base version.

    Attributes:
        body: the JSON object stored.
        header: its history fields and summary (see `VersionHeader`).
        whole: the manifest, when it is stored whole (None for a delta).
        base_digest: a delta's base's content digest ("" when stored whole).
        size: the bytes stored.
    """

    body: dict[str, Any]
    header: VersionHeader
    whole: Manifest | None
    base_digest: str
    size: int

    def apply(self, base: Manifest) -> Manifest:
        """The manifest this delta makes of ``base`` (the version it names, read whole).

        Raises:
            InvalidField: the delta breaks the schema, or does not fit ``base``.
        """
        if base.version != self.header.base or base.digest != self.base_digest:
            raise InvalidField(
                "base_digest",
                f"the delta is of version {self.header.base} with digest {self.base_digest[:16]}..., "
                f"got version {base.version} with digest {base.digest[:16]}...",
            )
        delta = check_str_dict(self.body.get("delta"), "delta")
        unknown = sorted(set(delta) - {"tensors", "evals", "info"})
        if unknown:
            raise InvalidField("delta", f"unknown fields {unknown!r:.80}")
        tensors = nested("delta", _apply_tensors, self.header.samples, self._digests(), delta, base)
        evals = dict(base.evals)
        for fp, obj in check_str_dict(delta.get("evals") or {}, "delta.evals").items():
            if obj is None:
                evals.pop(fp, None)
            else:
                evals[fp] = obj
        info = check_str_dict(delta["info"], "delta.info") if "info" in delta else base.info
        h = self.header
        manifest = Manifest(
            version=h.version, parent=h.parent, time=h.time, message=h.message, tensors=tensors,
            evals=evals_of(evals), info=info, branch=h.branch, line=h.line, merged=h.merged, reach=h.reach,
            origin=h.origin, dataset_id=h.dataset_id,
        )  # fmt: skip
        return manifest.recorded(h.digest, _chain(self.body.get("chain")))

    def _digests(self) -> dict[str, str]:
        states = self.body["states"]  # checked by `decode`
        return {name: value[1] for name, value in states.items()}


def decode(data: bytes) -> Decoded:
    """Parse a stored manifest of either format (whole, compressed, or a delta), checking every field.

    Raises:
        InvalidField: the bytes break the schema (the field names the value).
    """
    body = load_json(data)
    fmt = body.get("format")
    if fmt == FORMAT:
        # The plain format's content is most of its bytes: its size stands for the content's. A manifest
        # written before digests is no base for a delta: the first commit after it is stored whole, in
        # the newer form (the migration of an older dataset, one version at a time as it is written).
        stored = Stored(0, 0, len(data), len(data)) if "digest" in body else None
        manifest = Manifest.from_json(body).recorded(None, stored)
        header = _header(body, manifest.digest if "digest" in body else "", manifest.sample_counts(), None)
        return Decoded(body, header, manifest, "", len(data))
    if fmt != FORMAT_2:
        raise InvalidField("format", f"expected {FORMAT!r} or {FORMAT_2!r}, got {fmt!r:.40}")
    states = _states(body.get("states"))
    digest = check_str(body.get("digest"), "digest")
    if "delta" in body:
        base = check_int(body.get("base"), "base", hi=MAX_OFFSET)
        parent = body.get("parent")
        if base != parent:
            raise InvalidField("base", f"expected the version's parent ({parent!r:.20}), got {base}")
        base_digest = check_str(body.get("base_digest"), "base_digest")
        header = _header(body, digest, {n: v[0] for n, v in states.items()}, base)
        return Decoded(body, header, None, base_digest, len(data))
    manifest = _unpacked(body, states, len(data))
    header = _header(body, manifest.digest, manifest.sample_counts(), None)
    return Decoded(body, header, manifest, "", len(data))


def header_of(data: bytes) -> VersionHeader:
    """A stored manifest's history fields and summary, without its tensors' fragments (for the log).

    Raises:
        InvalidField: the history fields break the schema.
    """
    body, cut = _without_content(data)
    fmt = body.get("format")
    if fmt == FORMAT:
        return _header(body, body.get("digest") or "", _lengths(body.get("tensors")), None)
    if fmt != FORMAT_2:
        raise InvalidField("format", f"expected {FORMAT!r} or {FORMAT_2!r}, got {fmt!r:.40}")
    states = _states(body.get("states"))
    delta = cut == "delta" or "delta" in body
    base = check_int(body.get("base"), "base", hi=MAX_OFFSET) if delta else None
    digest = check_str(body.get("digest"), "digest")
    return _header(body, digest, {n: v[0] for n, v in states.items()}, base)


def _without_content(data: bytes) -> tuple[dict[str, Any], str | None]:
    """The JSON object of a stored manifest, without its content where the newer format stores it last
    (``"packed"`` or ``"delta"``, as written): the header is parsed without scanning the content. Which
    of the two was left out; anything else is parsed whole.

    Raises:
        InvalidField: not a JSON object.
    """
    for key in ("packed", "delta"):
        at = data.rfind(b',"' + key.encode() + b'":')
        if at > 0:
            try:
                body = json.loads(data[:at] + b"}")
            except ValueError:
                break
            if isinstance(body, dict) and body.get("format") == FORMAT_2 and key not in body:
                return body, key
            break
    return load_json(data), None


def _header(body: dict[str, Any], digest: object, samples: dict[str, int], base: int | None) -> VersionHeader:
    fields = header_fields(body)
    if digest and (not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise InvalidField("digest", f"expected 64 hexadecimal digits, got {digest!r:.80}")
    if body.get("format") == FORMAT_2:
        records = check_str_dict(body.get("records") or {}, "records")
    else:
        records = {
            fp: obj
            for fp, obj in check_str_dict(body.get("evals") or {}, "evals").items()
            if isinstance(obj, dict) and "at" not in obj and obj.get("version") == fields["version"]
        }
    for fp, obj in records.items():
        if not isinstance(obj, dict):
            raise InvalidField(f"records.{fp}", f"expected an object, got {obj!r:.40}")
    return VersionHeader(**fields, digest=str(digest or ""), samples=samples, records=records, base=base)


def _lengths(tensors: object) -> dict[str, int]:
    """Samples per tensor of a plain manifest, from each entry's ``length`` (or its fragments' counts)."""
    if not isinstance(tensors, dict):
        raise InvalidField("tensors", f"expected an object, got {tensors!r:.40}")
    out = {}
    for name, entry in tensors.items():
        if not isinstance(entry, dict):
            raise InvalidField(f"tensors.{name}", f"expected an object, got {entry!r:.40}")
        length = entry.get("length")
        if length is None:
            rows = entry.get("fragments", [])
            if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 10 for r in rows):
                raise InvalidField(f"tensors.{name}.fragments", "expected a list of fragments")
            length = sum(check_int(r[9], f"tensors.{name}.fragments[{i}].n") for i, r in enumerate(rows))
        out[str(name)] = check_int(length, f"tensors.{name}.length")
    return out


def _states(value: object) -> dict[str, tuple[int, str]]:
    """The ``states`` field: per tensor, in order, its length and its digest."""
    states = check_str_dict(value, "states")
    out = {}
    for name, pair in states.items():
        if name not in _NAMES_CHECKED:
            try:
                parse_tensor_name(name)
            except LakeComputeError:
                raise InvalidField("states", f"invalid tensor name {name!r:.80}") from None
            if len(_NAMES_CHECKED) < 4096:
                _NAMES_CHECKED.add(name)
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not isinstance(pair[1], str)
            or not _TENSOR_DIGEST.fullmatch(pair[1])
        ):
            raise InvalidField(f"states.{name}", f"expected [length, 32 hex digits], got {pair!r:.60}")
        out[name] = (check_int(pair[0], f"states.{name}[0]"), pair[1])
    return out


def _chain(value: object) -> Stored:
    if not isinstance(value, list) or len(value) != 4:
        raise InvalidField("chain", f"expected [depth, changes, whole, plain], got {value!r:.60}")
    depth, changes, whole, plain = (check_int(v, f"chain[{i}]", hi=MAX_OFFSET) for i, v in enumerate(value))
    return Stored(depth, changes, whole, plain)


def _unpacked(body: dict[str, Any], states: dict[str, tuple[int, str]], size: int) -> Manifest:
    """A compressed whole manifest: its content decompressed (no more than it declares), parsed and
    checked against the lengths its history fields give."""
    plain = check_int(body.get("plain"), "plain", hi=_MAX_PLAIN)
    packed = check_str(body.get("packed"), "packed")
    try:
        raw = base64.b64decode(packed.encode("ascii"), validate=True)
        inflate = zlib.decompressobj()
        text = inflate.decompress(raw, plain + 1)
        complete = inflate.eof and not inflate.unconsumed_tail
    except (UnicodeEncodeError, binascii.Error, zlib.error) as exc:
        raise InvalidField("packed", f"not a compressed manifest: {exc}") from None
    if len(text) != plain or not complete:
        raise InvalidField("packed", f"expected {plain} bytes (plain), got {len(text)} or more")
    content = nested("packed", load_json, text)
    unknown = sorted(set(content) - {"tensors", "evals", "info"})
    if unknown:
        raise InvalidField("packed", f"unknown fields {unknown!r:.80}")
    manifest = Manifest.from_json({**{k: v for k, v in body.items() if k != "packed"}, **content})
    if list(manifest.tensors) != list(states):
        raise InvalidField("states", f"expected the tensors {list(manifest.tensors)!r:.80}")
    for name, state in manifest.tensors.items():
        length, digest = states[name]
        if state.length != length:
            raise InvalidField(
                f"states.{name}[0]", f"the fragments hold {state.length} samples, got {length}"
            )
        state.recorded(digest)
    return manifest.recorded(check_str(body.get("digest"), "digest"), Stored(0, 0, size, plain))


def _apply_tensors(
    samples: dict[str, int], digests: dict[str, str], delta: dict[str, Any], base: Manifest
) -> dict[str, TensorState]:
    """The tensors a delta makes of ``base``'s: in the order its ``states`` list them, each changed as
    ``delta.tensors`` says or carried over from ``base`` under the same name."""
    changes = check_str_dict(delta.get("tensors") or {}, "tensors")
    unknown = sorted(set(changes) - set(samples))
    if unknown:
        raise InvalidField("tensors", f"changes of tensors the version does not have: {unknown!r:.80}")
    out: dict[str, TensorState] = {}
    for name, length in samples.items():
        if name in changes:
            state = nested(f"tensors.{name}", _changed, name, changes[name], base).recorded(digests[name])
        elif name in base.tensors:
            state = base.tensors[name]
            if state.digest != digests[name]:
                raise InvalidField(f"tensors.{name}", "unchanged, yet its digest differs from the base's")
        else:
            raise InvalidField("tensors", f"tensor {name!r} is neither changed nor in the base version")
        if state.length != length:
            raise InvalidField(
                f"tensors.{name}", f"the fragments hold {state.length} samples, expected {length}"
            )
        out[name] = state
    return out


def _changed(name: str, change: object, base: Manifest) -> TensorState:
    """A tensor of a delta: a whole entry, or a run of fragments of a base tensor replaced."""
    if not isinstance(change, dict):
        raise InvalidField("", f"expected an object, got {change!r:.40}")
    if "htype" in change:
        return TensorState.from_json(name, change)
    unknown = sorted(set(change) - {"from", "at", "fragments"})
    if unknown:
        raise InvalidField("", f"unknown fields {unknown!r:.80}")
    source = change.get("from", name)
    old = base.tensors.get(source) if isinstance(source, str) else None
    if old is None:
        raise InvalidField("from", f"no tensor {source!r:.60} in the base version")
    at = change.get("at")
    if not isinstance(at, list) or len(at) != 2:
        raise InvalidField("at", f"expected [start, stop], got {at!r:.40}")
    start = check_int(at[0], "at[0]", hi=len(old.fragments))
    stop = check_int(at[1], "at[1]", lo=start, hi=len(old.fragments))
    rows = change.get("fragments")
    if not isinstance(rows, list):
        raise InvalidField("fragments", f"expected a list, got {rows!r:.40}")
    spec = old.spec if source == name else replace(old.spec, name=name)
    new = [nested(f"fragments[{i}]", Fragment.from_json, row) for i, row in enumerate(rows)]
    for i, frag in enumerate(new):
        nested(f"fragments[{i}]", check_fits, spec, old.ndim, frag)
    fragments = (*old.fragments[:start], *new, *old.fragments[stop:])
    return TensorState(spec, old.info, old.ndim, fragments, old.tid)
