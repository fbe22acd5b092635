"""The history graph of a dataset: names of versions, walks over parents, common ancestors, the log.

Everything here reads manifests and refs and changes nothing. Versions are named by number, by a
branch (its head) or by a tag; `resolve` turns any of them into a committed version. Ancestry is
known from a manifest alone (`lakecompute.versioned.Manifest.descends_from`), so the common ancestor of
two versions is found by reading a handful of manifests, however long their histories are.
"""

from __future__ import annotations

from collections.abc import Iterable

from lakecompute.errors import (
    DatasetCorruptError,
    DatasetNotFoundError,
    InvalidArgumentError,
    LakeComputeError,
    RefNotFoundError,
)
from lakecompute.storage import Backend
from lakecompute.versioned._header import VersionHeader
from lakecompute.versioned._keys import tag_key, version_key
from lakecompute.versioned._manifest import Manifest
from lakecompute.versioned._reads import read_header, read_manifest
from lakecompute.versioned._refs import (
    DEFAULT_BRANCH,
    list_branches,
    list_tags,
    parse_version_name,
    read_branch,
    read_tag,
)
from lakecompute.versioned._versions import branch_head, is_committed, latest_version

__all__ = ["VersionLike", "collectable", "heads", "merge_base", "read_committed", "resolve", "walk"]

#: A version as users name it: its number, a branch (its head) or a tag.
VersionLike = int | str


def resolve(backend: Backend, spec: object, what: str = "version") -> int:
    """The version number ``spec`` names: a number, a branch name (the branch's head) or a tag.

    Raises:
        InvalidTypeError: ``spec`` is not an int or a str.
        InvalidArgumentError: neither a number in ASCII digits nor a valid branch or tag name.
        RefNotFoundError: no branch or tag has that name.
        DatasetCorruptError: a ref is damaged, or names a version that is not stored.
    """
    name = parse_version_name(spec, what)
    if isinstance(name, int):
        return name
    ref = read_branch(backend, name)
    if ref is not None:
        return branch_head(backend, ref)
    if name == DEFAULT_BRANCH:
        latest = latest_version(backend)
        if latest is not None:
            return latest  # a dataset written before branches: main is its newest version
    tag = read_tag(backend, name)
    if tag is not None:
        if not backend.exists(version_key(tag.version)):
            raise DatasetCorruptError(
                backend.url,
                tag_key(name),
                f"the tag names version {tag.version}, which is not stored",
                "The tag was changed outside lakecompute: delete the file to drop it (ds.delete_tag).",
            )
        return tag.version
    known = list_branches(backend) + list(list_tags(backend))
    raise RefNotFoundError(backend.url, name, "branch or tag", known)


def read_committed(backend: Backend, version: int) -> Manifest:
    """Version ``version``'s manifest, if it was committed (not left by a commit that lost its race or
    was killed before moving its branch).

    Raises:
        DatasetNotFoundError: there is no such committed version.
        DatasetCorruptError: the manifest is damaged.
    """
    manifest = read_manifest(backend, version)
    if not is_committed(backend, manifest):
        raise DatasetNotFoundError(
            backend.url, f"It has no version {version} (a commit of that number did not finish)."
        )
    return manifest


def walk(backend: Backend, roots: Iterable[int]) -> dict[int, VersionHeader]:
    """The versions ``roots`` reach through their parents (all of them: merges have several), by number:
    their headers (no fragment is read).

    Versions ``vacuum(keep_versions=...)`` removed are left out, with what only they reached.

    Raises:
        DatasetCorruptError: a manifest's history fields are damaged.
    """
    seen: dict[int, VersionHeader] = {}
    todo = list(roots)
    while todo:
        version = todo.pop()
        if version in seen:
            continue
        try:
            header = read_header(backend, version)
        except DatasetNotFoundError:
            continue  # vacuumed: the history before it is gone
        seen[version] = header
        todo.extend(p for p in header.parents if p not in seen)
    return seen


