"""Getting data in: folders of images, image files, and numpy arrays.

* `ingest_classification` turns a folder of class sub-folders of images into a dataset with
  ``images`` and ``labels``. The parent only lists files (and peeks at their headers); opening and
  decoding every file runs in parallel on the transform engine, so a corrupt file is reported like
  any failing sample, by name. By default images keep the folder's most common format, and files
  in that format are stored as they are (`plan_classification` says what will happen).
* `read` opens one image file lazily. Appended to an image tensor whose sample compression
  is the file's own format, its bytes are stored as they are (a JPEG is not re-encoded and loses
  nothing); otherwise it is decoded like an array.
* `from_numpy` makes a dataset from a dict of arrays.

Example:
    >>> import lakecompute as lc
    >>> import numpy as np
    >>> ds = lc.from_numpy("mem://from-numpy-doc", {"x": np.arange(6).reshape(3, 2)}, overwrite=True)
    >>> ds.x.numpy().tolist()
    [[0, 1], [2, 3], [4, 5]]
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from lakecompute.errors import (
    InvalidArgumentError,
    InvalidSampleError,
    InvalidTypeError,
    LakeComputeWarning,
    TransformError,
)

if TYPE_CHECKING:
    from PIL import Image

    from lakecompute.datasets import Dataset

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageFile",
    "IngestOptions",
    "IngestPlan",
    "check_compression",
    "from_numpy",
    "ingest_classification",
    "load_for_ingest",
    "plan_classification",
    "plan_images",
    "read",
    "refuse_overlap",
    "run_ingest",
    "target_mode",
]

IMAGE_EXTENSIONS: Final[frozenset[str]] = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})
"""File name endings (any case) that `ingest_classification` reads as images."""

# Pillow's format names -> ours (the sample compressions; other formats keep Pillow's name, lower case).
_FORMATS: Final[dict[str, str]] = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "WEBP": "webp", "BMP": "bmp"}

# File name endings -> the format their content normally has (what a plan counts; workers check content).
_EXTENSION_FORMATS: Final[dict[str, str]] = {
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".png": "png",
    ".webp": "webp",
    ".bmp": "bmp",
}
# Which stored format wins a tie between equally common ones, and the one used when the most common
# format is none a tensor stores (bmp): lossless first.
_PREFERENCE: Final = ("png", "jpeg", "webp")

# Below this many files, starting worker processes costs more than it saves.
_PARALLEL_FROM: Final = 100

PathLike = str | os.PathLike[str]


# -- one image file ----------------------------------------------------------------------------------


class ImageFile:
    """An image file, read on first use and decoded only when its pixels are asked for.

    Made by `lc.read`. It can be appended wherever an image array can:

    * to an image tensor whose ``sample_compression`` is the file's format, the file's bytes are
      stored as they are (checked to decode first) — no re-encoding, no extra JPEG loss;
    * anywhere else it is decoded (``.numpy()``) and stored like an array.

    Pixels come back as uint8: HxW for greyscale, HxWx3 for colour, HxWx4 with transparency.

    Attributes:
        path: the file's path as given.
    """

    __slots__ = ("_data", "_decodes", "_format", "_shape", "path")

    def __init__(self, path: str, data: bytes | None = None) -> None:
        self.path = path
        self._data = data
        self._format: str | None = None
        self._shape: tuple[int, ...] | None = None
        self._decodes = False  # known to decode fully (checked by load_for_ingest)

    def _bytes(self) -> bytes:
        if self._data is None:
            try:
                with open(self.path, "rb") as f:
                    self._data = f.read()
            except OSError as exc:
                raise InvalidArgumentError(f"Cannot read image file {self.path!r} ({exc}).") from exc
        return self._data

    def _open(self) -> Image.Image:
        from PIL import Image

        try:
            return Image.open(BytesIO(self._bytes()))
        except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken files
            raise _unreadable(self.path, exc) from exc

    def _header(self) -> None:
        from lakecompute.compression import decoded_mode

        image = self._open()
        fmt = image.format or "unknown"
        self._format = _FORMATS.get(fmt, fmt.lower())
        try:
            mode = decoded_mode(image)
        except InvalidArgumentError as exc:
            raise _unreadable(self.path, exc) from exc
        width, height = image.size
        self._shape = (height, width) if mode == "L" else (height, width, len(mode))

    @property
    def format(self) -> str:
        """The file's format: ``"jpeg"``, ``"png"``, ``"webp"``, ``"bmp"``, ... (from its content)."""
        if self._format is None:
            self._header()
        assert self._format is not None
        return self._format

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape `numpy()` returns, read from the file's header only."""
        if self._shape is None:
            self._header()
        assert self._shape is not None
        return self._shape

    def numpy(self) -> np.ndarray:
        """Decode the pixels.

        Raises:
            InvalidSampleError: the file is not a readable 8-bit image (the message names it).
        """
        from lakecompute.compression import decode_image

        try:
            return decode_image(self._bytes(), self.shape)
        except InvalidArgumentError as exc:
            raise _unreadable(self.path, exc) from exc

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    def _lakecompute_blob(self) -> tuple[str, bytes, tuple[int, ...]]:
        """``(format, bytes, shape)`` for storing the file as it is (see ``htypes.encode_sample``)."""
        if not self._decodes:
            self.numpy()  # a file that does not decode must not be stored
        return self.format, self._bytes(), self.shape

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to a worker before it was read, an ImageFile travels as its path only.
        return (ImageFile, (self.path, self._data))

    def __repr__(self) -> str:
        return f"ImageFile({self.path!r})"


