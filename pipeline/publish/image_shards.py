"""Image bytes out of img2dataset's shards, by key, without Beam: the images stage's own shards (ShardImages in
images.py) and a researcher's corpus as img2dataset wrote it (`--images=FOLDER` of the trainer and evaluator).

- webdataset: NNNNN.tar holding <key>.jpg (or .png, .webp), <key>.txt, <key>.json per sample; the NNNNN.parquet
  beside it is metadata (no image bytes). One scan of a tar's headers gives each image member's data offset and
  size, so an image is read with one seek, never through tarfile again.
- parquet: NNNNN.parquet with the bytes in an image column (jpg, or png / webp after img2dataset's encode_format)
  next to key (and status). The index keeps (file, row group, row); a row group's image column is read when one
  of its images is asked for, and the last few are kept (img2dataset writes row groups of 100 rows).

Files are opened per read, so a DataLoader worker forked after the index was built shares no file position
with another process.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tarfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp")  # img2dataset's encode_format values: member suffix, column name
CACHED_ROW_GROUPS = 8


def sample_key(member_name: str) -> str:
    """A webdataset sample's key: its member's file name up to the first dot, as the corpus reader takes it."""
    return os.path.basename(member_name).partition(".")[0].strip()


def suffix_of(member_name: str) -> str:
    return os.path.basename(member_name).partition(".")[2].lower()


TEXT_SUFFIXES = ("txt", "json")


class TarSample:
    """One webdataset sample: consecutive members of a tar in the same folder with the same key. The corpus
    reader (pipeline/sources/corpus.py) and the trainer's index (KeyedShards) both read a tar through
    tar_samples and judge a sample by problem(): one key per sample, and the same samples on both sides, so that a
    row's key finds the image of the sample its caption came from. `data`: the bytes of the members read as they
    passed (by member name)."""

    def __init__(self, folder: str, key: str):
        self.folder, self.key, self.members, self.data = folder, key, [], {}

    def problem(self) -> tuple[str, str] | None:
        """(reason, detail) where the sample cannot give a record, else None: a member that is not a regular file
        (a link is never followed, so a sample of links is rejected, not lost), no image or several."""
        odd = next((m for m in self.members if not regular(m)), None)
        if odd is not None:
            kind = "a symbolic link" if odd.issym() else "a hard link" if odd.islnk() else \
                "a sparse file" if odd.issparse() else "not a regular file"
            return "not_a_regular_file", f"sample {self.key}: member {odd.name!r:.200} is {kind}"
        images = self.images()
        if not images:
            return "no_image", f"sample {self.key} has no image member"
        if len(images) > 1:
            return "several_images", f"sample {self.key} has {len(images)} image members"
        repeated = next((x for x in TEXT_SUFFIXES if sum(suffix_of(m.name) == x for m in self.members) > 1), None)
        if repeated is not None:  # which caption (or metadata) is the sample's cannot be told: never the last, silently
            return "repeated_field", f"sample {self.key} has {repeated} members twice"
        return None

    def images(self) -> list[tarfile.TarInfo]:
        return [m for m in self.members if suffix_of(m.name) in IMAGE_SUFFIXES]

    def member(self, suffix: str) -> tarfile.TarInfo | None:
        """The sample's member with that suffix (the last, where a tar repeats one)."""
        found = [m for m in self.members if suffix_of(m.name) == suffix]
        return found[-1] if found else None

    def has_text(self) -> bool:
        """A .txt or .json member: without one a sample never becomes a row."""
        return any(self.member(suffix) is not None for suffix in TEXT_SUFFIXES)


def regular(member: tarfile.TarInfo) -> bool:
    return member.isreg() and not member.issparse()


class _WatchedHeader(tarfile.TarInfo):
    """A TarInfo that notes on its tar why a header did not parse: tarfile's next() returns None, silently, for a
    damaged header (a bad checksum), a file that ends at or inside a header and an end-of-archive block alike, so
    only the reason tells a tar that ended from one cut short (tar_samples)."""

    @classmethod
    def fromtarfile(cls, tar):
        try:
            return super().fromtarfile(tar)
        except tarfile.HeaderError as e:
            tar.hardpos_stop = e
            raise