def heads(backend: Backend) -> dict[str, int]:
    """Every branch's head, by branch name.

    Raises:
        DatasetCorruptError: a ref or a move is damaged.
    """
    out = {}
    for name in list_branches(backend):
        try:
            out[name] = resolve(backend, name)
        except RefNotFoundError:
            continue  # deleted since the listing (or main of a dataset without versions)
    return out


def merge_base(backend: Backend, ours: Manifest, theirs: Manifest) -> Manifest:
    """The newest common ancestor of two versions (the base of a three-way merge).

    Per line of work both reach, the older of the two versions they reach there is an ancestor of both;
    of those candidates, the one every other is an ancestor of is the base. (Histories that cross-merged
    two branches both ways can have several; the newest is taken.)

    Raises:
        InvalidArgumentError: no common ancestor is left (``vacuum(keep_versions=...)`` removed it).
    """
    ro, rt = ours.reach_of(), theirs.reach_of()
    candidates: list[VersionHeader] = []
    for version in sorted({min(ro[line], rt[line]) for line in ro.keys() & rt.keys()}, reverse=True):
        try:
            candidates.append(read_header(backend, version))
        except DatasetNotFoundError:
            continue
    best = [c for c in candidates if all(c.descends_from(other) for other in candidates)]
    found = best[0] if best else (candidates[0] if candidates else None)
    if found is None:
        raise InvalidArgumentError(
            f"Versions {ours.version} and {theirs.version} of {backend.url!r} have no common ancestor left "
            "(vacuum(keep_versions=...) removed it), so their changes cannot be told apart. Restore one "
            "onto the other with ds.restore() instead."
        )
    return read_manifest(backend, found.version)


def collectable(
    backend: Backend,
    versions: list[int],
    keep_versions: int | None,
    grace_seconds: float,
    orphan_seconds: float,
    now: float,
) -> tuple[list[VersionHeader], list[int]]:
    """Which of ``versions`` (the manifests stored, listed before this is called) ``vacuum`` keeps (their
    headers), and which it removes.

    Kept: every version a branch or a tag reaches (with ``keep_versions=n``, only the ``n`` newest of
    each branch's own line of commits, and the tagged ones). Removed besides the versions that limit
    drops: those of deleted branches older than ``grace_seconds``, and manifests of commits that never
    moved their branch (killed before, or lost a race) older than ``orphan_seconds``. A version of a
    live branch that no branch reaches yet is a commit landing right now: kept.

    Raises:
        DatasetCorruptError: a ref or a manifest a branch reaches is damaged.
    """
    refs = {name: read_branch(backend, name) for name in list_branches(backend)}
    live = {ref.line for ref in refs.values() if ref is not None}
    roots = list(heads(backend).values())
    tagged = [t.version for t in list_tags(backend).values()]
    reached = walk(backend, roots + tagged)
    keep = set(reached) if keep_versions is None else set(tagged) | _newest(reached, roots, keep_versions)
    kept, drop = [], []
    for version in versions:
        if version in keep:
            kept.append(reached[version])
        elif version in reached:
            drop.append(version)  # reached, but older than keep_versions allows
        elif _collect_unreached(backend, version, live, grace_seconds, orphan_seconds, now):
            drop.append(version)
        else:
            kept.append(read_header(backend, version))
    return kept, drop


def _newest(reached: dict[int, VersionHeader], roots: list[int], n: int) -> set[int]:
    """The ``n`` newest versions of each root's own line of commits (following first parents)."""
    out: set[int] = set()
    for root in roots:
        version: int | None = root
        for _ in range(n):
            if version is None or version not in reached:
                break
            out.add(version)
            version = reached[version].parent
    return out


def _collect_unreached(
    backend: Backend, version: int, live: set[str], grace: float, orphan: float, now: float
) -> bool:
    """Whether a version no branch or tag reaches may go (see `collectable`)."""
    try:
        header = read_header(backend, version)
    except LakeComputeError:
        return False  # gone meanwhile, or damaged: not ours to judge here
    age = now - header.time
    if header.line is None:
        return False  # committed before branches: reached from main unless keep_versions dropped it
    if header.line not in live:
        return age >= grace  # a deleted branch's
    return not is_committed(backend, header) and age >= max(grace, orphan)