def read(path: PathLike) -> ImageFile:
    """Open an image file lazily; append the result to an image tensor like an array.

    Args:
        path: a JPEG, PNG, WebP or BMP file (any format Pillow reads).

    Returns:
        An `ImageFile`: ``.numpy()``, ``.shape``, ``.format``.

    Raises:
        InvalidArgumentError: there is no such file.

    Example:
        >>> import lakecompute as lc
        >>> ds = lc.empty("./photos", overwrite=True)  # doctest: +SKIP
        >>> ds.create_tensor("images", htype="image", sample_compression="jpeg")  # doctest: +SKIP
        >>> ds.images.append(lc.read("cat.jpg"))  # stored as the file's own bytes  # doctest: +SKIP
    """
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise InvalidArgumentError(
            f"No image file at {name!r}. Check the path (relative to {os.getcwd()!r})."
        )
    return ImageFile(name)


_FIX_FILE = "Fix or remove the file."


def _unreadable(path: str, exc: BaseException, tensor: str = "") -> InvalidSampleError:
    """A file that is not a readable image. Without ``tensor`` (an `ImageFile` does not know where it will
    be written) the tensor's writer names it; an ingest, which knows, says how to skip such files."""
    detail = f"cannot read image file {path!r} ({type(exc).__name__}: {exc}). {_FIX_FILE}"
    return InvalidSampleError(tensor, _with_skip_advice(detail) if tensor else detail)


def _with_skip_advice(detail: str) -> str:
    """An unreadable file's message as an ingest gives it: with the option that skips such files."""
    return detail.replace(
        _FIX_FILE, "Fix or remove the file, or pass skip_errors=True to skip unreadable files."
    )


# -- folders of classes ------------------------------------------------------------------------------