ZERO_CHUNK = 1 << 16


def _check_end(tar: tarfile.TarFile, stop: Exception | None) -> None:
    """tarfile.ReadError unless the tar ended as a tar does: an end-of-archive marker (two zero blocks) where its
    next header would be, and nothing but zeros after it (a record's padding). tarfile stops without a word at a
    damaged header, at a file cut short between members, and at the first end-of-archive marker of two tars
    written one after the other: the members after any of these were lost, and the read looked complete."""
    at = f"byte {tar.offset:,}"
    if isinstance(stop, tarfile.EmptyHeaderError):
        raise tarfile.ReadError(f"the file ends at {at}, between members, without an end-of-archive marker: cut short")
    if isinstance(stop, tarfile.TruncatedHeaderError):
        raise tarfile.ReadError(f"the file ends inside the header at {at}: cut short")
    if stop is not None and not isinstance(stop, tarfile.EOFHeaderError):
        raise tarfile.ReadError(f"a damaged header at {at} ({stop}): what follows it is not read")
    zeros = 0  # after the first zero block (read by tarfile)
    while True:
        chunk = tar.fileobj.read(ZERO_CHUNK)
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            first = zeros + len(chunk) - len(chunk.lstrip(b"\0"))
            raise tarfile.ReadError(f"data after the end-of-archive marker at {at} (from byte "
                                    f"{tar.offset + tarfile.BLOCKSIZE + first:,}; two tars written one after "
                                    f"the other?): not read")
        zeros += len(chunk)
    if zeros < tarfile.BLOCKSIZE:
        raise tarfile.ReadError(f"the file ends in the end-of-archive marker at {at} (one zero block of two): cut "
                                f"short")


def tar_samples(tar: tarfile.TarFile, keep=lambda member: False):
    """The samples of a tar in order (a folder entry belongs to none), with the bytes of each member `keep`
    accepts read as it passes (a tar read as a stream cannot go back for them; keep must bound their size). The
    members read so far are forgotten as the tar goes on: a tar of millions of members is never held.
    tarfile.ReadError where the tar does not end as a tar does (cut short, a damaged header, data after its
    end-of-archive marker): the samples before it are given, and the sample under way, whose members may go on
    past the damage, is not."""
    sample = None
    tar.tarinfo, tar.hardpos_stop = _WatchedHeader, None
    while True:
        member = tar.next()
        if member is None:
            # an empty tar's first header was read when it was opened: its zero block, or it would not open
            stop = tar.hardpos_stop if tar.offset else None
            ended = stop is None or isinstance(stop, tarfile.EOFHeaderError)
            if sample is not None and ended:
                yield sample  # an end-of-archive block: the last sample is whole (cut short, it may not be)
            try:
                _check_end(tar, stop)
            except tarfile.ReadError as e:
                if sample is None or ended:
                    raise
                raise tarfile.ReadError(f"{e}; the sample under way, {sample.key!r:.80}, is not given") from None
            return
        tar.members = []  # tarfile keeps every member it has read; only the current sample is needed
        if member.isdir():
            continue
        name = posixpath.normpath(member.name)
        folder, key = posixpath.dirname(name), sample_key(name)
        if sample is not None and (sample.folder, sample.key) != (folder, key):
            yield sample
            sample = None
        if sample is None:
            sample = TarSample(folder, key)
        sample.members.append(member)
        if regular(member) and keep(member):
            sample.data[member.name] = tar.extractfile(member).read()


# A .json member read for the image's URL, which the trainer checks against the row's (img2dataset writes a few
# hundred bytes)
META_BYTES = 1 << 20


def _meta_url(sample: TarSample) -> str | None:
    member = sample.member("json")
    data = sample.data.get(member.name) if member is not None else None
    try:
        meta = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None
    url = meta.get("url") if isinstance(meta, dict) else None
    return url.strip() if isinstance(url, str) and url.strip() else None


