"""The tables of a run folder or of a published folder, found and checked without Beam (load_table and publish read
them so).

A run folder holds report.json and <folder>/<split>-SSSSS-of-NNNNN.parquet per table. Published, each table
is one config: data/<config>/<split>-SSSSS-of-NNNNN.parquet, where <config> is the table's schema name
(replace_eval, swap_eval, train_negatives, order_eval, hard_positives, train). The report says which shards
the run wrote, how many rows and which sha256 each has, and whether its counts balance. A table is refused
when anything disagrees (a shard missing, a stale one left, another row count or checksum, a schema other than
schemas/<config>.json, counts that do not balance), because the card's counts would be wrong; and a folder
holding a run with no report (killed, failed or still running) is refused unless the caller allows partial
releases.

A published folder is publish's only where its manifest (MANIFEST) says so: a manifest is valid only when it lists
nothing but the paths publish writes (README.md and data/<config>/<shard>), each with its sha256, so a manifest
that names another path (`../x`, `/etc/x`) or lacks an entry is an error, never a list of files to delete.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.tables.shards import SHARD_NAME, file_sha256, read_table

REPORT_FILE = "report.json"  # a run folder's report, written last by a run's commit (pipeline/io/commit.py)
# A run's staging folder, <folder>/.staging-<stage>-<id>/ (pipeline/io/commit.py makes, commits and recovers it).
STAGING_PREFIX = ".staging-"
STAGING_MARK = ".hardpos-staging"  # made with every staging folder: the only ones recovery touches
COMMIT_FILE = "commit.json"
# Stages whose reports describe Parquet tables in the run folder (images and publish reports do not).
TABLE_STAGES = ("eval_sets", "train_negatives", "order_eval", "hard_positives", "train_set", "all")
# In a published folder: the files that publish wrote there (and nothing else may be replaced or deleted).
MANIFEST = ".hardpos-publish.json"
# The next release, built complete beside the current one before any file of it changes; its manifest is written
# last, so a NEXT holding one is ready to switch in (stages/publish.py).
NEXT = ".hardpos-next"
CONFIG_NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")  # \Z: "train\n" is no config name
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _made_here(staging: str) -> bool:
    """A real folder (not a link) holding the mark as a plain file."""
    try:
        return stat.S_ISDIR(os.lstat(staging).st_mode) and \
            stat.S_ISREG(os.lstat(os.path.join(staging, STAGING_MARK)).st_mode)
    except OSError:
        return False


def local_staging_folders(target: str) -> list[str]:
    """The staging folders hardpos made in the local folder target (other .staging-* entries are the user's)."""
    if not os.path.isdir(target):
        return []
    return sorted(path for path in (os.path.join(target, n) for n in os.listdir(target)
                                    if n.startswith(STAGING_PREFIX)) if _made_here(path))


class PublishError(ValueError):
    """A folder's tables cannot be read or published as they are; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Table:
    config: str              # schema name, the Hub config
    split: str
    run_dir: Path            # folder of the report.json that wrote it
    stage_report: dict       # the report of the stage that wrote it: stage, inputs, that stage's tables
    section: dict            # the table's section of the report
    files: tuple[Path, ...]  # shards, in order
    rows: int                # from the Parquet footers
    download_size: int       # bytes on disk
    schema: object           # pyarrow.Schema of the shards

    def arrow_bytes(self) -> int:
        """Size in memory as Arrow (the card's num_bytes / dataset_size): reads every shard whole, so only the
        card asks for it, not the checks and loaders that find tables."""
        return sum(read_table(path).nbytes for path in self.files)

    def hub_paths(self) -> list[str]:
        return [f"data/{self.config}/{f.name}" for f in self.files]

    def data_files_pattern(self) -> str:
        """Matches exactly this set of shards (the -of-NNNNN suffix), so a stale shard of an earlier upload
        with another shard count is never read with them."""
        return f"data/{self.config}/{self.split}-*-of-{len(self.files):05d}.parquet"


def report_problem(report) -> str | None:
    """Why a parsed report.json is not one hardpos wrote (each reader walks its sections as objects, and its
    shards, checksums and inputs as mappings): one that is `[]`, or whose sections are lists, is refused with
    this, never walked into a traceback. None for a report."""
    if not isinstance(report, dict):
        return f"a JSON {type(report).__name__}, not an object"
    for key in ("tables", "inputs"):
        if not isinstance(report.get(key, {}), dict):
            return f"its {key} are not an object"
    for name, section in report.get("tables", {}).items():
        if not isinstance(section, dict):
            return f"its table {name} is not an object"
        odd = next((k for k in ("shards", "sha256", "dead_letter_shards", "files", "inputs", "made_from")
                    if section.get(k) is not None and not isinstance(section[k], dict)), None)
        if odd:
            return f"table {name}'s {odd} is not an object"
    return None


REPORT_LIMIT = 256 << 20  # a report.json past this is none hardpos wrote (io/report.OWN_FILE_LIMIT)


def read_bounded(path, limit: int, larger: str = "more than hardpos writes", flags: int = 0) -> bytes:
    """A local file of hardpos's own (a report, a manifest, a commit record, the images stage's JSON), read only when
    it is a regular file of at most `limit` bytes: opened without blocking (a FIFO would hang the open), never read
    past its size (a sparse 1 GiB file is refused unread). ValueError (one line: what it is instead, or its size and
    `larger`) otherwise; OSError as open raises it (a missing file). `flags`: more for os.open (O_NOFOLLOW)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | flags)
    found = os.fstat(fd)  # before fdopen, which refuses a folder with a traceback of its own
    mode, size = found.st_mode, found.st_size
    if not stat.S_ISREG(mode) or size > limit:
        os.close(fd)
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise ValueError(f"{kind}, not a file hardpos wrote")
        raise ValueError(f"{size:,} bytes, {larger}")
    with os.fdopen(fd, "rb") as f:
        return f.read(size + 1)  # as big as the file: read(n) allocates n bytes first


