"""`ingest_classification`: a folder of class sub-folders of images becomes ``images`` and ``labels``.

The parent only lists files (and peeks at their headers); opening and decoding every file runs in
parallel on the transform engine (`run_ingest`), so a corrupt file is reported like any failing
sample, by name. By default images keep the folder's most common format, and files in that format
are stored as they are (`plan_classification` says what will happen).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from lakecompute.errors import InvalidArgumentError, warn
from lakecompute.ingest._files import (
    AS_STORED,
    IMAGE_EXTENSIONS,
    PathLike,
    ReadOptions,
    image_files,
    load_for_ingest,
    skipped_images,
)
from lakecompute.ingest._options import IngestOptions
from lakecompute.ingest._plan import (
    IngestPlan,
    check_compression,
    plan_images,
    refuse_overlap,
)
from lakecompute.ingest._run import run_ingest

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.datasets import Dataset
    from lakecompute.ingest._options import IngestKwargs

__all__ = ["ingest_classification", "ingest_image", "plan_classification"]


def _scan(src: str, say: bool = True) -> tuple[list[str], list[tuple[str, int]]]:
    """Class names (every sub-folder's name, sorted, empty ones included) and ``(path, label)`` for every
    image, in sorted order. With ``say``, a warning names the image files of endings not read, and one
    names the class folders holding no image (their classes are kept, so labels depend on names only)."""
    if not os.path.isdir(src):
        raise InvalidArgumentError(
            f"Expected a folder of class sub-folders at {src!r}. Got "
            + ("a file." if os.path.exists(src) else "nothing: the path does not exist.")
        )
    skipped: list[str] = []
    classes = _class_files(src, skipped)
    if say:
        skipped_images(skipped, "ingest_classification", src)
    if not any(files for _, files in classes):
        raise InvalidArgumentError(
            f"Found no images in class sub-folders of {src!r}. Expected a layout like {src}/cat/1.jpg, "
            f"{src}/dog/2.png (image files ending in {', '.join(sorted(IMAGE_EXTENSIONS))})."
        )
    if say:
        _say_empty([name for name, files in classes if not files], src)
    names = [c for c, _ in classes]
    items = [(path, label) for label, (_, files) in enumerate(classes) for path in files]
    return names, items


def _class_files(src: str, skipped: list[str]) -> list[tuple[str, list[str]]]:
    """Every class sub-folder of ``src`` (not hidden), by sorted name, with its image files (at any depth:
    images in sub-sub-folders belong to the class too); image files not read are added to ``skipped``."""
    return [
        (entry.name, [os.path.join(entry.path, f) for f in image_files(entry.path, skipped, above=(src,))])
        for entry in sorted(os.scandir(src), key=lambda e: e.name)
        if not entry.name.startswith(".") and entry.is_dir()
    ]


def _say_empty(empty: list[str], src: str) -> None:
    """Warn, once, naming the class folders of ``src`` that hold no image; nothing when there are none."""
    if empty:
        warn(
            f"ingest_classification found no images in {len(empty)} class folder(s) of {src!r}: "
            f"{', '.join(repr(name) for name in empty)}. They are kept as classes without samples, so "
            "every class's label is its place among the sorted folder names, the same in every split."
        )


def plan_classification(
    src_folder: PathLike, image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto"
) -> IngestPlan:
    """What `ingest_classification` would do with ``src_folder``: the stored format, and how many files
    are kept as they are or converted. Reads no file, only names.

    Example:
        >>> lc.ingest.plan_classification("./animals").summary()  # doctest: +SKIP
        'Images stored as jpeg: 280 of 300 files kept as they are, 20 converted (png: 12, bmp: 8).'
    """
    _, items = _scan(os.fspath(src_folder), say=False)
    return plan_images([p for p, _ in items], check_compression(image_compression))


def ingest_image(
    sample_in: tuple[str, int],
    sample_out: Any,
    mode: str,
    compression: str | None,
    reading: ReadOptions = AS_STORED,
) -> None:
    """The compute function of `ingest_classification`: one ``(path, label)`` in, its image and label
    out (named for what progress bars and ``ds.log()`` show: ``eval ingest_image``)."""
    path, label = sample_in
    sample_out.images.append(load_for_ingest(path, mode, compression, reading))
    sample_out.labels.append(label)


def ingest_classification(
    src_folder: PathLike,
    dest: PathLike,
    image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto",
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Turn a folder of class sub-folders of images into a dataset of ``images`` and ``labels``.

    ```text
    animals/
      cats/  1.jpg  2.png  indoor/3.jpg     -> label 0 ("cats"), nested folders included
      dogs/  4.webp 5.bmp                   -> label 1 ("dogs")
    ```

    Class names are the sub-folder names, sorted, and a class's label is its place among them: a
    sub-folder holding no image is a class too (without samples, named in a warning), so splits with the
    same folders give every class the same label. Samples follow sorted paths, so the result is the
    same on every run. Files ending in .jpg, .jpeg, .png, .webp, .bmp, .tif, .tiff, .ppm or .pgm (any
    case; torchvision's ``ImageFolder``'s endings) are read; image files of other endings (.gif, .heic,
    camera raw, ...) are skipped with a warning naming them; other
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
        **options: the options every ingest takes (`lakecompute.ingest.IngestKwargs`), by keyword.

    Returns:
        The new dataset.

    Raises:
        InvalidSampleError: a file cannot be read (the message names it); nothing is left at ``dest``.
        InvalidArgumentError: ``src_folder`` holds no class sub-folders with images, or ``dest`` is
            ``src_folder``, inside it or contains it (whatever ``overwrite`` says).
        DatasetExistsError: a dataset is at ``dest`` and ``overwrite`` is False.

    Example:
        >>> ds = lc.ingest_classification("./animals", "./animals-lc")  # doctest: +SKIP
        >>> ds.labels.info.class_names  # doctest: +SKIP
        ['cats', 'dogs']
    """
    parsed = IngestOptions.parse("ingest_classification", options, image_compression, progressbar)
    src = os.fspath(src_folder)
    refuse_overlap(src, dest)
    class_names, items = _scan(src)
    paths = [p for p, _ in items]

    def setup(ds: Dataset, compression: str | None) -> None:
        ds.create_tensor("images", htype="image", sample_compression=compression)
        ds.create_tensor("labels", htype="class_label", class_names=class_names)

    return run_ingest(dest, setup, ingest_image, items, paths, src, parsed)