def _is_image(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _scan(src: str) -> tuple[list[str], list[tuple[str, int]]]:
    """Class names (sorted folder names) and ``(path, label)`` for every image, in sorted order."""
    if not os.path.isdir(src):
        raise InvalidArgumentError(
            f"Expected a folder of class sub-folders at {src!r}. Got "
            + ("a file." if os.path.exists(src) else "nothing: the path does not exist.")
        )
    classes: list[tuple[str, list[str]]] = []
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        files: list[str] = []
        # Images in sub-sub-folders belong to the class too; walk them in sorted order.
        for root, dirs, names in os.walk(entry.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            files.extend(os.path.join(root, n) for n in sorted(names) if _is_image(n))
        if files:
            classes.append((entry.name, sorted(files)))
    if not classes:
        raise InvalidArgumentError(
            f"Found no images in class sub-folders of {src!r}. Expected a layout like {src}/cat/1.jpg, "
            f"{src}/dog/2.png (image files ending in {', '.join(sorted(IMAGE_EXTENSIONS))})."
        )
    names = [c for c, _ in classes]
    items = [(path, label) for label, (_, files) in enumerate(classes) for path in files]
    return names, items


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """What `ingest_classification` does with a folder's files, decided from their names alone.

    Attributes:
        compression: how ``images`` are stored: ``"png"``, ``"jpeg"``, ``"webp"`` or None (arrays).
        formats: files per format (from their name endings), most common first.
        kept: files in the stored format, whose bytes are stored as they are (when their colour mode
            is the tensor's too: a greyscale JPEG among colour ones is converted after all).
        converted: files per other format, decoded and encoded again as ``compression``.
    """

    compression: str | None
    formats: dict[str, int]
    kept: int
    converted: dict[str, int]

    def summary(self) -> str:
        """One line for people: the stored format, and how many files were kept and converted."""
        stored = self.compression or "arrays (uncompressed)"
        total = sum(self.formats.values())
        if not self.converted:
            return f"Images stored as {stored}: all {total} files kept as they are."
        counts = ", ".join(f"{fmt}: {n}" for fmt, n in self.converted.items())
        return (
            f"Images stored as {stored}: {self.kept} of {total} files kept as they are, "
            f"{total - self.kept} converted ({counts})."
        )


def plan_images(paths: Sequence[str], image_compression: str | None) -> IngestPlan:
    """How images at ``paths`` are stored for ``image_compression`` (``"auto"``: their most common
    format), decided from their name endings alone (see `IngestPlan`)."""
    from lakecompute.compression import parse_sample_compression

    formats = Counter(_EXTENSION_FORMATS[os.path.splitext(p)[1].lower()] for p in paths)
    ranked = dict(sorted(formats.items(), key=lambda kv: (-kv[1], kv[0])))
    if image_compression == "auto":
        # The most common format wins; among equals lossless first; png when the most common is one
        # no tensor stores (bmp), which keeps those files exact.
        best = max(formats.values())
        winners = [f for f in _PREFERENCE if formats.get(f) == best]
        compression: str | None = winners[0] if winners else "png"
    else:
        compression = parse_sample_compression(image_compression)
    kept = formats.get(compression, 0) if compression is not None else 0
    converted = {f: n for f, n in ranked.items() if f != compression}
    return IngestPlan(compression, ranked, kept, converted)


def plan_classification(
    src_folder: PathLike, image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto"
) -> IngestPlan:
    """What `ingest_classification` would do with ``src_folder``: the stored format, and how many files
    are kept as they are or converted. Reads no file, only names.

    Example:
        >>> import lakecompute as lc
        >>> lc.ingest.plan_classification("./animals").summary()  # doctest: +SKIP
        'Images stored as jpeg: 280 of 300 files kept as they are, 20 converted (png: 12, bmp: 8).'
    """
    _, items = _scan(os.fspath(src_folder))
    return plan_images([p for p, _ in items], check_compression(image_compression))


def check_compression(value: object) -> str | None:
    """``"auto"``, or a sample compression checked by `lakecompute.compression.parse_sample_compression`."""
    from lakecompute.compression import parse_sample_compression

    if value == "auto":
        return "auto"
    return parse_sample_compression(value)  # type: ignore[arg-type]  # checked there, with a message


def refuse_overlap(src: str, dest: PathLike) -> None:
    """Refuse a destination that is the source folder, inside it, or contains it: creating the dataset
    there would delete or mix with the source images (``overwrite`` or not)."""
    text = os.fspath(dest)
    if "://" in text and not text.startswith("file://"):
        return  # mem:// and s3:// cannot be a local folder
    a = os.path.realpath(src)
    b = os.path.realpath(text.removeprefix("file://"))
    if a == b or b.startswith(a + os.sep) or a.startswith(b + os.sep):
        where = "is" if a == b else "is inside" if b.startswith(a + os.sep) else "contains"
        raise InvalidArgumentError(
            f"The destination {text!r} {where} the source folder {src!r}: creating the dataset there would "
            "delete or mix with the source images. Choose a destination outside the source folder."
        )


def target_mode(paths: Sequence[str]) -> Literal["L", "RGB"]:
    """``L`` when every readable file is greyscale, else ``RGB``: a tensor's samples share one rank."""
    from PIL import Image

    for path in paths:
        try:
            with Image.open(path) as image:  # reads the header only
                mode = image.mode
        except Exception:
            continue  # an unreadable file is reported, by name, by the worker that decodes it
        if mode not in ("L", "1"):
            return "RGB"
    return "L"


def load_for_ingest(path: str, mode: str, compression: str | None) -> np.ndarray | ImageFile:
    """Decode one file fully (so a broken one fails here, named); the bytes themselves when they can
    be stored as they are, else the pixels in ``mode``."""
    from PIL import Image

    from lakecompute.compression import decoded_mode

    file = ImageFile(path)
    data = file._bytes()
    try:
        with Image.open(BytesIO(data)) as opened:
            opened.load()
            decoded = decoded_mode(opened)
            fmt = _FORMATS.get(opened.format or "", "")
            if compression is not None and fmt == compression and decoded == mode:
                file._format = fmt
                width, height = opened.size
                file._shape = (height, width) if mode == "L" else (height, width, 3)
                file._decodes = True  # opened.load() above decoded every pixel: no need to again
                return file
            image: Image.Image = opened
            if image.mode != decoded:
                # Via the decoded mode: Pillow warns when a palette with transparency goes straight to RGB.
                image = image.convert(decoded)
            pixels = np.asarray(image.convert(mode) if image.mode != mode else image)
    except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken files
        raise _unreadable(path, exc, "images") from exc
    return pixels


def ingest_image(sample_in: tuple[str, int], sample_out: Any, mode: str, compression: str | None) -> None:
    """The compute function of `ingest_classification`: one ``(path, label)`` in, its image and label
    out (named for what progress bars and ``ds.log()`` show: ``eval ingest_image``)."""
    path, label = sample_in
    sample_out.images.append(load_for_ingest(path, mode, compression))
    sample_out.labels.append(label)


def ingest_classification(
    src_folder: PathLike,
    dest: PathLike,
    image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto",
    progressbar: bool = True,
    *,
    num_workers: int | None = None,
    scheduler: str = "processed",
    skip_errors: bool = False,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    checkpoint_interval: int = 0,
    resume: bool = False,
) -> Dataset:
    """Turn a folder of class sub-folders of images into a dataset of ``images`` and ``labels``.

    ```text
    animals/
      cats/  1.jpg  2.png  indoor/3.jpg     -> label 0 ("cats"), nested folders included
      dogs/  4.webp 5.bmp                   -> label 1 ("dogs")
    ```

    Class names are the sub-folder names, sorted; samples follow sorted paths, so the result is the
    same on every run. Files ending in .jpg, .jpeg, .png, .webp or .bmp (any case) are read; other
    files and hidden entries are ignored. Images keep their sizes. They are stored as RGB (HxWx3;
    transparency is dropped, greyscale repeated) unless every image is greyscale, in which case they
    are stored as HxW: a tensor's samples share one rank. A file already in the stored format (and
    colour mode) is stored as it is, not re-encoded: with the default ``"auto"``, a folder of JPEGs
    stays JPEG, byte for byte, and takes about as much space as the files.

    Files are opened and decoded in parallel, by an eval on the transform engine.

    Args:
        src_folder: the folder of class sub-folders.
        dest: where to create the dataset (a path, ``mem://name`` or ``s3://...``).
        image_compression: how ``images`` are stored: ``"auto"`` (the folder's most common format;
            others are converted, see `plan_classification`), ``"png"`` (lossless), ``"jpeg"``,
            ``"webp"`` (lossless) or None (raw arrays).
        progressbar: show a progress bar.
        num_workers: worker processes; None picks one per CPU (at most 8), or none for fewer than 100 files.
        scheduler: ``"processed"`` (default), ``"threaded"`` or ``"serial"``.
        skip_errors: skip files that cannot be read, with a `LakeComputeWarning` listing them,
            instead of raising.
        overwrite: replace a dataset already at ``dest``.
        storage_options: passed to the object store for ``s3://`` paths.
        checkpoint_interval: commit every this many images (0: once, at the end). A failed or killed
            ingest then keeps what it committed, and the same call with ``resume=True`` continues it.
        resume: continue the unfinished ingest at ``dest`` (made by the same call with
            ``checkpoint_interval``) after its last checkpoint; start anew if there is none.

    Returns:
        The new dataset.

    Raises:
        InvalidSampleError: a file cannot be read (the message names it); nothing is left at ``dest``.
        InvalidArgumentError: ``src_folder`` holds no class sub-folders with images, or ``dest`` is
            ``src_folder``, inside it or contains it (whatever ``overwrite`` says).
        DatasetExistsError: a dataset is at ``dest`` and ``overwrite`` is False.

    Example:
        >>> import lakecompute as lc
        >>> ds = lc.ingest_classification("./animals", "./animals-lc")  # doctest: +SKIP
        >>> ds.labels.info.class_names  # doctest: +SKIP
        ['cats', 'dogs']
    """
    requested = check_compression(image_compression)
    options = IngestOptions.parse(
        num_workers, scheduler, progressbar, skip_errors, storage_options, checkpoint_interval, resume
    )
    src = os.fspath(src_folder)
    refuse_overlap(src, dest)
    class_names, items = _scan(src)
    paths = [p for p, _ in items]
    compression = plan_images(paths, requested).compression
    mode = target_mode(paths)

    def setup(ds: Dataset) -> None:
        ds.create_tensor("images", htype="image", sample_compression=compression)
        ds.create_tensor("labels", htype="class_label", class_names=class_names)

    import lakecompute as lc

    function = lc.compute(ingest_image)(mode=mode, compression=compression)
    return run_ingest(dest, setup, function, items, paths, src, options, overwrite=overwrite)


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """How an ingest runs its eval (the options every ``ingest_*`` function takes).

    Attributes:
        num_workers: worker processes; None picks one per CPU (at most 8), or none for fewer than
            100 files.
        scheduler: ``"processed"``, ``"threaded"`` or ``"serial"``.
        progressbar: show a progress bar.
        skip_errors: skip files that cannot be read (with a warning listing them) instead of raising.
        storage_options: passed to the object store for ``s3://`` destinations.
        checkpoint_interval: commit every this many files (0: once, at the end); a failed or killed
            ingest then leaves its checkpointed part at the destination for ``resume``.
        resume: continue the unfinished ingest at the destination (the same call, checkpointed)
            instead of starting anew; without one there, start anew.
    """

    num_workers: int | None
    scheduler: str
    progressbar: bool
    skip_errors: bool
    storage_options: dict[str, Any] | None
    checkpoint_interval: int = 0
    resume: bool = False

    @classmethod
    def parse(
        cls,
        num_workers: object,
        scheduler: str,
        progressbar: bool,
        skip_errors: object,
        storage_options: dict[str, Any] | None,
        checkpoint_interval: object = 0,
        resume: object = False,
    ) -> IngestOptions:
        """Check the options; raises InvalidArgumentError / InvalidTypeError saying what is accepted."""
        if num_workers is not None and (
            not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0
        ):
            raise InvalidArgumentError(f"num_workers must be None or an int >= 0. Got {num_workers!r}.")
        if not isinstance(skip_errors, bool) or not isinstance(resume, bool):
            name, flag = (
                ("skip_errors", skip_errors) if not isinstance(skip_errors, bool) else ("resume", resume)
            )
            raise InvalidTypeError(f"{name} must be True or False. Got {flag!r}.")
        if (
            not isinstance(checkpoint_interval, int)
            or isinstance(checkpoint_interval, bool)
            or (checkpoint_interval < 0)
        ):
            raise InvalidArgumentError(
                f"checkpoint_interval must be an int >= 0 (0: no checkpoints). Got {checkpoint_interval!r}."
            )
        return cls(
            num_workers, scheduler, progressbar, skip_errors, storage_options, checkpoint_interval, resume
        )

    def workers_for(self, n_items: int) -> int:
        """The worker count for ``n_items`` files."""
        if self.num_workers is not None:
            return self.num_workers
        return 0 if n_items < _PARALLEL_FROM else min(8, os.cpu_count() or 1)


def run_ingest(
    dest: PathLike,
    setup: Callable[[Dataset], None],
    function: Any,
    items: Sequence[Any],
    paths: Sequence[str],
    src: str,
    options: IngestOptions,
    *,
    overwrite: bool,
) -> Dataset:
    """Create the dataset at ``dest``, make its tensors (``setup``, one commit) and fill it with an eval of
    ``function`` over ``items`` (``paths[i]`` names the file of ``items[i]`` in errors and warnings).

    On a failure nothing is left at ``dest`` (with ``checkpoint_interval``: what was checkpointed, for
    ``resume``); a file that cannot be read raises `InvalidSampleError` naming it. With ``skip_errors``
    the files that failed are listed in a `LakeComputeWarning`.
    """
    import lakecompute as lc

    where = options.storage_options
    resuming = options.resume and lc.exists(dest, storage_options=where)
    if resuming:
        ds = lc.load(dest, storage_options=where)
    else:
        ds = lc.empty(dest, overwrite=overwrite, storage_options=where)
    # With checkpoints, a failed ingest keeps what it committed, for resume=True to continue.
    discard = not options.checkpoint_interval and not resuming
    try:
        if not resuming:
            with ds:
                setup(ds)
        result = function.eval(
            items,
            ds,
            num_workers=options.workers_for(len(items)),
            scheduler=options.scheduler,
            progressbar=options.progressbar,
            ignore_errors=options.skip_errors,
            checkpoint_interval=options.checkpoint_interval,
        )
    except TransformError as err:
        if discard:
            lc.delete(dest, missing_ok=True, storage_options=where)
        cause = err.__cause__ or err
        path = paths[err.index] if err.index is not None else src
        if isinstance(cause, InvalidSampleError):
            # Raised as the caller's error, naming the file (the worker's own message may already).
            named = "" if path in cause.detail else f"the sample of {path!r}: "
            raise InvalidSampleError(cause.tensor, named + _with_skip_advice(cause.detail)) from err
        raise _unreadable(path, cause, "images") from err
    except BaseException:
        if discard:
            lc.delete(dest, missing_ok=True, storage_options=where)
        raise
    if result.failed:
        skipped = [paths[f.index] for f in result.failed]
        shown = "\n  ".join(skipped[:20]) + (
            f"\n  ... and {len(skipped) - 20} more" if len(skipped) > 20 else ""
        )
        warnings.warn(
            f"Skipped {len(skipped)} unreadable file(s) of {len(items)} in {src!r}:\n  {shown}",
            LakeComputeWarning,
            stacklevel=3,
        )
    return ds


# -- arrays ------------------------------------------------------------------------------------------


def from_numpy(
    path: PathLike,
    arrays: Mapping[str, Any],
    *,
    htypes: Mapping[str, str] | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Dataset:
    """Make a dataset with one tensor per array; the first axis of each array indexes samples.

    Args:
        path: where to create the dataset.
        arrays: tensor name -> a numpy array (or a list of per-sample arrays, which may differ in
            shape). Every entry must have the same number of samples. String arrays become ``text``
            tensors.
        htypes: tensor name -> htype for tensors that are not ``generic`` (e.g. ``{"images": "image"}``).
        overwrite: replace a dataset already at ``path``.
        storage_options: passed to the object store for ``s3://`` paths.

    Returns:
        The new dataset, with everything in one commit.

    Raises:
        InvalidArgumentError: the arrays have different numbers of samples, or an htype is unknown.

    Example:
        >>> import numpy as np, lakecompute as lc
        >>> ds = lc.from_numpy("mem://fn-doc", {"x": np.zeros((4, 2)), "y": np.arange(4)}, overwrite=True)
        >>> len(ds), ds.x.shape
        (4, (4, 2))
    """
    import lakecompute as lc

    if not isinstance(arrays, Mapping) or not arrays:
        raise InvalidTypeError(f"Expected a non-empty dict of tensor name -> array. Got {arrays!r:.80}.")
    htypes = dict(htypes or {})
    unknown = sorted(set(htypes) - set(arrays))
    if unknown:
        raise InvalidArgumentError(
            f"htypes names tensors {unknown!r} that are not in arrays ({sorted(arrays)!r})."
        )
    lengths = {name: len(values) for name, values in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(
            f"Every array needs the same number of samples (first axis). Got {lengths}."
        )
    ds = lc.empty(path, overwrite=overwrite, storage_options=storage_options)
    with ds:
        for name, values in arrays.items():
            htype = htypes.get(name)
            if htype is None and isinstance(values, np.ndarray) and values.dtype.kind in "US":
                htype = "text"
            dtype = values.dtype if isinstance(values, np.ndarray) and htype in (None, "generic") else None
            ds.create_tensor(name, htype=htype, dtype=dtype)
        ds.extend(
            {name: (values.tolist() if _is_text(values) else values) for name, values in arrays.items()}
        )
    return ds


def _is_text(values: Any) -> bool:
    return isinstance(values, np.ndarray) and values.dtype.kind in "US"
