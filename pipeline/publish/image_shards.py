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
import os
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


def tar_images(path: str) -> list[tuple[str, int, int]]:
    """(key, data offset, size) of each image member of an uncompressed tar, from its headers alone. A member that
    the file ends before (a shard cut short) is left out; ValueError for a file that is not an uncompressed tar."""
    found = []
    length = os.path.getsize(path)
    try:
        with tarfile.open(path, mode="r:") as tar:
            for member in tar:
                suffix = member.name.rpartition(".")[2].lower()
                if member.isreg() and not member.issparse() and suffix in IMAGE_SUFFIXES \
                        and member.offset_data + member.size <= length:
                    found.append((sample_key(member.name), member.offset_data, member.size))
    except tarfile.TarError as e:
        raise ValueError(f"{path}: not an uncompressed tar ({e})") from None
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


def parquet_images(path: str) -> list[tuple[str, int, int]]:
    """(key, row group, row in it) of each row of a parquet shard that holds an image (status success where the
    shard has img2dataset's status column); ValueError when it has no key column."""
    parquet = pq.ParquetFile(path)
    names = parquet.schema_arrow.names
    if "key" not in names:
        raise ValueError(f"{path}: no column 'key' (columns: {', '.join(names)})")
    columns = ["key", "status"] if "status" in names else ["key"]
    found = []
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=columns)
        statuses = table["status"].to_pylist() if "status" in names else [None] * table.num_rows
        for row, (key, status) in enumerate(zip(table["key"].to_pylist(), statuses, strict=True)):
            if key is not None and status in (None, "success"):
                found.append((str(key).strip(), group, row))
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


class KeyedShards:
    """key -> image bytes over a folder of img2dataset shards (format "webdataset" or "parquet"). The index is
    arrays (key hash, file, two positions: offset and size, or row group and row), sorted by hash: a few bytes a
    key, and no Python object per key that a forked DataLoader worker's reference counting would copy. A key in
    two shards is the first one's (by file name, then position), as the corpus reader keeps the first record of
    a key. Two keys of a corpus share a 63-bit hash with odds of about n^2 / 2^64 (5e-6 for 10 million keys).
    `columns`: each parquet shard's image column (None for tars)."""

    def __init__(self, files: list[str], columns: dict[str, str] | None = None):
        self.files, self._columns = files, columns
        self.format = "webdataset" if columns is None else "parquet"
        parts = [np.empty((0, 4), dtype=np.int64)]
        for number, path in enumerate(files):
            found = tar_images(path) if columns is None else parquet_images(path)
            parts.append(np.array([(key_hash(key), number, first, second) for key, first, second in found],
                                  dtype=np.int64).reshape(-1, 4))
        table = np.concatenate(parts)
        table = table[np.argsort(table[:, 0], kind="stable")]  # stable: a key's first file and position stay first
        first = np.unique(table[:, 0], return_index=True)[1]
        self._hashes, self._where = table[first, 0], table[first, 1:]
        self._groups = RowGroups()

    def __len__(self):
        return len(self._hashes)

    def get(self, key: str) -> bytes | None:
        """The image of the key, None when no shard holds one."""
        wanted = key_hash(key.strip())
        i = int(np.searchsorted(self._hashes, wanted))
        if i == len(self._hashes) or self._hashes[i] != wanted:
            return None
        number, first, second = (int(v) for v in self._where[i])
        path = self.files[number]
        if self._columns is None:
            return read_member(path, first, second)
        return self._groups.image(path, self._columns[path], first, second)


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
