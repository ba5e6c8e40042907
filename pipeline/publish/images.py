"""The images the tables refer to, fetched with img2dataset into shards, indexed per row, and read back. No Beam.

<images_dir> holds
  shards/NNNNN.tar, NNNNN.parquet, NNNNN_stats.json   img2dataset output (webdataset: images in the tar, the
                                                     .parquet holds every attempt's status), or
  shards/NNNNN.parquet, NNNNN_stats.json              (parquet: the image bytes in its `jpg` column)
  index/<table>.parquet                               one row per (table, example_id): its image's shard and key
  settings.json                                       format and size of the shards, fixed by the first run
  report.json                                         the last run's report

Each image is fetched once for all tables (COCO rows share it by image_id, Visual Genome rows by image_path).
A run asks img2dataset only for images no complete shard holds or failed on (those too with retry_failed),
numbering its shards after the existing ones (incremental_mode="extend"), so a re-run fetches nothing twice. A
kept attempt counts for a row only when it was made at the url the row names now (an image id of an earlier corpus
with other urls is another picture), and a kept image only while its stored bytes have the sha256 recorded when its
shard was checked (else it is taken out, changed_since_fetched, and fetched again).
A shard is complete once img2dataset wrote its _stats.json: the files of an incomplete one (an interrupted
run) are removed and its images asked for again by the next run.

img2dataset keeps the original bytes when it does not resize (skip_reencode), and OpenCV decodes some corrupt
JPEGs that PIL refuses. So every complete shard is checked once with PIL: an image that does not decode is
taken out of the shard and its attempt marked failed_to_decode; the shard's stats then get hardpos_verified.
(When resizing, img2dataset re-encodes what OpenCV decoded, so such damage cannot be seen afterwards.)

Decoding is bounded per image, whatever the codec: every image hardpos or img2dataset decodes is first measured
from its header (open_bounded), and one with more pixel values (pixels x channels) than --image_max_pixel_values
is refused undecoded. A 150 KB PNG may declare 6,000x6,000 RGBA: OpenCV's decode and img2dataset's alpha blending
took one worker to 3 GB for it.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import re
import signal
import stat
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.folder_lock import kernel_file
from pipeline.publish.image_shards import RowGroups, parquet_images, read_member, tar_images
from pipeline.urls import redacted, shown

SHARDS = "shards"
INDEX = "index"
SETTINGS_FILE = "settings.json"
INSTALL_HINT = "pip install -e '.[images]'"
URL_SCHEMES = ("http://", "https://")  # what a table's image_url or a URL --image_root may be; nothing else is read
# A row whose image reference points outside what the run may read, or at an image id that rows give different
# urls (which picture is meant cannot be told): its image fails with this reason, unfetched.
AMBIGUOUS_IMAGE_ID = "duplicate_image_id"
REFUSED = ("url_not_http", "path_outside_image_root", AMBIGUOUS_IMAGE_ID)
BBOX = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
IMAGE_EXT = "jpg"  # img2dataset encode_format: the tar member suffix and the parquet image column
DECODE_FAILED = "failed_to_decode"
CHANGED = "changed_since_fetched"  # the status of a stored image whose bytes are no longer the ones recorded
VERIFIED = "hardpos_verified"
# In a shard's stats, once checked: key -> sha256 of the image bytes stored for it, which a later run compares
# before it reuses the image (img2dataset's own sha256 is of the fetched bytes, which it may have re-encoded).
STORED_SHA256 = "hardpos_stored_sha256"
FAILURES_LISTED = 100
_SHARD_FILE = re.compile(r"^(\d+)(\.tar|\.parquet|_stats\.json)$")
_META_COLUMNS = ["key", "image_key", "url", "status", "error_message", "width", "height", "original_width",
                 "original_height", "sha256"]

_INDEX_FIELDS = [
    ("table", pa.string(), "Table folder the row comes from."),
    ("example_id", pa.string(), "The row's example_id."),
    ("image_key", pa.string(), "The image across tables: coco/<image_id>, vg/<image_path> or url/<url>."),
    ("url", pa.string(), "Where the image was (or would be) fetched from, its password and query values as ***."),
    ("url_sha256", pa.string(), "sha256 of that url as fetched, secrets and all: what the trainer checks a row's "
                                "image_url against."),
    ("status", pa.string(), "ok (in the shards), failed, or no_image (the row names no image)."),
    ("reason", pa.string(), "Why not ok: http_404, decode_error, timeout, deadline_exceeded, too_large, "
                            "too_many_pixel_values, url_not_http, path_outside_image_root, duplicate_image_id, "
                            "..., no_image_url, no_image_path."),
    ("error", pa.string(), "The failure's message (img2dataset's, or PIL's for a decode check)."),
    ("shard", pa.string(), "Shard file holding the image, relative to the images folder."),
    ("key", pa.string(), "The image's key inside the shard (tar member <key>.jpg, or the parquet `key`)."),
    ("width", pa.int32(), "Stored image width."),
    ("height", pa.int32(), "Stored image height."),
    ("original_width", pa.int32(), "Width before resizing (the box's pixel space)."),
    ("original_height", pa.int32(), "Height before resizing."),
    ("sha256", pa.string(), "sha256 of the fetched bytes."),
    ("bbox_x", pa.float64(), "SWAP rows: ARO crop box left, in original pixels."),
    ("bbox_y", pa.float64(), "SWAP rows: crop box top."),
    ("bbox_w", pa.float64(), "SWAP rows: crop box width."),
    ("bbox_h", pa.float64(), "SWAP rows: crop box height."),
    ("table_rows", pa.int64(), "Table rows with this example_id and image (e.g. one per hard negative)."),
]
INDEX_SCHEMA = pa.schema([pa.field(n, t, nullable=n not in ("table", "example_id", "status", "table_rows"),
                                   metadata={"description": d}) for n, t, d in _INDEX_FIELDS],
                         metadata={"hardpos.index": "images"})


# ---------------------------------------------------------------------------------------------- what to fetch

@dataclass(frozen=True)
class ImageRef:
    """The image of one table row. `key` is None when the row names no image; `missing` then says why."""
    example_id: str
    key: str | None
    url: str | None
    missing: str | None = None
    bbox: tuple[float, float, float, float] | None = None


@dataclass(frozen=True)
class ImageTable:
    name: str
    rows_read: int  # rows in the table's files, counted apart from refs so the report can check the sum
    refs: list[ImageRef]


def is_url(root: str) -> bool:
    return root.startswith(URL_SCHEMES)


def leads_outside(image_path: str) -> bool:
    """Whether a path that a table or an evaluation file names leads outside the folder it is read under, whatever
    that folder: absolute, a ".." part, a drive or URL scheme."""
    parts = image_path.replace("\\", "/").split("/")
    return image_path.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]


def url_sha256(url: str | None) -> str | None:
    """The sha256 of a URL as given (the index keeps it redacted, so two URLs that differ only in a secret or a
    query value look alike there)."""
    return None if url is None else hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()


def _shown(url: str | None) -> str | None:
    """A URL as the report and the index keep it: its password and query values as *** (pipeline/urls.py)."""
    return None if url is None else redacted(url)


def vg_url(image_root: str, image_path: str) -> str | None:
    """A Visual Genome image_path under --image_root: a URL prefix, or a local folder as a file:// URL
    (img2dataset fetches with urllib, which reads file:// URLs, so local images give the same shards). None when
    the path leads outside the root (absolute, "..", a link out of a local root)."""
    if leads_outside(image_path):
        return None
    if is_url(image_root):
        # joined to the root's path, before its query and fragment (a signed prefix: ?sig=...)
        parts = urlsplit(image_root)
        return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + quote(image_path, safe="/")))
    root = Path(image_root).resolve()
    path = (root / image_path).resolve()
    return path.as_uri() if path.is_relative_to(root) else None


def row_ref(row: dict, image_root: str | None) -> ImageRef:
    """The image of a table row: COCO-derived tables by image_url (keyed by image_id), VG ones by image_path.
    URLs other than http(s) and paths outside --image_root are refused, never read."""
    example_id = row["example_id"]
    bbox = tuple(float(row[c]) for c in BBOX) if all(row.get(c) is not None for c in BBOX) else None
    if "image_url" in row:
        url = row["image_url"]
        if not url:
            return ImageRef(example_id, None, None, "no_image_url", bbox)
        if not is_url(url):
            return ImageRef(example_id, None, url, "url_not_http", bbox)
        key = f"coco/{row['image_id']}" if row.get("image_id") is not None else f"url/{url}"
        return ImageRef(example_id, key, url, None, bbox)
    path = row.get("image_path")
    if not path:
        return ImageRef(example_id, None, None, "no_image_path", bbox)
    if image_root is None:
        raise ValueError("rows with image_path need an image root")
    url = vg_url(image_root, path)
    if url is None:
        return ImageRef(example_id, None, path, "path_outside_image_root", bbox)
    return ImageRef(example_id, f"vg/{path}", url, None, bbox)


def failure_reason(status: str, error: str | None) -> str:
    """A short reason for the report from img2dataset's status and error message."""
    error = error or ""
    if TOO_MANY_PIXEL_VALUES_ERROR in error:
        return TOO_MANY_PIXEL_VALUES
    if status == CHANGED:
        return CHANGED
    if status == DECODE_FAILED or error == "Image decoding error" or error.startswith(HEADER_ERROR):
        return "decode_error"
    http = re.match(r"HTTP Error (\d+)", error)
    if http:
        return f"http_{http.group(1)}"
    lowered = error.lower()
    for needle, reason in ((DEADLINE_ERROR, "deadline_exceeded"), (TOO_LARGE_ERROR, "too_large"),
                           (REFUSED_URL_ERROR, "url_not_http"), ("timed out", "timeout"), ("no such file", "file_not_found"),
                           ("connection refused", "connection_refused"), ("name or service not known", "dns_error"),
                           ("name resolution", "dns_error"), ("x-robots-tag", "disallowed_by_robots"),
                           ("hash mismatch", "hash_mismatch")):
        if needle in lowered:
            return reason
    return "image_rejected" if status == "failed_to_resize" else "download_error"


# ---------------------------------------------------------------------------------------------- shards on disk

@dataclass(frozen=True)
class Attempt:
    """One img2dataset attempt at an image, as its shard's metadata records it."""
    image_key: str
    shard: str  # data file relative to the images folder: shards/00003.tar or shards/00003.parquet
    key: str
    url: str
    status: str
    error: str | None
    width: int | None
    height: int | None
    original_width: int | None
    original_height: int | None
    sha256: str | None

    @property
    def ok(self) -> bool:
        return self.status == "success"


FETCH_LIST = "_fetch_list.parquet"  # the urls handed to img2dataset: not a shard name, never read as one
IMG2DATASET_TMP = "_tmp"


_TMP_FILE = re.compile(r"^\d+\.feather$")  # img2dataset's input shards in its _tmp folder


def shards_entry_problem(shards_dir: str, name: str) -> str | None:
    """Why an entry of shards/ is not one the images stage or img2dataset writes there, of the kind they write, else
    None. img2dataset removes its _tmp folder whole, and would remove through a link: a leftover _tmp may hold only
    its own .feather files."""
    path = os.path.join(shards_dir, name)
    kind = os.lstat(path).st_mode
    if _SHARD_FILE.match(name) or name == FETCH_LIST:
        return None if stat.S_ISREG(kind) else "is not a regular file"
    if name != IMG2DATASET_TMP:
        return "is not a file the images stage or img2dataset writes"
    if not stat.S_ISDIR(kind):
        return "is not img2dataset's temporary folder (a folder, not a link)"
    for entry in os.scandir(path):
        if not _TMP_FILE.match(entry.name) or not entry.is_file(follow_symlinks=False):
            return f"holds {entry.name[:200]!r}, which img2dataset (removing the folder whole) did not write"
    return None


def _shard_files(shards_dir: str) -> dict[str, set[str]]:
    """Shard name (00003) -> its file suffixes (.tar, .parquet, _stats.json)."""
    shards: dict[str, set[str]] = {}
    for name in os.listdir(shards_dir) if os.path.isdir(shards_dir) else ():
        match = _SHARD_FILE.match(name)
        if match:
            shards.setdefault(match.group(1), set()).add(match.group(2))
    return shards


def complete_shards(shards_dir: str) -> list[str]:
    return sorted(name for name, files in _shard_files(shards_dir).items() if "_stats.json" in files)


def drop_incomplete_shards(shards_dir: str) -> list[str]:
    """Remove the files of shards img2dataset did not finish (no _stats.json); their images count as never tried."""
    dropped = sorted(name for name, files in _shard_files(shards_dir).items() if "_stats.json" not in files)
    for name in dropped:
        for suffix in (".tar", ".parquet"):
            path = os.path.join(shards_dir, name + suffix)
            if os.path.exists(path):
                os.remove(path)
    return dropped


def shard_data_file(shards_dir: str, name: str) -> str:
    tar = os.path.join(shards_dir, f"{name}.tar")
    return tar if os.path.exists(tar) else os.path.join(shards_dir, f"{name}.parquet")


def read_attempts(images_dir: str, wanted: Mapping[str, str] | None = None) -> dict[str, Attempt]:
    """image_key -> the attempt that counts: the first success, else the latest failure. With `wanted` (image_key ->
    the url the rows name now), only the attempts at that url count: an image fetched earlier from another URL (the
    same COCO image id in an earlier corpus) is another picture, never given to these rows."""
    shards_dir = os.path.join(images_dir, SHARDS)
    chosen: dict[str, Attempt] = {}
    for name in complete_shards(shards_dir):
        data = os.path.relpath(shard_data_file(shards_dir, name), images_dir).replace(os.sep, "/")
        meta = shard_meta(shards_dir, name, _META_COLUMNS).to_pylist()
        for row in meta:
            attempt = Attempt(row["image_key"], data, row["key"], row["url"], row["status"], row["error_message"],
                              row["width"], row["height"], row["original_width"], row["original_height"],
                              row["sha256"])
            if wanted is not None and wanted.get(attempt.image_key) != attempt.url:
                continue
            previous = chosen.get(attempt.image_key)
            if previous is None or not previous.ok:
                chosen[attempt.image_key] = attempt
    return chosen


# ---------------------------------------------------------------------------------------------- decode bound

MAX_PIXEL_VALUES = 4096 * 4096 * 4  # a 4,096x4,096 RGBA image; COCO's largest is 640x640 RGB
TOO_MANY_PIXEL_VALUES = "too_many_pixel_values"  # the failure's reason
TOO_MANY_PIXEL_VALUES_ERROR = "more pixel values than --image_max_pixel_values"
HEADER_ERROR = "unreadable image header"
_PIL_COORDINATES = 2**31  # PIL's crop takes C ints


class ImageTooLarge(ValueError):
    """An image, or a crop of one, holding more pixel values than the bound: refused before it is decoded (cropped)."""


class BadBox(ValueError):
    """A crop box that is not finite, or misses the image altogether."""


def decoded_channels(image) -> int:
    """Values per pixel once decoded, by any of our decoders: RGBA for alpha or a palette (OpenCV and the
    convert to RGB expand a palette, with its transparency), else RGB (a grey image becomes RGB for CLIP)."""
    bands = image.getbands()
    return 4 if len(bands) >= 4 or "A" in bands or image.mode in ("P", "PA") else 3


def pixel_values(width: int, height: int, channels: int, resize_to: int = 0) -> int:
    """Values a decode holds: the image's, or its copy resized to a shorter side of resize_to (img2dataset's
    keep_ratio, which also enlarges), whichever is more."""
    pixels = width * height
    if resize_to:
        scale = resize_to / max(1, min(width, height))
        pixels = max(pixels, math.ceil(width * scale) * math.ceil(height * scale))
    return pixels * channels


def open_bounded(source, max_values: int = MAX_PIXEL_VALUES, resize_to: int = 0):
    """The PIL image of `source` (bytes, a path or a file) with only its header read, or ImageTooLarge when it
    would decode to more than max_values pixel values. The caller decodes (load, convert, crop) or closes it;
    anything PIL raises on a bad header is left to the caller."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
    except Image.DecompressionBombError as e:  # PIL's own, coarser bound (pixels only)
        raise ImageTooLarge(str(e)) from None
    values = pixel_values(image.width, image.height, decoded_channels(image), resize_to)
    if values > max_values:
        image.close()
        resized = f" (resized to a shorter side of {resize_to:,})" if resize_to else ""
        raise ImageTooLarge(f"{image.width:,}x{image.height:,} {image.mode}{resized} is {values:,} pixel values, "
                            f"more than --image_max_pixel_values={max_values:,}")
    return image


def crop_box(image, box: tuple[float, float, float, float], max_values: int = MAX_PIXEL_VALUES):
    """image.crop(box) as ARO crops, a box running past the edges padded with black, bounded: BadBox when a
    corner is not finite or the box misses the image, ImageTooLarge when the crop would hold more than
    max_values pixel values (PIL allocates the whole box, however little of it the image covers)."""
    if not all(math.isfinite(v) for v in box):
        raise BadBox(f"box {box} is not finite")
    x0, y0, x1, y1 = (round(v) for v in box)
    if x1 <= 0 or y1 <= 0 or x0 >= image.width or y0 >= image.height:
        raise BadBox(f"box ({x0:.3g}, {y0:.3g}, {x1:.3g}, {y1:.3g}) misses the {image.width}x{image.height} image")
    values = max(0, x1 - x0) * max(0, y1 - y0) * len(image.getbands())
    if values > max_values or max(abs(x0), abs(y0), abs(x1), abs(y1)) >= _PIL_COORDINATES:
        raise ImageTooLarge(f"a crop of {x1 - x0:,}x{y1 - y0:,} is {values:,} pixel values, more than "
                            f"--image_max_pixel_values={max_values:,}")
    return image.crop((x0, y0, x1, y1))


# ---------------------------------------------------------------------------------------------- decode check

def check_image(data: bytes, max_values: int = MAX_PIXEL_VALUES) -> str | None:
    """None if PIL decodes every byte of the image, else the error; an image past the bound is not decoded."""
    try:
        with open_bounded(data, max_values) as image:
            # JPEG at 1/8 scale: far cheaper, and the decoder still reads (and checks) the whole stream.
            image.draft(None, (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
    except ImageTooLarge as e:
        return f"{TOO_MANY_PIXEL_VALUES_ERROR}: {e}"
    except Exception as e:  # PIL raises many types for bad data
        return _pil_error(e)
    return None


def _pil_error(e: Exception) -> str:
    # Without the "<_io.BytesIO object at 0x...>" PIL names the file by: the index and report stay byte-identical.
    return f"PIL {type(e).__name__}: {re.sub(r' ?<[^<>]* at 0x[0-9a-f]+>', '', str(e))}"


def header_problem(data: bytes, max_values: int = MAX_PIXEL_VALUES, resize_to: int = 0) -> str | None:
    """Why a fetched image must not reach img2dataset's decoder (OpenCV), from its header alone, or None. An image
    PIL cannot read the header of is refused too: its size is unknown (and the shard check would refuse it)."""
    try:
        open_bounded(data, max_values, resize_to).close()
    except ImageTooLarge as e:
        return f"{TOO_MANY_PIXEL_VALUES_ERROR}: {e}"
    except Exception as e:  # noqa: BLE001 - any header PIL cannot read
        return f"{HEADER_ERROR}: {_pil_error(e)}"
    return None


def _damaged_shard(path: str, error: Exception) -> PlantedEntry:
    shown = (str(error).splitlines() or [type(error).__name__])[0][:120]
    return PlantedEntry(f"{path}: not what img2dataset wrote ({shown}); move the shard's files away (it is fetched "
                        f"again)")


def shard_meta(shards_dir: str, name: str, columns: list[str] | None = None) -> pa.Table:
    """A complete shard's metadata (its .parquet), or PlantedEntry (one line) for one that is damaged: emptied,
    not Parquet, without the columns img2dataset writes."""
    path = os.path.join(shards_dir, f"{name}.parquet")
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException, ValueError, KeyError) as e:
        raise _damaged_shard(path, e) from None


def _shard_images(shards_dir: str, name: str) -> Iterator[tuple[str, bytes]]:
    """(key, image bytes) of every image stored in the shard; PlantedEntry (one line) for a damaged one."""
    path = shard_data_file(shards_dir, name)
    try:
        yield from _stored_images(path)
    except (OSError, tarfile.TarError, pa.ArrowException, ValueError, KeyError) as e:
        raise _damaged_shard(path, e) from None


def _stored_images(path: str) -> Iterator[tuple[str, bytes]]:
    if path.endswith(".tar"):
        with tarfile.open(path) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(f".{IMAGE_EXT}"):
                    yield member.name[:-len(IMAGE_EXT) - 1], tar.extractfile(member).read()
        return
    parquet = pq.ParquetFile(path)
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=["key", IMAGE_EXT])
        for key, data in zip(table["key"].to_pylist(), table[IMAGE_EXT].to_pylist(), strict=True):
            if data is not None:
                yield key, data


def _batches(items: Iterable, size: int) -> Iterator[list]:
    items = iter(items)
    while batch := list(islice(items, size)):
        yield batch


def _write_atomic(path: str, write) -> None:
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def _drop_samples(shards_dir: str, name: str, bad: dict[str, str], status: str = DECODE_FAILED) -> None:
    """Take the images in `bad` (key -> error) out of the shard and mark their attempts `status`."""
    tar_path = os.path.join(shards_dir, f"{name}.tar")
    if os.path.exists(tar_path):
        def write_tar(tmp):
            with tarfile.open(tar_path) as src, tarfile.open(tmp, "w") as dst:
                for member in src:
                    if member.name.split(".", 1)[0] not in bad:
                        dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        _write_atomic(tar_path, write_tar)
    meta_path = os.path.join(shards_dir, f"{name}.parquet")
    table = shard_meta(shards_dir, name)
    hit = pc.is_in(table["key"], value_set=pa.array(sorted(bad), pa.string()))
    errors = [bad.get(k, e) for k, e in zip(table["key"].to_pylist(), table["error_message"].to_pylist(), strict=True)]
    columns = {"status": pc.if_else(hit, pa.scalar(status), table["status"]),
               "error_message": pa.array(errors, pa.string())}
    for column in ("width", "height", "original_width", "original_height", "sha256", IMAGE_EXT):
        if column in table.column_names:
            columns[column] = pc.if_else(hit, pa.scalar(None, table.schema.field(column).type), table[column])
    for column, values in columns.items():
        i = table.schema.get_field_index(column)
        table = table.set_column(i, table.schema.field(i), values)
    # Small row groups, as img2dataset writes them, so a reader can fetch one image without the whole shard.
    _write_atomic(meta_path, lambda tmp: pq.write_table(table, tmp, row_group_size=100))


def _take_out(shards_dir: str, name: str, stats: dict, bad: dict[str, str], status: str) -> None:
    """Take the images in `bad` (key -> error) out of the shard, their attempts marked `status`, and count them so
    in the shard's stats (not written here)."""
    if not bad:
        return
    meta = shard_meta(shards_dir, name, ["key", "status"])
    successes = {k for k, st in zip(meta["key"].to_pylist(), meta["status"].to_pylist(), strict=True)
                 if st == "success"}
    _drop_samples(shards_dir, name, bad, status)
    lost = len(successes & bad.keys())
    stats["successes"] = stats.get("successes", 0) - lost
    stats[status] = stats.get(status, 0) + lost
    status_dict = stats.setdefault("status_dict", {})
    status_dict["success"] = status_dict.get("success", 0) - lost
    status_dict[status] = status_dict.get(status, 0) + lost
    for key in bad:
        stats.get(STORED_SHA256, {}).pop(key, None)


def verify_shards(images_dir: str, threads: int = 4, max_values: int = MAX_PIXEL_VALUES) -> dict[str, str]:
    """Check the images of every complete shard not checked yet, and record the sha256 of each image's stored bytes
    (STORED_SHA256); returns image_key -> error of those taken out."""
    shards_dir = os.path.join(images_dir, SHARDS)
    removed: dict[str, str] = {}
    for name in complete_shards(shards_dir):
        stats_path = os.path.join(shards_dir, f"{name}_stats.json")
        stats = own_json(stats_path, STATS_HINT)
        if stats.get(VERIFIED) and isinstance(stats.get(STORED_SHA256), dict):
            continue
        meta = shard_meta(shards_dir, name, ["key", "image_key", "status"])
        meta = {column: meta[column].to_pylist() for column in meta.column_names}
        image_keys = dict(zip(meta["key"], meta["image_key"], strict=True))
        successes = {k for k, status in zip(meta["key"], meta["status"], strict=True) if status == "success"}
        bad: dict[str, str] = {}
        stored: dict[str, str] = {}
        seen = set()
        with ThreadPoolExecutor(max(1, threads)) as pool:  # PIL decodes outside the GIL
            for batch in _batches(_shard_images(shards_dir, name), 64):
                checked = pool.map(functools.partial(check_image, max_values=max_values), [d for _, d in batch])
                for (key, data), error in zip(batch, checked, strict=True):
                    seen.add(key)
                    stored[key] = hashlib.sha256(data).hexdigest()
                    if error:
                        bad[key] = error
        # A success whose bytes are gone (a run stopped between rewriting the tar and its metadata).
        bad.update({key: "image missing from its shard" for key in successes - seen})
        stats[STORED_SHA256] = {key: sha for key, sha in sorted(stored.items()) if key not in bad}
        _take_out(shards_dir, name, stats, bad, DECODE_FAILED)
        stats[VERIFIED] = True
        _write_atomic(stats_path, lambda tmp, s=stats: Path(tmp).write_text(json.dumps(s, indent=4)))
        removed.update({image_keys[k]: e for k, e in bad.items()})
    return removed


def take_out_changed(images_dir: str, attempts: Mapping[str, Attempt], keys: Iterable[str]) -> set[str]:
    """Of the images `keys` (image_keys whose attempt in `attempts` is a success), those whose stored bytes are not
    the ones verify_shards recorded (STORED_SHA256): taken out of their shards, their attempts marked
    changed_since_fetched, so that they are fetched again and never given to a row. Returns their image_keys."""
    shards_dir = os.path.join(images_dir, SHARDS)
    by_shard: dict[str, dict[str, str]] = {}  # shard name -> key in the shard -> image_key
    for image_key in keys:
        attempt = attempts[image_key]
        if attempt.ok:
            name = Path(attempt.shard).name.split(".", 1)[0]
            by_shard.setdefault(name, {})[attempt.key] = image_key
    changed: set[str] = set()
    for name, members in sorted(by_shard.items()):
        stats_path = os.path.join(shards_dir, f"{name}_stats.json")
        stats = own_json(stats_path, STATS_HINT)
        recorded = stats.get(STORED_SHA256) or {}
        bad: dict[str, str] = {}
        seen = set()
        for key, data in _shard_images(shards_dir, name):
            if key in members:
                seen.add(key)
                if hashlib.sha256(data).hexdigest() != recorded.get(key):
                    bad[key] = "the stored image's bytes are not the ones recorded when it was fetched"
        bad.update({key: "image missing from its shard" for key in members.keys() - seen})
        if bad:
            _take_out(shards_dir, name, stats, bad, CHANGED)
            _write_atomic(stats_path, lambda tmp, s=stats: Path(tmp).write_text(json.dumps(s, indent=4)))
            changed |= {members[key] for key in bad}
    return changed


# ---------------------------------------------------------------------------------------------- settings

def settings_problem(images_dir: str, image_format: str, image_size: int) -> str | None:
    """Why these settings cannot add to the shards already in images_dir (None if they can)."""
    path = os.path.join(images_dir, SETTINGS_FILE)
    if not os.path.exists(path):
        return None
    try:
        earlier = own_json(path)  # a crash or a full disk may leave it empty
    except (OSError, PlantedEntry) as e:
        return f"{e}, or use another --images_dir" if isinstance(e, PlantedEntry) else \
            f"{path} cannot be read ({e.strerror or e}); move it away, or use another --images_dir"
    for flag, value in (("image_format", image_format), ("image_size", image_size)):
        if earlier.get(flag) != value:
            return (f"--{flag}={value}, but the shards in {images_dir} were made with --{flag}={earlier.get(flag)}; "
                    f"use that or another --images_dir")
    return None


# ---------------------------------------------------------------------------------------------- fetch

@dataclass(frozen=True)
class FetchConfig:
    images_dir: str
    image_format: str = "webdataset"
    image_size: int = 0
    images_per_shard: int = 10_000
    processes: int = 1
    threads: int = 16
    timeout: float = 10.0
    retries: int = 0
    retry_failed: bool = False
    deadline: float = 60.0      # seconds for one image's whole download
    max_bytes: int = 50_000_000  # largest body read
    max_pixel_values: int = MAX_PIXEL_VALUES  # largest image decoded, pixels x channels
    file_root: str | None = None  # the local --image_root: the only place file:// URLs may point into


# img2dataset records the error text; failure_reason turns these into reasons.
DEADLINE_ERROR = "download deadline exceeded"
TOO_LARGE_ERROR = "body larger than --image_max_bytes"
REFUSED_URL_ERROR = "refused url"


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """urllib follows redirects to ftp:// too; an image may only move to another http(s) URL."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not is_url(newurl):
            raise urllib.error.HTTPError(newurl, code, f"{REFUSED_URL_ERROR}: redirect to {shown(newurl)}", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _set_read_timeout(response, seconds: float) -> None:
    """The socket timeout of an HTTP response, so that no single read outlasts the deadline."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.01))


def fetch_bounded(row, timeout, user_agent_token, disallowed_header_directives, config: FetchConfig):
    """img2dataset's download_image with an overall deadline and a size cap (it has neither: a server that
    trickles a byte every few seconds held it for minutes, a 400 MB body was read whole), http(s) only, or
    file:// inside the local image root, and only images whose header shows they decode within the bound (its
    OpenCV decode has none). Returns (key, BytesIO or None, error or None), as img2dataset expects."""
    key, url = row
    started = time.monotonic()
    if url.startswith("file://"):
        path = Path(urllib.request.url2pathname(url[len("file://"):])).resolve()
        if config.file_root is None or not path.is_relative_to(Path(config.file_root).resolve()):
            return key, None, f"{REFUSED_URL_ERROR}: {shown(url)} is outside --image_root"
        try:  # a FIFO would block the open past any deadline, a device never end, a kernel file hold secrets
            regular = stat.S_ISREG(os.stat(path).st_mode) and not kernel_file(path)
        except OSError:
            regular = True  # missing: the open says so, as for any image not there
        if not regular:
            return key, None, f"{REFUSED_URL_ERROR}: {shown(url)} is not a regular file"
    elif not is_url(url):
        return key, None, f"{REFUSED_URL_ERROR}: {shown(url)} is not http(s)"
    agent = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:72.0) Gecko/20100101 Firefox/72.0"
    if user_agent_token:
        agent += f" (compatible; {user_agent_token}; +https://github.com/rom1504/img2dataset)"
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    try:
        request = urllib.request.Request(url, headers={"User-Agent": agent})
        with opener.open(request, timeout=min(timeout, config.deadline)) as response:
            if disallowed_header_directives:
                from img2dataset.downloader import is_disallowed

                if is_disallowed(response.headers, user_agent_token, disallowed_header_directives):
                    return key, None, "Use of image disallowed by X-Robots-Tag directive"
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > config.max_bytes:
                return key, None, f"{TOO_LARGE_ERROR} ({int(length):,} > {config.max_bytes:,})"
            body, size = [], 0
            while True:
                left = config.deadline - (time.monotonic() - started)
                if left <= 0:
                    return key, None, f"{DEADLINE_ERROR} ({config.deadline:g}s, {size:,} bytes read)"
                _set_read_timeout(response, min(timeout, left))
                chunk = response.read1(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > config.max_bytes:
                    return key, None, f"{TOO_LARGE_ERROR} (more than {config.max_bytes:,})"
                body.append(chunk)
        data = b"".join(body)
        problem = header_problem(data, config.max_pixel_values, config.image_size)
        return (key, None, problem) if problem else (key, io.BytesIO(data), None)
    except Exception as err:  # noqa: BLE001 - like img2dataset: any failure is the image's error text
        if time.monotonic() - started >= config.deadline:
            return key, None, f"{DEADLINE_ERROR} ({config.deadline:g}s)"
        return key, None, str(err)


class _BoundedDownloader:
    """img2dataset's Downloader, fetching each image with fetch_bounded. img2dataset pickles its downloader into
    spawned processes; this one installs fetch_bounded in whichever process runs it."""

    def __init__(self, config: FetchConfig, *args, **kwargs):
        from img2dataset.downloader import Downloader

        self.config = config
        self.inner = Downloader(*args, **kwargs)

    def __call__(self, row):
        import img2dataset.downloader

        img2dataset.downloader.download_image = functools.partial(fetch_bounded, config=self.config)
        return self.inner(row)


def _download(input_path: str, shards_dir: str, config: FetchConfig) -> None:
    # albumentations (imported by img2dataset) asks the network for a newer version unless told not to.
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    try:
        from img2dataset import download
    except ImportError as e:
        raise ImportError(f"--stage=images needs img2dataset: {INSTALL_HINT} ({e})") from e
    import img2dataset.downloader

    runner = sys.modules["img2dataset.main"]  # the package's `main` attribute is the CLI function, not the module
    previous = signal.getsignal(signal.SIGINT)
    runner.Downloader = functools.partial(_BoundedDownloader, config)
    try:
        download(
            url_list=input_path, input_format="parquet", url_col="url", save_additional_columns=["image_key"],
            output_folder=shards_dir, output_format=config.image_format, incremental_mode="extend",
            # Size 0 keeps the original pixels (and bytes), so ARO boxes apply as they are.
            resize_mode="keep_ratio" if config.image_size else "no", image_size=config.image_size or 256,
            skip_reencode=True, encode_format=IMAGE_EXT, extract_exif=False, compute_hash="sha256",
            number_sample_per_shard=config.images_per_shard, processes_count=config.processes,
            thread_count=config.threads, timeout=config.timeout, retries=config.retries,
            distributor="multiprocessing", enable_wandb=False, user_agent_token="hardpos")
    except SystemExit:  # img2dataset's Ctrl-C handler exits with status 0; an interrupted run must not look done
        raise KeyboardInterrupt("image download interrupted; run the stage again to go on") from None
    finally:
        signal.signal(signal.SIGINT, previous)  # img2dataset leaves its handler installed
        runner.Downloader = img2dataset.downloader.Downloader


def refuse_ambiguous_ids(tables: list[ImageTable]) -> list[ImageTable]:
    """The tables with every reference to an image key that rows give different urls (a COCO image id used for
    two pictures, across tables) refused as duplicate_image_id: never one url chosen for all of them."""
    urls: dict[str, set[str]] = {}
    for table in tables:
        for ref in table.refs:
            if ref.key is not None:
                urls.setdefault(ref.key, set()).add(ref.url)
    ambiguous = {key for key, found in urls.items() if len(found) > 1}
    return [ImageTable(t.name, t.rows_read, [replace(r, key=None, missing=AMBIGUOUS_IMAGE_ID) if r.key in ambiguous
                                             else r for r in t.refs]) for t in tables]


def wanted_images(tables: list[ImageTable]) -> dict[str, str]:
    """image_key -> url, each image once for all tables (whose rows agree on it: refuse_ambiguous_ids)."""
    return {ref.key: ref.url for table in tables for ref in table.refs if ref.key is not None}


class PlantedEntry(ValueError):
    """A link or special file in shards/ (refuse_planted), or a file of the stage's own that it did not write
    (own_json)."""


STATS_HINT = " (a shard whose _stats.json is moved away is fetched again)"
OWN_JSON_LIMIT = 64 << 20  # a shard's _stats.json, settings.json, report.json: kilobytes to a few MB


def own_json(path: str, hint: str = "") -> dict:
    """A JSON object file the images stage (or img2dataset) wrote: read through tables/folders.read_bounded (a regular
    file, not a link, of at most OWN_JSON_LIMIT bytes, never read past its size) and holding a JSON object.
    PlantedEntry (one line) otherwise: a 1 GiB sparse file is never read whole, an empty, a '[]' or a deeply nested
    one is no traceback. OSError as open raises it."""
    from pipeline.tables.folders import read_bounded

    try:
        value = json.loads(read_bounded(path, OWN_JSON_LIMIT, "more than the stage ever writes", os.O_NOFOLLOW))
        why = None if isinstance(value, dict) else f"a JSON {type(value).__name__}, not an object"
    except RecursionError:
        why = "not JSON"
    except ValueError as e:  # read_bounded's, or json's
        why = (str(e).splitlines() or ["not JSON"])[0][:80]
    if why is not None:
        raise PlantedEntry(f"{path}: {why}; the images stage did not write it this way: move it away{hint}")
    return value


def refuse_planted(shards_dir: str) -> None:
    """PlantedEntry (one line) when shards/ holds a symbolic link or anything but files and folders: img2dataset and
    hardpos make none, and reading or indexing through one would take a file from anywhere. The entry is removed
    (never followed), so the next run fetches its images again."""
    for folder, dirs, names in os.walk(shards_dir):
        for name in sorted(dirs + names):
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                os.unlink(path)
                raise PlantedEntry(f"{path}: a symbolic link or special file in the images folder, which hardpos and "
                                 f"img2dataset never make (planted while the stage ran?); it was removed, run the "
                                 f"stage again")


def fetch_images(tables: list[ImageTable], config: FetchConfig) -> dict:
    """Fetches what is missing, checks it, writes index/<table>.parquet; returns the report (no stage keys)."""
    tables = refuse_ambiguous_ids(tables)
    images_dir = config.images_dir
    shards_dir = os.path.join(images_dir, SHARDS)
    problem = settings_problem(images_dir, config.image_format, config.image_size)
    if problem:
        raise ValueError(problem)
    os.makedirs(shards_dir, exist_ok=True)
    settings = {"image_format": config.image_format, "image_size": config.image_size}
    _write_atomic(os.path.join(images_dir, SETTINGS_FILE), lambda tmp: Path(tmp).write_text(json.dumps(settings)))

    refuse_planted(shards_dir)
    dropped = drop_incomplete_shards(shards_dir)
    # Shards a stopped run left unchecked.
    decode_failures = verify_shards(images_dir, config.threads, config.max_pixel_values)
    wanted = wanted_images(tables)
    # A kept image is given to these rows only when it was fetched from the url they name and its bytes are the
    # ones stored then; otherwise it is fetched again.
    before = read_attempts(images_dir, wanted)
    changed = take_out_changed(images_dir, before, sorted(wanted.keys() & before.keys()))
    if changed:
        before = read_attempts(images_dir, wanted)
    todo = sorted(k for k in wanted if k not in before or k in changed or
                  (config.retry_failed and not before[k].ok))
    if todo:
        input_path = os.path.join(shards_dir, FETCH_LIST)
        pq.write_table(pa.table({"url": [wanted[k] for k in todo], "image_key": todo}), input_path)
        _download(input_path, shards_dir, config)
        refuse_planted(shards_dir)  # img2dataset writes by path: a link planted meanwhile is found before any read
        os.remove(input_path)
        dropped += drop_incomplete_shards(shards_dir)
        decode_failures.update(verify_shards(images_dir, config.threads, config.max_pixel_values))
    after = read_attempts(images_dir, wanted) if todo else before

    tried = set(todo)
    status = {key: _image_status(after.get(key)) for key in wanted}
    failures = [{"image_key": key, "url": _shown(after[key].url if key in after else wanted[key]), "reason": reason,
                 "error": error, "tried": "this run" if key in tried else "earlier run"}
                for key, (state, reason, error) in sorted(status.items()) if state == "failed"]
    index_paths = {}
    sections = {}
    for table in tables:
        rows = index_rows(table, after, status)
        index_paths[table.name] = write_index(images_dir, table.name, rows)
        sections[table.name] = _table_section(table, rows, status, tried, index_paths[table.name])
    ok = [k for k, (state, _, _) in status.items() if state == "ok"]
    return {
        "images_dir": images_dir,
        "image_format": config.image_format,
        "image_size": config.image_size,
        "tables": sections,
        "images": {
            "wanted": len(wanted),
            "in_shards": len(ok),
            "fetched": sum(k in tried for k in ok),
            "already_present": sum(k not in tried for k in ok),
            "failed": len(failures),
            "failed_this_run": sum(f["tried"] == "this run" for f in failures),
            "failed_earlier": sum(f["tried"] == "earlier run" for f in failures),
            "requested": len(todo),
            "failure_reasons": dict(Counter(f["reason"] for f in failures).most_common()),
        },
        "shards": {
            "complete": [os.path.relpath(shard_data_file(shards_dir, n), images_dir).replace(os.sep, "/")
                         for n in complete_shards(shards_dir)],
            "incomplete_removed": dropped,
            "decode_failures_removed": len(decode_failures),
        },
        "failures": failures[:FAILURES_LISTED],
        "failures_listed": min(len(failures), FAILURES_LISTED),
        "index": index_paths,
    }


def _image_status(attempt: Attempt | None) -> tuple[str, str | None, str | None]:
    if attempt is None:
        return "failed", "not_fetched", "no complete shard holds an attempt (stopped run or failed shard)"
    if attempt.ok:
        return "ok", None, None
    return "failed", failure_reason(attempt.status, attempt.error), attempt.error


def index_rows(table: ImageTable, attempts: dict[str, Attempt], status: dict) -> list[dict]:
    """One row per (example_id, image, box) of the table, sorted, with where its image is stored."""
    # A refused reference keeps its URL or path (what was refused); a missing one has none.
    counts = Counter((r.example_id, r.key, r.missing, r.bbox, None if r.key else r.url) for r in table.refs)
    urls = {r.key: r.url for r in table.refs if r.key}
    rows = []
    for (example_id, key, missing, bbox, refused_url), n in counts.items():
        attempt = attempts.get(key) if key else None
        if key:
            state, reason, error = status[key]
        else:  # never fetched: a refused reference is a failed image (rejected), a missing one no image (discarded)
            state, reason, error = ("failed" if missing in REFUSED else "no_image"), missing, None
        stored = attempt if state == "ok" else None
        rows.append({
            "table": table.name, "example_id": example_id, "image_key": key,
            "url": _shown(url := attempt.url if attempt else urls.get(key, refused_url)),
            "url_sha256": url_sha256(url), "status": state, "reason": reason,
            "error": error,
            "shard": stored and stored.shard, "key": stored and stored.key,
            **{f: getattr(stored, f) if stored else None
               for f in ("width", "height", "original_width", "original_height", "sha256")},
            **dict(zip(BBOX, bbox or (None,) * 4, strict=True)), "table_rows": n,
        })
    rows.sort(key=lambda r: (r["example_id"], r["image_key"] or "", tuple(r[c] or 0.0 for c in BBOX)))
    return rows


def write_index(images_dir: str, table: str, rows: list[dict]) -> str:
    os.makedirs(os.path.join(images_dir, INDEX), exist_ok=True)
    relative = f"{INDEX}/{table}.parquet"
    data = pa.Table.from_pylist(rows, schema=INDEX_SCHEMA)
    _write_atomic(os.path.join(images_dir, relative), lambda tmp: pq.write_table(data, tmp))
    return relative


def _table_section(table: ImageTable, rows: list[dict], status: dict, tried: set, index_path: str) -> dict:
    """The report section of a table: rows counted per table row, reasons per row, figures per image."""
    counts = Counter()
    discard, reject = Counter(), Counter()
    for row in rows:
        counts[row["status"]] += row["table_rows"]
        if row["status"] == "no_image":
            discard[row["reason"]] += row["table_rows"]
        elif row["status"] == "failed":
            reject[row["reason"]] += row["table_rows"]
    keys = {r.key for r in table.refs if r.key}
    ok = {k for k in keys if status[k][0] == "ok"}
    rows_total = counts["ok"] + counts["no_image"] + counts["failed"]
    return {
        "read": table.rows_read,
        "rows": counts["ok"],
        "discarded": counts["no_image"],
        "rejected": counts["failed"],
        # read comes from the files' footers; the index rows must account for each table row once.
        "balanced": table.rows_read == len(table.refs) == sum(r["table_rows"] for r in rows) == rows_total,
        "discard_reasons": dict(discard.most_common()),
        "reject_reasons": dict(reject.most_common()),
        "images": {"wanted": len(keys), "in_shards": len(ok), "fetched": len(ok & tried),
                   "already_present": len(ok - tried), "failed": len(keys - ok)},
        "index": index_path,
    }


# ---------------------------------------------------------------------------------------------- reading back

@dataclass
class RowImage:
    """A row's image; `bbox` is the table's box (original pixels), `box` the same in the stored image's pixels."""
    example_id: str
    table: str
    image: object  # PIL.Image.Image
    bbox: tuple[float, float, float, float] | None
    original_size: tuple[int, int]
    max_pixel_values: int = MAX_PIXEL_VALUES  # bounds the crop too

    @property
    def box(self) -> tuple[float, float, float, float] | None:
        if self.bbox is None:
            return None
        sx, sy = self.image.width / self.original_size[0], self.image.height / self.original_size[1]
        x, y, w, h = self.bbox
        return (x * sx, y * sy, (x + w) * sx, (y + h) * sy)

    def crop(self):
        """The box region for SWAP rows (ARO evaluates on the crop), else the whole image; BadBox or ImageTooLarge
        for a box that misses the image or would be too large (crop_box)."""
        return self.image if self.bbox is None else crop_box(self.image, self.box, self.max_pixel_values)


class ShardImages(Mapping):
    """example_id -> RowImage, for the rows whose image is in the shards; reads webdataset or parquet shards.
    An image past max_pixel_values is ImageTooLarge, never decoded."""

    def __init__(self, images_dir: str, tables: Iterable[str] | None = None, max_pixel_values: int = MAX_PIXEL_VALUES):
        self.images_dir, self.max_pixel_values = images_dir, max_pixel_values
        wanted = set(tables) if tables is not None else None
        self._rows: dict[str, dict] = {}
        for path in sorted(Path(images_dir, INDEX).glob("*.parquet")):
            if wanted is not None and path.stem not in wanted:
                continue
            for row in pq.read_table(path).to_pylist():
                if row["status"] != "ok":
                    continue
                seen = self._rows.setdefault(row["example_id"], row)
                if seen["image_key"] != row["image_key"]:
                    raise ValueError(f"example_id {row['example_id']} has two images: {seen['image_key']} "
                                     f"({seen['table']}) and {row['image_key']} ({row['table']})")
        self._positions: dict[str, dict[str, tuple[int, int]]] = {}  # shard -> key -> tar member or parquet row
        self._groups = RowGroups()

    def __getitem__(self, example_id: str) -> RowImage:
        row = self._rows[example_id]
        image = open_bounded(self.image_bytes(row["shard"], row["key"]), self.max_pixel_values)
        image.load()
        bbox = tuple(row[c] for c in BBOX) if row["bbox_x"] is not None else None
        return RowImage(example_id, row["table"], image, bbox, (row["original_width"], row["original_height"]),
                        self.max_pixel_values)

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)

    def index_row(self, example_id: str) -> dict:
        return self._rows[example_id]

    def image_bytes(self, shard: str, key: str) -> bytes:
        path = os.path.join(self.images_dir, shard)
        tar = shard.endswith(".tar")
        if path not in self._positions:
            found = tar_images(path) if tar else parquet_images(path)
            self._positions[path] = {k: (first, second) for k, first, second, _ in found}
        first, second = self._positions[path][key]
        return read_member(path, first, second) if tar else self._groups.image(path, IMAGE_EXT, first, second)

    def close(self) -> None:
        self._groups.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_images(images_dir: str, tables: Iterable[str] | None = None,
                max_pixel_values: int = MAX_PIXEL_VALUES) -> ShardImages:
    """The images of `--stage=images` output, by example_id (all tables, or those named)."""
    return ShardImages(images_dir, tables, max_pixel_values)
