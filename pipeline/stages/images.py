"""--stage=images: fetch the images the tables under --output_dir refer to, with img2dataset.

Not a Beam graph: img2dataset runs its own processes. This module picks the tables and reads their image
columns (through Beam's FileSystems, so --output_dir may be remote); pipeline/publish/images.py fetches,
checks and indexes. The report (<images_dir>/report.json) has one section per table, counting table rows:
rows = image in the shards, rejected = its image failed (reason: http_404, decode_error, too_many_pixel_values,
...), discarded = the row names no image; and the image-level figures and failures (url, reason, error) of the
run.
"""
from __future__ import annotations

import importlib.util
import os
import posixpath

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipeline.io.commit import FolderLock
from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.parquet import VERIFY_PAGES
from pipeline.io.report import REPORT_FILE, write_json
from pipeline.options import HardposOptions, UsageError
from pipeline.provenance import build_info
from pipeline.publish import images as core

STAGE = "images"
IMAGE_COLUMNS = ("image_url", "image_path")
_READ_COLUMNS = ("example_id", "image_url", "image_path", "image_id", *core.BBOX)
_NOT_TABLES = (REJECTED, DISCARDED)


def images_dir(opts: HardposOptions) -> str:
    return opts.images_dir or FileSystems.join(opts.output_dir, "images")


def _table_files(output_dir: str, table: str) -> list[str]:
    pattern = FileSystems.join(output_dir, table, "*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def _read_parquet(path: str, columns: list[str]) -> pa.Table:
    with FileSystems.open(path, compression_type="uncompressed") as f:  # seekable: only these columns are read
        return pq.read_table(f, columns=columns, **VERIFY_PAGES)  # a damaged page is an error, not other ids


def _schema(path: str) -> pa.Schema:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return pq.read_schema(f)


def _num_rows(path: str) -> int:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return pq.ParquetFile(f).metadata.num_rows


def _image_column(schema: pa.Schema) -> str | None:
    return next((c for c in IMAGE_COLUMNS if c in schema.names), None)


def tables(opts: HardposOptions) -> list[str]:
    """--image_tables, else every table folder under --output_dir whose Parquet files have an image column."""
    if opts.image_tables is not None:
        return list(dict.fromkeys(t.strip() for t in opts.image_tables.split(",") if t.strip()))
    pattern = FileSystems.join(opts.output_dir, "*", "*.parquet")
    folders = {}
    for m in FileSystems.match([pattern])[0].metadata_list:
        folders.setdefault(posixpath.basename(posixpath.dirname(m.path)), m.path)
    return [t for t, path in sorted(folders.items())
            if t not in _NOT_TABLES and _image_column(_schema(path)) is not None]


def check_inputs(opts: HardposOptions) -> None:
    if importlib.util.find_spec("img2dataset") is None:
        raise UsageError(f"--stage=images needs img2dataset: {core.INSTALL_HINT}")
    out = images_dir(opts)
    if "://" in out:
        raise UsageError(f"--images_dir must be a local folder (the shards are checked and indexed in place), "
                         f"got {out}")
    names = tables(opts)
    if not names:
        if opts.image_tables is not None:
            raise UsageError("--image_tables is empty")
        raise UsageError(f"--output_dir: no table with an image_url or image_path column under {opts.output_dir}")
    vg_tables = []
    for table in names:
        files = _table_files(opts.output_dir, table)
        if not files:
            raise UsageError(f"--image_tables: no Parquet files in {FileSystems.join(opts.output_dir, table)}")
        column = _image_column(_schema(files[0]))
        if column is None:
            raise UsageError(f"--image_tables: table {table} has no image_url or image_path column ({files[0]})")
        if column == "image_path":
            vg_tables.append(table)
    if vg_tables and not opts.image_root:
        raise UsageError(f"--image_root is required: {', '.join(vg_tables)} name Visual Genome images by image_path "
                         f"(give the folder or URL prefix they are relative to)")
    root = opts.image_root
    if root and not core.is_url(root):
        if "://" in root:
            raise UsageError(f"--image_root: unsupported URL scheme in {root} (use {', '.join(core.URL_SCHEMES)} "
                             f"or a local folder)")
        if not os.path.isdir(root):
            raise UsageError(f"--image_root: no such folder {root}")
    problem = core.settings_problem(out, opts.image_format, opts.image_size)
    if problem:
        raise UsageError(problem)


def read_table(opts: HardposOptions, table: str) -> core.ImageTable:
    refs, read = [], 0
    for path in _table_files(opts.output_dir, table):
        names = _schema(path).names
        data = _read_parquet(path, [c for c in _READ_COLUMNS if c in names])
        read += _num_rows(path)
        refs += [core.row_ref(row, opts.image_root) for row in data.to_pylist()]
    return core.ImageTable(table, read, refs)


def run_stage(options, opts: HardposOptions) -> dict:
    out = images_dir(opts)
    local_root = opts.image_root if opts.image_root and not core.is_url(opts.image_root) else None
    config = core.FetchConfig(
        images_dir=out, image_format=opts.image_format, image_size=opts.image_size,
        images_per_shard=opts.images_per_shard, processes=opts.image_processes, threads=opts.image_threads,
        timeout=opts.image_timeout, retries=opts.image_retries, retry_failed=opts.retry_failed_images,
        deadline=opts.image_deadline, max_bytes=opts.image_max_bytes, max_pixel_values=opts.image_max_pixel_values,
        file_root=local_root)
    with FolderLock(out, STAGE, "--images_dir"):  # two runs must not extend the same shards
        result = core.fetch_images([read_table(opts, t) for t in tables(opts)], config)
        report_path = os.path.join(out, REPORT_FILE)
        report = {"stage": STAGE, "output_dir": opts.output_dir, "hardpos": build_info(),
                  "inputs": {"image_root": opts.image_root, "retry_failed_images": opts.retry_failed_images},
                  **result, "report_path": report_path}
        write_json(report_path, report)
    _print_images(report)
    return report


def _print_images(report: dict) -> None:
    figures = report["images"]
    print(f"images: {figures['wanted']} wanted, {figures['in_shards']} in the shards ({figures['fetched']} fetched "
          f"now, {figures['already_present']} already there), {figures['failed']} failed "
          f"({figures['failed_this_run']} this run); index: {report['images_dir']}/{core.INDEX}/")
    for failure in report["failures"][:10]:
        print(f"  failed {failure['reason']}: {failure['url']}")
    if figures["failed"] > 10:
        print(f"  ... {figures['failed'] - 10} more failures in {report['report_path']}")
