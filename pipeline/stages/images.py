"""--stage=images: fetch the images the tables under --output_dir refer to, with img2dataset.

Not a Beam graph: img2dataset runs its own processes. This module picks the tables that --output_dir's report.json
records and reads their image columns (through Beam's FileSystems, so --output_dir may be remote), each shard only
once it has the sha256 the report recorded; pipeline/publish/images.py fetches, checks and indexes. The report (<images_dir>/report.json) has one section per table, counting table rows:
rows = image in the shards, rejected = its image failed (reason: http_404, decode_error, too_many_pixel_values,
...), discarded = the row names no image; and the image-level figures and failures (url, reason, error) of the
run.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipeline.folder_lock import tool_folder
from pipeline.io.commit import FolderLock, folder_path_problem
from pipeline.io.parquet import VERIFY_PAGES
from pipeline.io.recorded import RecordedTable, read_recorded, recorded_sections, recorded_table
from pipeline.io.report import REPORT_FILE, write_json
from pipeline.options import HardposOptions, UsageError
from pipeline.provenance import build_info
from pipeline.publish import images as core
from pipeline.tables.folders import PublishError, link_target, published_folder_holding
from pipeline.urls import has_scheme, hidden_why, redacted

STAGE = "images"
IMAGE_COLUMNS = ("image_url", "image_path")
_READ_COLUMNS = ("example_id", "image_url", "image_path", "image_id", *core.BBOX)


def images_dir(opts: HardposOptions) -> str:
    return opts.images_dir or FileSystems.join(opts.output_dir, "images")


def _recorded(opts: HardposOptions, table: str) -> RecordedTable:
    try:
        recorded = recorded_table(opts.output_dir, table)
    except PublishError as e:
        raise UsageError(str(e)) from None
    if recorded is None:
        raise UsageError(f"--image_tables: no table {table} recorded in "
                         f"{FileSystems.join(opts.output_dir, REPORT_FILE)} (the stage reads a table's shards only "
                         f"as the report that wrote them records them)")
    return recorded


def _shards(opts: HardposOptions, table: str) -> Iterator[pq.ParquetFile]:
    """Each shard of the table, once its bytes have the sha256 its report recorded (a damaged page is an error too,
    not other ids); UsageError (one line) naming the first that has not."""
    recorded = _recorded(opts, table)
    for path, sha256 in recorded.shards.items():
        try:
            data = read_recorded(path, sha256, recorded.report_path)
        except PublishError as e:
            raise UsageError(str(e)) from None
        yield pq.ParquetFile(pa.BufferReader(data), **VERIFY_PAGES)


def _image_column(schema: pa.Schema) -> str | None:
    return next((c for c in IMAGE_COLUMNS if c in schema.names), None)


def tables(opts: HardposOptions) -> list[str]:
    """--image_tables, else every table that --output_dir's report.json records whose shards have an image column."""
    if opts.image_tables is not None:
        return list(dict.fromkeys(t.strip() for t in opts.image_tables.split(",") if t.strip()))
    try:
        recorded = recorded_sections(opts.output_dir)
    except PublishError as e:
        raise UsageError(str(e)) from None
    return [t for t in sorted(recorded) if _image_column(next(_shards(opts, t)).schema_arrow) is not None]