def tar_images(path: str) -> list[tuple[str, int, int, str | None]]:
    """(key, data offset, size, url) of the image of each sample of an uncompressed tar that can give a record
    (TarSample.problem is None and it has a .txt or .json: an image alone never becomes a row, so it never takes
    a key from one), from its headers and .json members; url is the .json's, if any. A member that the file ends
    before (a shard cut short) is left out; ValueError for a file that is not an uncompressed tar."""
    found = []
    length = os.path.getsize(path)
    wanted = lambda member: suffix_of(member.name) == "json" and member.size <= META_BYTES  # noqa: E731
    try:
        tar = tarfile.open(path, mode="r:")
    except (tarfile.TarError, OSError) as e:
        raise ValueError(f"{path}: not an uncompressed tar ({e})") from None
    with tar:
        try:
            for sample in tar_samples(tar, wanted):
                if sample.problem() is not None or not sample.has_text():
                    continue
                [image] = sample.images()
                if image.offset_data + image.size <= length:
                    found.append((sample.key, image.offset_data, image.size, _meta_url(sample)))
        except (tarfile.TarError, OSError, EOFError):  # cut short inside a member: the samples before it stand
            pass
    return found


def read_member(path: str, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:  # the tar changed since it was indexed
        raise OSError(f"{path}: {size:,} bytes at {offset:,} asked, {len(data):,} read")
    return data


def image_column(schema: pa.Schema) -> str | None:
    """The column holding image bytes in an img2dataset parquet shard, or None (its webdataset metadata)."""
    binary = {name for name in schema.names
              if pa.types.is_binary(schema.field(name).type) or pa.types.is_large_binary(schema.field(name).type)}
    return next((name for name in IMAGE_SUFFIXES if name in binary), None)


def parquet_images(path: str) -> list[tuple[str, int, int, str | None]]:
    """(key, row group, row in it, url) of each row of a parquet shard that holds an image (status success where
    the shard has img2dataset's status column: not null, as the corpus reader judges it; url its url column's, if
    any); ValueError when it has no key column."""
    parquet = pq.ParquetFile(path)
    names = parquet.schema_arrow.names
    if "key" not in names:
        raise ValueError(f"{path}: no column 'key' (columns: {', '.join(names)})")
    columns = [c for c in ("key", "status", "url") if c in names]
    found = []
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=columns)
        column = lambda name: table[name].to_pylist() if name in names else [None] * table.num_rows  # noqa: E731
        statuses = column("status") if "status" in names else ["success"] * table.num_rows
        for row, (key, status, url) in enumerate(zip(column("key"), statuses, column("url"), strict=True)):
            if key is not None and status == "success":  # a null status: an image img2dataset never fetched
                url = url.strip() if isinstance(url, str) and url.strip() else None
                found.append((str(key).strip(), group, row, url))
    return found


class RowGroups:
    """The image column of the last CACHED_ROW_GROUPS row groups read: an image costs its row group's read, and
    rows that follow one another in a shard share it."""

    def __init__(self, size: int = CACHED_ROW_GROUPS):
        self.size = size
        self._groups: OrderedDict[tuple[str, str, int], pa.ChunkedArray] = OrderedDict()

    def image(self, path: str, column: str, group: int, row: int) -> bytes | None:
        """The bytes at (row group, row), None where the row holds none."""
        at = (path, column, group)
        if at in self._groups:
            self._groups.move_to_end(at)
        else:
            self._groups[at] = pq.ParquetFile(path).read_row_group(group, columns=[column])[column]
            if len(self._groups) > self.size:
                self._groups.popitem(last=False)
        return self._groups[at][row].as_py()

    def clear(self) -> None:
        self._groups.clear()