def read_report(path: Path) -> dict:
    """A local report.json, or PublishError naming it when it cannot be read or is not a report."""
    try:
        report = json.loads(read_bounded(path, REPORT_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested past Python's limit
        raise PublishError(f"{path}: unreadable report ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    problem = report_problem(report)
    if problem:
        raise PublishError(f"{path}: not a hardpos report ({problem}); move it away or run the stage again")
    return report


def link_target(path) -> str:
    """Where a link points, for a message ("?" when it is gone or unreadable by now: never an error of its own)."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def link_error(path, what: str = "a symbolic link") -> PublishError:
    """The refusal of a link where a run folder, a table folder, a shard or a report must be: hardpos reads no table
    through a link and publishes none (one planted there would name files anywhere)."""
    return PublishError(f"{path}: {what} (to {link_target(path)}), which hardpos never reads a table through or "
                        f"publishes; put the file itself there, or run the stage again")


def _is_link(path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def find_reports(output_dir: Path) -> list[Path]:
    """report.json of the folder itself and of its subfolders (a folder per stage, as `make sample` writes), links
    never followed: a subfolder that is a symbolic link to a run folder, or a report.json that is a link, is refused
    (PublishError), never read through (it would publish a folder from anywhere). The folder named itself is taken
    as named."""
    output_dir = Path(output_dir)
    candidates = [output_dir / REPORT_FILE]
    try:
        entries = sorted(os.scandir(output_dir), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_symlink():
            if os.path.isfile(os.path.join(entry.path, REPORT_FILE)):
                raise link_error(Path(entry.path), "a symbolic link to a run folder")
            continue
        if entry.is_dir(follow_symlinks=False):
            candidates.append(Path(entry.path) / REPORT_FILE)
    found = []
    for path in candidates:
        if _is_link(path):
            raise link_error(path)
        if path.is_file():
            found.append(path)
    return found


def is_published_path(relative: str) -> bool:
    """A path publish writes: README.md or data/<config>/<split>-SSSSS-of-NNNNN.parquet, nothing else (so never a
    path with '..', an absolute one or one in another folder)."""
    parts = relative.split("/")
    if parts == ["README.md"]:
        return True
    shard = SHARD_NAME.match(parts[-1])
    return len(parts) == 3 and parts[0] == "data" and bool(CONFIG_NAME.match(parts[1])) and bool(shard) and \
        shard["prefix"].isalpha()


def _manifest_problem(files) -> str | None:
    if not isinstance(files, dict) or "README.md" not in files:
        return "it lists no README.md"
    for relative, entry in files.items():
        if not is_published_path(relative):
            return f"it lists {relative!r}, not a path publish writes"
        if not isinstance(entry, dict) or not _SHA256.match(str(entry.get("sha256"))):
            return f"no sha256 for {relative}"
        if relative != "README.md" and (type(entry.get("rows")) is not int or entry["rows"] < 0):
            return f"no row count for {relative}"
    return None


MANIFEST_LIMIT = 64 << 20
CARD_HEAD = 1 << 20  # a card's YAML header (configs of a release from before manifests) lies in its first MiB


def read_manifest(folder: Path) -> dict[str, dict]:
    """The files folder's manifest says publish wrote there: relative path -> {sha256, and rows for a shard}.
    PublishError (one line) when it cannot be read or is not one publish wrote."""
    path = folder / MANIFEST
    try:
        files = json.loads(read_bounded(path, MANIFEST_LIMIT, "more than any manifest").decode("utf-8"))["files"]
        problem = _manifest_problem(files)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:  # ValueError: not JSON, or not UTF-8
        problem = f"unreadable: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    if problem:
        raise PublishError(f"{path}: not a manifest that publish wrote ({problem}); publish the tables again into "
                           f"an empty folder")
    return files


def is_published_folder(path: Path) -> bool:
    """A folder that publish built: its manifest, or (from before manifests) a card with configs and data/."""
    if (path / MANIFEST).is_file():
        return True
    card = path / "README.md"
    if not (card.is_file() and (path / "data").is_dir()):
        return False
    try:
        with open(card, "rb") as f:  # its YAML header only: a card is never read whole here
            head = f.read(CARD_HEAD).decode("utf-8", errors="replace")
    except OSError:
        return False
    return "\nconfigs:" in head.split("\n---", 1)[0]


def folder_holding(path, is_it) -> Path | None:
    """The first folder that path is or lies in, as named and then as really (links resolved), for which is_it(folder)
    holds; None when there is none."""
    for here in dict.fromkeys((Path(os.path.abspath(path)), Path(os.path.realpath(path)))):
        found = next((p for p in (here, *here.parents) if is_it(p)), None)
        if found is not None:
            return found
    return None


def published_folder_holding(path) -> Path | None:
    """The published folder that path is or lies in (a folder no stage writes into), else None."""
    return folder_holding(path, is_published_folder)


def _stage_of(report: dict, section: dict) -> str | None:
    # Reports from before the per-table sections named their stage were one stage's.
    return section.get("stage", report.get("stage"))


def stage_view(report: dict, stage: str) -> dict:
    """The report of one stage inside a folder's report.json: its inputs and its tables."""
    tables = {n: s for n, s in report.get("tables", {}).items() if _stage_of(report, s) == stage}
    inputs = next((s["inputs"] for s in tables.values() if "inputs" in s), report.get("inputs", {}))
    return {"stage": stage, "inputs": inputs, "tables": tables}


def shard_path_problem(relative) -> str | None:
    """Why a shard path a report records is not one a stage writes: exactly `<table folder>/<shard file>`, relative to
    the run folder, each part a plain name (so never an absolute path, `..`, `.`, a dot-folder, a backslash or a
    deeper path, which could name a file outside the run folder or through a link inside it). None when it is."""
    parts = relative.split("/") if isinstance(relative, str) else []
    if len(parts) != 2 or any(not part or part.startswith(".") or "\\" in part or "\0" in part for part in parts) \
            or not SHARD_NAME.match(parts[1]):
        return "not <table folder>/<split>-SSSSS-of-NNNNN.parquet inside the run folder"
    return None


def recorded_shards(run_dir: str, name: str, section: dict, parquet_files) -> dict[str, str]:
    """{relative path: sha256} of the shards of table `name` as its section of run_dir's report records them, once
    each is a path of the shape a stage writes (shard_path_problem: `<folder>/<shard>` inside run_dir, nothing
    else), they are exactly the Parquet files in their folder (`parquet_files(folder)`: the relative paths of those
    in the folder relative to run_dir) and each has its sha256: what every reader of ours checks a shard against
    before using it. PublishError (one line) otherwise."""
    where = f"{run_dir}/{REPORT_FILE}"
    listed = set(section.get("shards") or {})
    odd = next((relative for relative in sorted(listed, key=str) if shard_path_problem(relative)), None)
    if odd is not None:
        raise PublishError(f"{where}: table {name} lists the shard {odd!r}, {shard_path_problem(odd)} (hardpos reads "
                           f"no file but a run folder's own shards); run the stage again")
    folders = {posixpath.dirname(relative) for relative in listed}
    if not folders:
        raise PublishError(f"{where}: table {name} lists no shards")
    if len(folders) != 1:
        raise PublishError(f"{where}: table {name} has shards in several folders")
    folder = folders.pop()
    found = set(parquet_files(folder))
    missing, stale = sorted(listed - found), sorted(found - listed)
    if missing or stale:
        which = f"missing {run_dir}/{missing[0]}" if missing else f"not in the report {run_dir}/{stale[0]}"
        raise PublishError(f"{run_dir}/{folder}: shards do not match {where} ({which}); run the stage again")
    checksums = section.get("sha256") or {}
    unrecorded = sorted(listed - set(checksums))
    if unrecorded:
        raise PublishError(f"{where}: no sha256 recorded for {unrecorded[0]} (written before hardpos recorded "
                           f"checksums); run the stage again")
    return {relative: checksums[relative] for relative in sorted(listed)}


def local_parquet_files(run_dir: Path, folder: str) -> list[str]:
    """The `<folder>/<name>` of the Parquet files in a local run folder's table folder, links not followed: a table
    folder that is a link is refused (PublishError), one that is missing holds none."""
    path = Path(run_dir) / folder
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return []
    except OSError as e:
        raise PublishError(f"{path}: cannot be read ({e.strerror or e})") from None
    if stat.S_ISLNK(mode):
        raise link_error(path)
    if not stat.S_ISDIR(mode):
        return []
    with os.scandir(path) as entries:
        return sorted(f"{folder}/{e.name}" for e in entries if e.name.endswith(".parquet") and
                      not e.name.startswith("."))


def check_real_files(run_dir: Path, files) -> None:
    """Every part of each shard's path below run_dir (its table folder, the shard) is a real folder or a regular
    file, never a link: PublishError naming the first link, or what else is there. (run_dir is the folder named,
    or a subfolder of it that find_reports made sure is no link.)"""
    folders = sorted({Path(p).parent for p in files})
    for path, want_dir in [*((f, True) for f in folders), *((Path(p), False) for p in files)]:
        check_real(path, want_dir, "run the stage again")


def check_real(path, want_dir: bool, remedy: str, missing_ok: bool = False) -> None:
    """path is a real folder (want_dir) or a regular file, never a link: PublishError (one line ending in `remedy`)
    naming it otherwise; with missing_ok, nothing at path is fine too."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return
        raise PublishError(f"{path}: cannot be read (No such file or directory); {remedy}") from None
    except OSError as e:
        raise PublishError(f"{path}: cannot be read ({e.strerror or e}); {remedy}") from None
    if stat.S_ISLNK(mode):
        raise link_error(path)
    if not (stat.S_ISDIR(mode) if want_dir else stat.S_ISREG(mode)):
        raise PublishError(f"{path}: not a {'folder' if want_dir else 'regular file'}; {remedy}")


def _read_table(run_dir: Path, report: dict, name: str, section: dict, verify: bool) -> Table:
    where = run_dir / REPORT_FILE
    recorded = recorded_shards(str(run_dir), name, section, lambda folder: local_parquet_files(run_dir, folder))
    if not section.get("balanced") or section.get("rows") != sum(section["shards"].values()):
        raise PublishError(f"{where}: the counts of table {name} do not balance (read != rows + discarded + "
                           f"rejected, or rows != rows in its shards); run the stage again")
    listed = {run_dir / rel: section["shards"][rel] for rel in recorded}
    files = tuple(sorted(listed))
    # A stage writes no link: one planted at the table folder or a shard would be published, pointing anywhere.
    check_real_files(run_dir, files)
    if verify:  # before anything reads the files: a damaged footer is a checksum mismatch, not a crash
        check_checksums(run_dir, section, files)
    splits = set()
    rows = size = 0
    config = schema = None
    for path in files:
        match = SHARD_NAME.match(path.name)
        if not match or not match["prefix"].isalpha() or int(match["count"]) != len(files):
            raise PublishError(f"{path}: not a shard name of the form <split>-SSSSS-of-{len(files):05d}.parquet")
        splits.add(match["prefix"])
        try:
            meta = pq.ParquetFile(path)
        except (OSError, ValueError) as e:  # pyarrow's errors for a file that is not Parquet
            check_checksums(run_dir, section, [path])  # a changed file says so, whatever part of it changed
            raise PublishError(f"{path}: not a readable Parquet file ({e}); run the stage again") from None
        n = meta.metadata.num_rows
        if n != listed[path]:
            raise PublishError(f"{path}: {n} rows, but the report says {listed[path]}; run the stage again")
        table_name = (meta.schema_arrow.metadata or {}).get(b"hardpos.table", b"").decode()
        if not table_name:
            raise PublishError(f"{path}: no hardpos.table in the Parquet metadata (not written by hardpos)")
        if config not in (None, table_name) or (schema is not None and not schema.equals(meta.schema_arrow)):
            raise PublishError(f"{path}: its schema differs from the table's other shards")
        config, schema = table_name, meta.schema_arrow
        rows += n
        size += path.stat().st_size
    _check_schema(files[0], config, schema)
    if len(splits) != 1:
        raise PublishError(f"{files[0].parent}: shards of several splits {sorted(splits)}")
    stage_report = stage_view(report, _stage_of(report, section))
    return Table(config=config, split=splits.pop(), run_dir=run_dir, stage_report=stage_report, section=section,
                 files=files, rows=rows, download_size=size, schema=schema)


def changed_file(path, where, remedy: str = "run the stage again") -> PublishError:
    """The error of a file whose bytes are not the ones its report or manifest (`where`) recorded."""
    return PublishError(f"{path}: its sha256 differs from the one {where} recorded when it was written (the file "
                        f"changed or is damaged); {remedy}")


def check_checksums(run_dir: Path, section: dict, files) -> None:
    """Every shard has the sha256 that the report section recorded when the shard was written (_read_table made
    sure that one was recorded for each)."""
    for path in files:
        path = Path(path)
        if not path.is_relative_to(run_dir):  # _read_table lists only files inside run_dir
            raise PublishError(f"{path}: not inside the run folder {run_dir}")
        relative = path.relative_to(run_dir).as_posix()
        if shard_path_problem(relative) or relative not in (section.get("sha256") or {}):
            raise PublishError(f"{run_dir / REPORT_FILE}: records no sha256 for {relative}; run the stage again")
        if file_sha256(str(path)) != section["sha256"][relative]:
            raise changed_file(path, run_dir / REPORT_FILE)


def _check_schema(path: Path, config: str, schema) -> None:
    """The shards have the columns and types of schemas/<config>.json, which the card describes."""
    from pipeline.io.schema import load_schema

    try:
        expected = load_schema(config).arrow()
    except (OSError, ValueError):
        raise PublishError(f"{path}: table {config!r} has no schema in schemas/ (not a hardpos table)") from None
    if not schema.equals(expected, check_metadata=False):
        raise PublishError(f"{path}: its columns differ from schemas/{config}.json (written by another version of "
                           f"hardpos?); run the stage again")


def _holds_shards(folder: Path) -> str | None:
    """The table name of the hardpos Parquet shards directly in folder, if there are any."""
    for path in sorted(folder.glob("*.parquet"))[:1]:
        try:
            metadata = pq.read_schema(path).metadata or {}
        except (OSError, ValueError):
            return path.name
        return metadata.get(b"hardpos.table", b"").decode() or None
    return None


def unfinished_runs(output_dir: Path, exclude: tuple[Path, ...] = ()) -> list[str]:
    """A line per folder under output_dir (itself and its subfolders) holding a run that has no report: a
    staging folder (running, killed, or its commit interrupted) or table shards that no report.json lists."""
    excluded = {p.resolve() for p in exclude}
    found = []
    # Links are not followed: find_reports refuses a linked run folder, _read_table a linked table folder.
    for folder in [output_dir, *sorted(p for p in output_dir.iterdir() if p.is_dir() and not p.is_symlink())]:
        if folder.name.startswith(".") or folder.resolve() in excluded or is_published_folder(folder):
            continue
        for staging in map(Path, local_staging_folders(str(folder))):  # hardpos's own, not a user's ".staging-mine"
            state = "was interrupted while committing (run any stage into it to finish)" \
                if (staging / COMMIT_FILE).exists() else "has not finished: it is running, or was killed"
            found.append(f"{folder}: a run that {state} ({staging.name})")
        listed = set()
        report_path = folder / REPORT_FILE
        if report_path.is_file():
            for section in read_report(report_path).get("tables", {}).values():
                listed |= {Path(rel).parts[0] for rel in (section.get("shards") or {})}
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
            if sub.name in listed or sub.name in (REJECTED, DISCARDED) or sub.name.startswith(".") or \
                    sub.resolve() in excluded or is_published_folder(sub):
                continue
            table = _holds_shards(sub)
            if table:
                found.append(f"{sub}: shards of table {table} that no report.json lists (a run that was killed, "
                             f"failed or is still running)")
    return found


def find_tables(output_dir: str | Path, verify: bool = True, allow_partial: bool = False,
                exclude: tuple[Path, ...] = (), skipped: list[str] | None = None,
                leave_out_empty: bool = False, keep_empty: bool = False) -> list[Table]:
    """Every table written under output_dir, in config-name order. PublishError when there is none, when two
    runs wrote the same table, when a table's files disagree with its report (with verify, their sha256 too),
    when a folder holds a run with no report, unless allow_partial (then its lines go to `skipped`), or when a
    table has no rows (a config with no data does not load), unless leave_out_empty (its line goes to `skipped`)
    or keep_empty (a reader's: load_table gives an empty table with its columns)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise PublishError(f"--output_dir {output_dir} is not a local folder")
    partial = unfinished_runs(output_dir, exclude)
    if partial and not allow_partial:
        raise PublishError(f"{partial[0]}; publish needs every run finished (or --allow_partial to skip it)")
    if skipped is not None:
        skipped += [f"(--allow_partial): {line}" for line in partial]
    found: dict[str, Table] = {}
    for report_path in find_reports(output_dir):
        if report_path.parent.resolve() in {p.resolve() for p in exclude}:
            continue
        report = read_report(report_path)
        for name, section in report.get("tables", {}).items():
            if _stage_of(report, section) not in TABLE_STAGES:
                continue
            table = _read_table(report_path.parent, report, name, section, verify)
            if table.config in found:
                raise PublishError(f"table {table.config} was written by two runs: {found[table.config].run_dir} "
                                   f"and {table.run_dir}; point --output_dir at a folder holding one of each")
            found[table.config] = table
    empty = [] if keep_empty else [c for c in sorted(found) if found[c].rows == 0]
    if empty and not leave_out_empty:
        table = found[empty[0]]
        raise PublishError(f"table {table.config} in {table.run_dir} has 0 rows: a config with no data does not "
                           f"load (datasets: 'corresponds to no data'); run its stage on more input, or "
                           f"--leave_out_empty to publish without it")
    for config in empty:
        if skipped is not None:
            skipped.append(f"(--leave_out_empty): {config}: 0 rows in {found[config].run_dir}")
        del found[config]
    if not found:
        raise PublishError(f"no tables under {output_dir}: expected report.json with Parquet tables there or in "
                           f"its subfolders (run a stage first)")
    return [found[c] for c in sorted(found)]


def merge_reports(folder_report: dict | None, stage_report: dict) -> dict:
    """The folder's report.json once a stage has committed: one section per table, each saying which stage wrote
    it from which inputs. The stage's tables replace theirs; the sections of other stages' tables stay."""
    tables = {}
    if folder_report:
        for name, section in folder_report.get("tables", {}).items():
            # A report written before sections named their stage: the whole report was one stage's.
            tables[name] = {**section, "stage": section.get("stage", folder_report.get("stage")),
                            "inputs": section.get("inputs", folder_report.get("inputs", {}))}
    for name, section in stage_report["tables"].items():
        tables[name] = {**section, "stage": stage_report["stage"], "inputs": stage_report.get("inputs", {})}
    from pipeline.provenance import build_info

    return {"output_dir": stage_report["output_dir"], "stages": sorted({t["stage"] for t in tables.values()}),
            "hardpos": build_info(), "tables": tables}


def write_run_folder(out: Path, schema_name: str, rows: list[dict], folder: str | None = None) -> Path:
    """A run folder as a stage writes it (report.json + <folder>/<split>-00000-of-00001.parquet) holding `rows`
    of the table `schema_name`, beside the tables its report.json already records: for fixtures and benchmarks
    that need a table without running its stage (on a training machine with no Beam too)."""
    import hashlib

    from pipeline.io.schema import load_schema
    from pipeline.tables.shards import shard_bytes, shard_name

    schema = load_schema(schema_name)
    for row in rows:
        schema.check_row(row)
    folder = folder or schema_name
    name = shard_name(schema.split, 0, 1)
    (out / folder).mkdir(parents=True, exist_ok=True)
    data = shard_bytes(rows, schema)
    (out / folder / name).write_bytes(data)
    section = {"read": len(rows), "rows": len(rows), "discarded": 0, "rejected": 0, "written": len(rows),
               "balanced": True, "discard_reasons": {}, "reject_reasons": {}, "shards": {f"{folder}/{name}": len(rows)},
               "dead_letter_shards": {}, "sha256": {f"{folder}/{name}": hashlib.sha256(data).hexdigest()}}
    earlier = json.loads((out / REPORT_FILE).read_text()) if (out / REPORT_FILE).is_file() else None
    report = merge_reports(earlier, {"stage": "all", "output_dir": str(out), "inputs": {}, "tables": {folder: section}})
    (out / REPORT_FILE).write_text(json.dumps(report))
    return out


def run_table_folder(target: Path) -> Path | None:
    """The folder of a run's table (or its dead letters, or the default LLM cache) that target is or lies in, as named
    or really: a folder that a stage's commit swaps whole, or writes answers into. None when there is none."""
    from pipeline.resources import resource_dir

    # the tables, their dead letters, and the default LLM cache, whose table folders the stages write into; and
    # the tables the run's report records (eval_sets' replace and swap are named apart from their schemas)
    names = {p.stem for p in resource_dir("schemas").glob("*.json")} | {REJECTED, DISCARDED, "llm_cache"}

    def is_table_folder(folder: Path) -> bool:
        report = folder.parent / REPORT_FILE
        return folder.parent != folder and report.is_file() and (folder.name in names
                                                                 or folder.name in _recorded_tables(report))

    return folder_holding(target, is_table_folder)


def _recorded_tables(report: Path) -> set[str]:
    """The tables a run's report.json records; none when it cannot be read as one (a FIFO, a huge or damaged
    file: read without blocking and with a bound)."""
    try:
        tables = json.loads(read_bounded(report, REPORT_LIMIT)).get("tables")
    except (OSError, ValueError, RecursionError, AttributeError):
        return set()
    return {t for t in tables if isinstance(t, str)} if isinstance(tables, dict) else set()


def staging_folder_holding(path) -> Path | None:
    """The run's staging folder (marked: the run commits it, or a later run removes it once its run is gone) that
    path is or lies in, else None."""
    return folder_holding(path, lambda p: p.name.startswith(STAGING_PREFIX) and (p / STAGING_MARK).is_file())


# io/spill.py's folder names and lock file (it takes them from here); publish/images.py's folder layout
SPILL_PREFIX, SPILL_MARK = "hardpos-spill-", ".hardpos-spill.lock"
IMAGES_FOLDER_ENTRIES = ("shards", "index", "settings.json")


def removed_folder_problem(flag: str, folder) -> str | None:
    """Why nothing may be written at folder: it is in a folder a run removes whole (a run's staging folder, which
    the run or the next one removes; a spill folder, which a later run removes once its run is gone). None else."""
    staging = staging_folder_holding(folder)
    if staging is not None:
        return (f"{flag}={folder} is in {staging}, a run's staging folder, which the run or the next one removes; "
                f"write into a folder of its own")
    spill = folder_holding(folder, lambda p: p.name.startswith(SPILL_PREFIX) and (p / SPILL_MARK).exists())
    if spill is not None:
        return (f"{flag}={folder} is in {spill}, a run's spill folder, which a later run removes whole; write into "
                f"a folder of its own")
    return None


def images_folder_holding(folder):
    """The images stage's folder that is `folder` or holds it (its shards, index, settings and report), else None."""
    return folder_holding(folder, lambda p: all((p / name).exists() for name in IMAGES_FOLDER_ENTRIES))


def output_folder_problem(flag: str, folder) -> str | None:
    """Why a tool's output folder (the trainer's or the evaluator's --out) must not be where it is: inside a run's
    table folder (its files would be taken for the table's, or replaced by the next commit), inside a release
    (publish would refuse it, or upload them), or inside a folder a run removes or fills (a staging or spill
    folder, the images stage's). None when it is a folder of its own."""
    table = run_table_folder(folder)
    if table is not None:
        return (f"{flag}={folder} is in {table}, a folder the stages of the run in {table.parent} write (a table, its "
                f"dead letters or the LLM cache); write into a folder of its own")
    release = published_folder_holding(folder)
    if release is not None:
        return f"{flag}={folder} is in the published folder {release}; write into a folder of its own"
    removed = removed_folder_problem(flag, folder)
    if removed:
        return removed
    images = images_folder_holding(folder)
    if images is not None:
        return (f"{flag}={folder} is in {images}, the images stage's folder, whose shards it extends and checks; "
                f"write into a folder of its own")
    return None