def check_images_path(opts: HardposOptions) -> None:
    """The images folder is no symbolic link, nor reached through one below the output folder: the stage writes
    shards, an index and a report there (UsageError, one line, before anything is written)."""
    out = images_dir(opts)
    if os.path.islink(out):
        raise UsageError(f"--images_dir {out} is a symbolic link (to {link_target(out)}), which the images stage "
                         f"never writes through; remove the link or choose another --images_dir")
    problem = folder_path_problem("--images_dir", out, opts.output_dir)
    if problem:
        raise UsageError(problem)
    whose = tool_folder(out)
    if whose:  # its report.md and lock are the tool's
        raise UsageError(f"--images_dir {out} is {whose} output folder (its lock file says so); the images stage "
                         f"needs a folder of its own")
    planted = next((name for name in (core.SHARDS, core.INDEX, REPORT_FILE, core.SETTINGS_FILE)
                    if os.path.islink(os.path.join(out, name))), None)
    if planted:
        raise UsageError(f"--images_dir {out}: {planted} is a symbolic link, which the images stage never writes "
                         f"through; remove it")
    for name, wanted, kind in ((core.SHARDS, os.path.isdir, "a folder"), (core.INDEX, os.path.isdir, "a folder"),
                               (REPORT_FILE, os.path.isfile, "a file"), (core.SETTINGS_FILE, os.path.isfile, "a file")):
        path = os.path.join(out, name)
        if os.path.lexists(path) and not wanted(path):  # a FIFO at report.json hung the stage; a file at shards/
            raise UsageError(f"--images_dir {out}: {name} is not {kind}, where the images stage keeps {kind} {name}; "
                             f"move it away")
    shards = os.path.join(out, core.SHARDS)
    for name in sorted(os.listdir(shards) if os.path.isdir(shards) and not os.path.islink(shards) else ()):
        problem = core.shards_entry_problem(shards, name)
        if problem:  # img2dataset's resume reads every shards/*.json name as a shard number, and removes _tmp whole
            raise UsageError(f"--images_dir {out}: {core.SHARDS}/{name[:200]} {problem}; move it away")
    release = published_folder_holding(out)
    if release is not None:
        raise UsageError(f"--images_dir {out} is in the published folder {release}; the images stage needs a folder "
                         f"of its own (default <output_dir>/images)")
    report = os.path.join(out, REPORT_FILE)
    if os.path.isfile(report) or os.path.abspath(out) == os.path.abspath(opts.output_dir):
        try:
            stage = core.own_json(report).get("stage") if os.path.isfile(report) else None
        except core.PlantedEntry as e:  # a crash may leave the stage's own report empty: not a run's either
            raise UsageError(str(e)) from None
        except OSError:
            stage = "?"
        if stage != STAGE:  # its report.json would replace a run's, whose tables would then be lost
            raise UsageError(f"--images_dir {out} is a run folder (or the output folder itself); the images "
                             f"stage needs a folder of its own (default <output_dir>/images)")


def check_inputs(opts: HardposOptions) -> None:
    if importlib.util.find_spec("img2dataset") is None:
        raise UsageError(f"--stage=images needs img2dataset: {core.INSTALL_HINT}")
    out = images_dir(opts)
    if has_scheme(out):
        raise UsageError(f"--images_dir must be a local folder (the shards are checked and indexed in place), "
                         f"got {out}")
    check_images_path(opts)
    names = tables(opts)
    if not names:
        if opts.image_tables is not None:
            raise UsageError("--image_tables is empty")
        raise UsageError(f"--output_dir: no table with an image_url or image_path column under {opts.output_dir}")
    vg_tables = []
    for table in names:
        first = next(_shards(opts, table))
        column = _image_column(first.schema_arrow)
        if column is None:
            raise UsageError(f"--image_tables: table {table} has no image_url or image_path column")
        if column == "image_path":
            vg_tables.append(table)
    if vg_tables and not opts.image_root:
        raise UsageError(f"--image_root is required: {', '.join(vg_tables)} name Visual Genome images by image_path "
                         f"(give the folder or URL prefix they are relative to)")
    root = opts.image_root
    hidden = hidden_why(root) if root and has_scheme(root) else None
    if hidden:  # its secrets could not be told apart from the rest: not shown, not fetched
        raise UsageError(f"--image_root: a URL that cannot be shown without its secrets: {hidden} (not shown here)")
    if root and not core.is_url(root):
        if has_scheme(root):
            raise UsageError(f"--image_root: unsupported URL scheme in {redacted(root)} (use "
                             f"{', '.join(core.URL_SCHEMES)} or a local folder)")
        if not os.path.isdir(root):
            raise UsageError(f"--image_root: no such folder {root}")
    problem = core.settings_problem(out, opts.image_format, opts.image_size)
    if problem:
        raise UsageError(problem)


def read_table(opts: HardposOptions, table: str) -> core.ImageTable:
    refs, read = [], 0
    for shard in _shards(opts, table):
        data = shard.read(columns=[c for c in _READ_COLUMNS if c in shard.schema_arrow.names])
        read += shard.metadata.num_rows
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
    check_images_path(opts)  # again, just before the lock is written into it
    with FolderLock(out, STAGE, "--images_dir"):  # two runs must not extend the same shards
        try:
            result = core.fetch_images([read_table(opts, t) for t in tables(opts)], config)
        except core.PlantedEntry as e:
            raise UsageError(str(e)) from None
        report_path = os.path.join(out, REPORT_FILE)
        report = {"stage": STAGE, "output_dir": opts.output_dir, "hardpos": build_info(),
                  "inputs": {"image_root": opts.image_root and redacted(opts.image_root),
                             "retry_failed_images": opts.retry_failed_images},
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
        print(f"  failed {failure['reason']}: {redacted(failure['url'])}")
    if figures["failed"] > 10:
        print(f"  ... {figures['failed'] - 10} more failures in {report['report_path']}")
