"""Getting a table back: `load_table(source, config)` for a Hub repository, a published folder, or a run's
output folder, so the trainer and evaluator read all three the same way, with pyarrow and datasets alone (a
training machine installs no Beam: pip install -e '.[train]').

    from pipeline.tables.load import load_table
    train = load_table("ORG/NAME", "train")             # the Hub (datasets.load_dataset(repo, config))
    train = load_table("out/release/hub", "train")      # a published folder (its data/train/ shards)
    train = load_table("out/sample", "replace_eval")    # a run folder (report.json + Parquet tables)

A local table is checked against the sha256 its manifest or report recorded, and only those shards are read: each
opened once, no link followed below the folder named (O_NOFOLLOW at every level), copied to a private file as its
bytes are hashed and compared with the recorded sha256, and the rows built from that copy with every page's
checksum checked. So a shard or folder swapped, rewritten or linked after the check is refused, never read, and no
shared cache can give rows other than the checked bytes' (a published folder's card, checked against its manifest
too, never says what is read); from the Hub, `datasets` checks every Parquet page's checksum (the card asks it to,
pipeline/publish/card.py). A table with no rows comes back as an empty Dataset with its columns, which
`datasets.load_dataset` cannot give (its reader finds no data to read for a split of 0 rows).
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.tables.folders import (
    CONFIG_NAME,
    MANIFEST,
    NEXT,
    REPORT_FILE,
    PublishError,
    changed_file,
    check_checksums,
    check_real,
    find_reports,
    find_tables,
    is_published_folder,
    link_error,
    read_manifest,
)
from pipeline.tables.shards import SHARD_NAME, VERIFY_PAGES, file_sha256, read_table

# Table folder names of a run (eval_sets writes replace/ and swap/) -> config names.
ALIASES = {"replace": "replace_eval", "swap": "swap_eval"}


def check_published_paths(folder: Path, config: str, shards=()) -> None:
    """Every level of a published folder that load_table reads (its manifest, README.md, data/, data/<config>/
    and each shard) is a real folder or a regular file, never a symbolic link (PublishError naming the first
    one otherwise): a link planted there would have the table read from anywhere. The folder named itself is
    taken as named."""
    for path, want_dir in [(folder / MANIFEST, False), (folder / "README.md", False), (folder / "data", True),
                           (folder / "data" / config, True), *((Path(p), False) for p in shards)]:
        check_real(path, want_dir, "publish again", missing_ok=True)


def check_published(folder: Path, config: str, verify: bool = True) -> list[Path]:
    """The config's shards in a published folder, checked: exactly the ones its manifest lists, with their sha256
    (not read when verify is False), and the card the manifest lists (a card edited to name other files is refused,
    though load_table reads the shards it checked, never the files a card names). PublishError (one line)
    otherwise, or when the manifest is unreadable or a publish into the folder was cut off. A folder with no
    manifest (a download of the Hub repository) has nothing recorded to check against."""
    check_published_paths(folder, config)
    shards = sorted((folder / "data" / config).glob("*.parquet"))
    check_published_paths(folder, config, shards)
    check_shard_set(folder / "data" / config, shards)
    if (folder / NEXT / MANIFEST).is_file():
        raise PublishError(f"{folder}: a publish into it is switching to its new files, or was cut off doing so "
                           f"(then run publish again to finish it)")
    if not (folder / MANIFEST).is_file():
        return shards
    manifest = read_manifest(folder)
    listed = {path: entry for path, entry in manifest.items() if path.startswith(f"data/{config}/")}
    on_disk = {p.relative_to(folder).as_posix() for p in shards}
    if on_disk != set(listed):
        which = min(on_disk ^ set(listed))
        raise PublishError(f"{folder}: {which} is {'not in' if which in on_disk else 'missing, though listed in'} "
                           f"{MANIFEST}; publish again")
    for path, entry in sorted({"README.md": manifest["README.md"], **listed}.items()):
        if not (folder / path).is_file() or (verify and file_sha256(str(folder / path)) != entry["sha256"]):
            raise changed_file(folder / path, MANIFEST, "publish again")
    return shards


def check_shard_set(folder: Path, shards) -> None:
    """The shards of one config are one set as publish writes it: every name <split>-SSSSS-of-NNNNN.parquet, one
    split, NNNNN the number of shards and each index 0..NNNNN-1 once. A shard of another split, or a stale shard of
    an earlier upload with another count (which `datasets` leaves out by the card's pattern), is refused: PublishError
    (one line) naming it."""
    names = [Path(p).name for p in shards]
    wanted = None
    for name in names:
        match = SHARD_NAME.match(name)
        if not match or not match["prefix"].isalpha():
            raise PublishError(f"{folder / name}: not a shard name of the form <split>-SSSSS-of-NNNNN.parquet; "
                               f"move it away or publish again")
        wanted = wanted or (match["prefix"], int(match["count"]))
        if (match["prefix"], int(match["count"])) != wanted:
            raise PublishError(f"{folder / name}: a shard of another set than {folder / names[0]} (another split, "
                               f"or a stale shard of an earlier upload); one config holds one set: remove it or "
                               f"publish again")
    if wanted is not None and sorted(int(SHARD_NAME.match(n)["index"]) for n in names) != list(range(wanted[1])):
        raise PublishError(f"{folder}: its shards are not the {wanted[1]} of one set ({', '.join(names[:3])}"
                           f"{', ...' if len(names) > 3 else ''}); publish again")


def table_fingerprint(sha256s) -> str:
    """What identifies a table's rows: the sha256 of its shards' recorded sha256s, sorted (the same for a run
    folder's table and its published copy, whatever the shards' paths)."""
    return hashlib.sha256("\n".join(sorted(sha256s)).encode("ascii")).hexdigest()


@dataclass(frozen=True)
class LocalTable:
    """A table of a local run folder or published folder (`root`, as named): its shards (checked against what
    `recorded_in` recorded, their sha256 too unless read with verify=False) and the sha256 recorded for each;
    `sha256` is None for a published folder with no manifest (a download of the Hub repository), which records
    nothing. `refs()` names each shard with its sha256 for read_shard and checked_copy, which check the bytes as
    they read them."""
    config: str
    shards: tuple[Path, ...]
    sha256: dict[Path, str] | None
    recorded_in: str | None
    root: Path = field(default=Path("."))

    @property
    def fingerprint(self) -> str | None:
        return None if self.sha256 is None else table_fingerprint(self.sha256.values())

    def refs(self) -> tuple[ShardRef, ...]:
        return tuple(ShardRef(str(self.root), str(p), None if self.sha256 is None else self.sha256[p],
                              self.recorded_in) for p in self.shards)


class TableMissing(PublishError):
    """The folder checks, but holds no table of that config (a caller may do without it)."""


def plain_config(source, config: str) -> str:
    """The config name, once it is a plain name (a config is a folder name under data/: `../x` or `a/b` would name
    another folder); PublishError otherwise."""
    config = ALIASES.get(config, config)
    if not isinstance(config, str) or not CONFIG_NAME.match(config):
        raise PublishError(f"{source}: {config!r} is not a config name (lowercase letters, digits and _, such as "
                           f"train or replace_eval)")
    return config


def local_table(source, config: str, verify: bool = True) -> LocalTable | None:
    """The table `config` of a local published folder or run folder, checked as load_table checks it (exactly the
    shards its manifest or report lists, no link, each with its recorded sha256: hashed unless verify is False).
    None when source is neither (a Hub repository, a user's own folder); PublishError (one line) when the folder
    has no such table or it does not check."""
    path = Path(source)
    if not path.is_dir():
        return None
    config = plain_config(source, config)
    if is_published_folder(path) and (path / REPORT_FILE).exists():
        raise PublishError(f"{source}: both a published folder and a run folder (its report.json), so which table "
                           f"is meant cannot be told; publish into a folder of its own")
    if is_published_folder(path):
        shards = check_published(path, config, verify)
        if not shards:
            raise TableMissing(f"{source}: no config {config} (no data/{config}/*.parquet)")
        if not (path / MANIFEST).is_file():
            return LocalTable(config, tuple(shards), None, None, path)
        manifest = read_manifest(path)
        return LocalTable(config, tuple(shards), {p: manifest[p.relative_to(path).as_posix()]["sha256"]
                                                  for p in shards}, str(path / MANIFEST), path)
    if not find_reports(path):
        return None
    # The table's shards must match the row counts and sha256 of its report; another run still going on in the
    # folder does not stop this table from loading.
    tables = {t.config: t for t in find_tables(path, verify=False, allow_partial=True, keep_empty=True)}
    if config not in tables:
        raise TableMissing(f"{source}: no table {config}; found {', '.join(sorted(tables))}")
    table = tables[config]
    if verify:
        check_checksums(table.run_dir, table.section, table.files)
    return LocalTable(config, table.files,
                      {p: table.section["sha256"][p.relative_to(table.run_dir).as_posix()] for p in table.files},
                      str(table.run_dir / REPORT_FILE), path)


@dataclass(frozen=True)
class ShardRef:
    """One shard to read: its path under `root` (the folder named, taken as named), and the sha256 that
    `recorded_in` recorded for it (None: nothing recorded, a user's own shard)."""
    root: str
    path: str
    sha256: str | None = None
    recorded_in: str | None = None


def open_below(root: str, path: str) -> int:
    """A read-only descriptor of path, opened from root one name at a time with no link followed (O_NOFOLLOW): a
    folder or shard below root that is, or has become, a link is refused (PublishError), never followed. root
    itself is opened as named (a `current` link to a release is followed once, here, and never again)."""
    relative = Path(os.path.relpath(path, root))
    if relative.is_absolute() or ".." in relative.parts or relative == Path("."):
        raise PublishError(f"{path}: not inside {root}")
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise PublishError(f"{root}: cannot be read ({e.strerror or e})") from None
    *folders, name = relative.parts
    try:
        for i, part in enumerate([*folders, name]):
            last = i == len(folders)
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as e:
                here = Path(root, *relative.parts[:i + 1])
                if _is_link(part, fd):
                    raise link_error(here) from None
                raise PublishError(f"{here}: cannot be read ({e.strerror or e}); run the stage or publish again") \
                    from None
            os.close(fd)
            fd = child
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PublishError(f"{path}: not a regular file; run the stage or publish again")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def checked_copy(ref: ShardRef, dest: str) -> str:
    """A private copy of one shard at dest, made from the bytes read through one descriptor (open_below) as they
    are hashed and, when a sha256 is recorded, found to be those: what was checked is what is read from the copy,
    whatever changes on disk meanwhile. PublishError (one line) otherwise."""
    digest = hashlib.sha256()
    with os.fdopen(open_below(ref.root, ref.path), "rb") as source, \
            open(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if ref.sha256 is not None and digest.hexdigest() != ref.sha256:
        os.unlink(dest)
        raise changed_file(ref.path, ref.recorded_in or "its report",
                           "publish again" if (ref.recorded_in or "").endswith(MANIFEST) else "run the stage again")
    return dest


def _private_folder() -> str:
    """A folder of this process's own (0700), removed when it exits: the checked copies and their Arrow cache."""
    folder = tempfile.mkdtemp(prefix="hardpos-load-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def read_shard(ref: ShardRef, columns: list[str] | None = None) -> pa.Table:
    """The rows of one shard (checked_copy's), every page's checksum checked. PublishError (one line) otherwise."""
    folder = tempfile.mkdtemp(prefix="hardpos-shard-")
    try:
        copy = checked_copy(ref, os.path.join(folder, "shard.parquet"))
        try:
            return read_table(copy, columns=columns)
        except (OSError, pa.ArrowException) as e:
            raise PublishError(f"{ref.path}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def table_folder_of(folder) -> tuple[Path, str] | None:
    """(the run or published folder, the config) when folder is a table's own folder there: <run>/<folder> that
    the run's report.json records a table in, or <published>/data/<config>; else None. PublishError when that
    folder is a link (hardpos reads no table through one: the shards there are not the ones recorded)."""
    folder = Path(folder)
    if folder.parent.name == "data" and is_published_folder(folder.parent.parent):
        check_real(folder, True, "publish again")
        return folder.parent.parent, folder.name
    run = folder.parent
    if not (run / REPORT_FILE).is_file():
        return None
    for table in find_tables(run, verify=False, allow_partial=True, keep_empty=True):
        if table.files and table.files[0].parent.name == folder.name:
            check_real(folder, True, "run the stage again")
            return run, table.config
    return None


def check_recorded_shard(shard, verify: bool = True, config: str | None = None) -> ShardRef | None:
    """A shard named on its own (one a glob matched): when it lies in a table's folder of a run folder or a
    published folder, it must be one that the report or manifest lists there, with its sha256 (hashed unless verify
    is False), and no link (PublishError otherwise: a stray file beside a table is not part of it); its ShardRef
    then, which read_shard checks again as it reads (with `config`, of that table only). None for a shard anywhere
    else (a user's own files), which has nothing to be checked against."""
    shard = Path(shard)
    where = table_folder_of(shard.parent)
    if where is None:
        return None
    if config is not None and where[1] != config:
        raise PublishError(f"{shard}: a shard of table {where[1]} in {where[0]}, not of its {config} table")
    table = local_table(where[0], where[1], verify=False)
    if table.sha256 is None:  # a published folder with no manifest
        return None
    recorded = {p.name: sha for p, sha in table.sha256.items()}
    if shard.name not in recorded:
        raise PublishError(f"{shard}: not one of the shards {table.recorded_in} lists for table {table.config} "
                           f"(a stray file beside the table); move it away")
    if shard.is_symlink():
        raise PublishError(f"{shard}: a symbolic link, which hardpos never reads a table through")
    if verify and file_sha256(str(shard)) != recorded[shard.name]:
        raise changed_file(shard, table.recorded_in,
                           "publish again" if table.recorded_in.endswith(MANIFEST) else "run the stage again")
    return ShardRef(str(where[0]), str(shard), recorded[shard.name], table.recorded_in)


def read_rows(source, table: LocalTable, split: str | None = None):
    """The checked shards of a local table, and only those (never the files a card names), as a datasets.Dataset
    that `datasets` builds from private copies of the bytes checked as they were read (checked_copy), into a cache of
    its own: no path of the folder is opened again and no shared cache is consulted, so the rows are those of the
    sha256s the table's fingerprint is made of; memory-mapped as `datasets` maps any table. A table of no rows comes
    back with its columns (datasets.load_dataset finds no data in a split of 0 rows)."""
    import datasets

    table_split = SHARD_NAME.match(table.shards[0].name)["prefix"]
    if split not in (None, table_split):
        raise PublishError(f"{source}: table {table.config} has no split {split!r}, only {table_split!r}")
    folder = _private_folder()
    os.mkdir(os.path.join(folder, "shards"))
    copies = [checked_copy(ref, os.path.join(folder, "shards", Path(ref.path).name)) for ref in table.refs()]
    if not any(pq.ParquetFile(c).metadata.num_rows for c in copies):
        schema = pq.read_schema(copies[0])
        return datasets.Dataset.from_dict({name: [] for name in schema.names},
                                          features=datasets.Features.from_arrow_schema(schema),
                                          split=datasets.Split(table_split))
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # "Generating train split" for a private cache made afresh every time
    try:
        loaded = datasets.load_dataset("parquet", data_files={table_split: copies}, split=table_split,
                                       cache_dir=os.path.join(folder, "cache"),
                                       fragment_scan_options=dict(VERIFY_PAGES))
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    for copy in copies:  # the Dataset maps the Arrow cache, not these
        os.unlink(copy)
    return loaded


def load_checked(source: str, config: str, split: str | None = None, **kwargs):
    """(the table as load_table gives it, its LocalTable: None from the Hub): the rows and the fingerprint of the
    one check, for a caller that records what it read (the trainer's checkpoints)."""
    import datasets

    table = local_table(source, config)
    if table is not None:
        return read_rows(source, table, split), table
    if Path(source).exists():
        raise PublishError(f"{source}: neither a published folder (README.md with configs) nor a run folder "
                           f"(report.json)")
    loaded = datasets.load_dataset(source, ALIASES.get(config, config), split=split, **kwargs)
    if split is None and isinstance(loaded, datasets.DatasetDict) and len(loaded) == 1:
        return next(iter(loaded.values())), None
    return loaded, None


def load_table(source: str, config: str, split: str | None = None, **kwargs):
    """A datasets.Dataset (the one split, or the table's only split) of `config` from `source`. kwargs go to
    datasets.load_dataset for a Hub repository; a local table is read from its checked bytes, not through datasets'
    cache, so cache options do not apply to it."""
    return load_checked(source, config, split, **kwargs)[0]