def key_hash(key: str) -> int:
    """A 63-bit hash of a key, the same in every process (the index stores these, not the keys)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class ImageNotTheRows(LookupError):
    """The shards' image under a row's key is not that row's: its sample's URL is another, or two samples share
    the key. Never given to the row."""


AMBIGUOUS = -1  # an index entry whose key two samples hold


class KeyedShards:
    """key -> image bytes over a folder of img2dataset shards (format "webdataset" or "parquet"). The index is
    arrays (key hash, file, two positions: offset and size, or row group and row, url hash), sorted by hash: a few
    bytes a key, and no Python object per key that a forked DataLoader worker's reference counting would copy.

    A sample is indexed by the key the corpus reader gives it (tar_samples, TarSample.problem), and where the two
    meet, get() checks that the image is the row's: a key that two samples hold is refused (the reader keeps the
    first record of a key that it accepts, which the index cannot tell: a stray image with no caption or a
    rejected caption must not lend its image to a later sample's row), and so is an image whose sample's URL (the
    .json's or the url column's) is not the row's. Two keys of a corpus share a 63-bit hash with odds of about
    n^2 / 2^64 (5e-6 for 10 million keys). `columns`: each parquet shard's image column (None for tars)."""

    def __init__(self, files: list[str], columns: dict[str, str] | None = None):
        self.files, self._columns = files, columns
        self.format = "webdataset" if columns is None else "parquet"
        parts = [np.empty((0, 5), dtype=np.int64)]
        for number, path in enumerate(files):
            found = tar_images(path) if columns is None else parquet_images(path)
            parts.append(np.array([(key_hash(key), number, first, second, url_hash(url))
                                   for key, first, second, url in found], dtype=np.int64).reshape(-1, 5))
        table = np.concatenate(parts)
        table = table[np.argsort(table[:, 0], kind="stable")]
        hashes, first, counts = np.unique(table[:, 0], return_index=True, return_counts=True)
        self._hashes, self._where = hashes, table[first, 1:]
        self._where[counts > 1, 0] = AMBIGUOUS
        self.ambiguous = int((counts > 1).sum())
        self._groups = RowGroups()

    def __len__(self):
        return len(self._hashes)

    def get(self, key: str, url: str | None = None) -> bytes | None:
        """The image of the key, None when no shard holds one; ImageNotTheRows when the key is two samples' or
        the sample's URL is not `url` (the row's, when it has one)."""
        wanted = key_hash(key.strip())
        i = int(np.searchsorted(self._hashes, wanted))
        if i == len(self._hashes) or self._hashes[i] != wanted:
            return None
        number, first, second, sample_url = (int(v) for v in self._where[i])
        if number == AMBIGUOUS:
            raise ImageNotTheRows(f"key {key!r:.80} is held by more than one sample of the {self.format} shards")
        if url and url.strip() and sample_url and url_hash(url) != sample_url:
            raise ImageNotTheRows(f"the sample with key {key!r:.80} has another URL than the row's {url!r:.200}")
        path = self.files[number]
        if self._columns is None:
            return read_member(path, first, second)
        return self._groups.image(path, self._columns[path], first, second)


def url_hash(url: str | None) -> int:
    """key_hash of a URL, 0 for none (no URL to check against)."""
    return key_hash(url.strip()) or 1 if url and url.strip() else 0


def open_shard_folder(folder: str) -> KeyedShards | None:
    """The img2dataset shards directly in folder, by key: its .tar files (webdataset), else its .parquet files
    that hold an image column; None when it holds neither (a folder of image files). ValueError (one line) for
    a tar that cannot be read as one or shards that hold no image."""
    root = Path(folder)
    tars = sorted(str(p) for p in root.glob("*.tar") if p.is_file())
    if tars:
        found = KeyedShards(tars)
    else:
        columns = {}
        for path in sorted(root.glob("*.parquet")):
            try:
                column = image_column(pq.read_schema(path))
            except (OSError, pa.ArrowException) as e:
                raise ValueError(f"{path}: not a Parquet file ({e})") from None
            if column is not None:
                columns[str(path)] = column
        if not columns:
            return None
        found = KeyedShards(list(columns), columns)
    if not len(found):
        raise ValueError(f"{folder}: its {len(found.files)} {found.format} shards hold no image")
    return found
