"""Getting a table back: `load_table(source, config)` for a Hub repository, a published folder, or a run's
output folder, so the trainer and evaluator read all three the same way, with pyarrow and datasets alone (a
training machine installs no Beam: pip install -e '.[train]').

    from pipeline.tables.load import load_table
    train = load_table("ORG/NAME", "train")             # the Hub (datasets.load_dataset(repo, config))
    train = load_table("out/release/hub", "train")      # a published folder (its data/train/ shards)
    train = load_table("out/sample", "replace_eval")    # a run folder (report.json + Parquet tables)

A local table is checked against the sha256 its manifest or report recorded before it is read, and only those
shards are read, with every page's checksum checked (a published folder's card, checked against its manifest too,
never says what is read); from the Hub, `datasets` checks every Parquet page's checksum (the card asks it to,
pipeline/publish/card.py). A table with no rows comes back as an empty Dataset with its columns, which
`datasets.load_dataset` cannot give (its reader finds no data to read for a split of 0 rows).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.tables.folders import (
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
    read_manifest,
)
from pipeline.tables.shards import SHARD_NAME, VERIFY_PAGES, file_sha256

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
    if (folder / NEXT / MANIFEST).is_file():
        raise PublishError(f"{folder}: a publish into it is switching to its new files, or was cut off doing so "
                           f"(then run publish again to finish it)")
    if not (folder / MANIFEST).is_file():
        return shards
    manifest = read_manifest(folder)
    listed = {path: entry for path, entry in manifest.items() if path.startswith(f"data/{config}/")}
    on_disk = {p.relative_to(folder).as_posix() for p in shards}
    if on_disk != set(listed):
        which = sorted(on_disk ^ set(listed))[0]
        raise PublishError(f"{folder}: {which} is {'not in' if which in on_disk else 'missing, though listed in'} "
                           f"{MANIFEST}; publish again")
    for path, entry in sorted({"README.md": manifest["README.md"], **listed}.items()):
        if not (folder / path).is_file() or (verify and file_sha256(str(folder / path)) != entry["sha256"]):
            raise changed_file(folder / path, MANIFEST, "publish again")
    return shards


def table_fingerprint(sha256s) -> str:
    """What identifies a table's rows: the sha256 of its shards' recorded sha256s, sorted (the same for a run
    folder's table and its published copy, whatever the shards' paths)."""
    return hashlib.sha256("\n".join(sorted(sha256s)).encode("ascii")).hexdigest()


@dataclass(frozen=True)
class LocalTable:
    """A table of a local run folder or published folder: its shards (checked against what `recorded_in` recorded,
    their sha256 too unless read with verify=False) and the sha256 recorded for each; `sha256` is None for a
    published folder with no manifest (a download of the Hub repository), which records nothing."""
    config: str
    shards: tuple[Path, ...]
    sha256: dict[Path, str] | None
    recorded_in: str | None

    @property
    def fingerprint(self) -> str | None:
        return None if self.sha256 is None else table_fingerprint(self.sha256.values())


def local_table(source, config: str, verify: bool = True) -> LocalTable | None:
    """The table `config` of a local published folder or run folder, checked as load_table checks it (exactly the
    shards its manifest or report lists, no link, each with its recorded sha256: hashed unless verify is False).
    None when source is neither (a Hub repository, a user's own folder); PublishError (one line) when the folder
    has no such table or it does not check."""
    config = ALIASES.get(config, config)
    path = Path(source)
    if not path.is_dir():
        return None
    if is_published_folder(path):
        shards = check_published(path, config, verify)
        if not shards:
            raise PublishError(f"{source}: no config {config} (no data/{config}/*.parquet)")
        if not (path / MANIFEST).is_file():
            return LocalTable(config, tuple(shards), None, None)
        manifest = read_manifest(path)
        return LocalTable(config, tuple(shards), {p: manifest[p.relative_to(path).as_posix()]["sha256"]
                                                  for p in shards}, str(path / MANIFEST))
    if not find_reports(path):
        return None
    # The table's shards must match the row counts and sha256 of its report; another run still going on in the
    # folder does not stop this table from loading.
    tables = {t.config: t for t in find_tables(path, verify=False, allow_partial=True, keep_empty=True)}
    if config not in tables:
        raise PublishError(f"{source}: no table {config}; found {', '.join(sorted(tables))}")
    table = tables[config]
    if verify:
        check_checksums(table.run_dir, table.section, table.files)
    return LocalTable(config, table.files,
                      {p: table.section["sha256"][p.relative_to(table.run_dir).as_posix()] for p in table.files},
                      str(table.run_dir / REPORT_FILE))


def table_folder_of(folder) -> tuple[Path, str] | None:
    """(the run or published folder, the config) when folder is a table's own folder there: <run>/<folder> that
    the run's report.json records a table in, or <published>/data/<config>; else None."""
    folder = Path(folder)
    if folder.parent.name == "data" and is_published_folder(folder.parent.parent):
        return folder.parent.parent, folder.name
    run = folder.parent
    if not (run / REPORT_FILE).is_file() or folder.is_symlink():
        return None
    for table in find_tables(run, verify=False, allow_partial=True, keep_empty=True):
        if table.files and table.files[0].parent == folder:
            return run, table.config
    return None


def check_recorded_shard(shard) -> None:
    """A shard named on its own (one a glob matched): when it lies in a table's folder of a run folder or a
    published folder, it must be one that the report or manifest lists there, with its sha256, and no link
    (PublishError otherwise: a stray file beside a table is not part of it). A shard anywhere else (a user's own
    files) has nothing to be checked against."""
    shard = Path(shard)
    where = table_folder_of(shard.parent)
    if where is None:
        return
    table = local_table(where[0], where[1], verify=False)
    if table.sha256 is None:  # a published folder with no manifest
        return
    recorded = {p.name: sha for p, sha in table.sha256.items()}
    if shard.name not in recorded:
        raise PublishError(f"{shard}: not one of the shards {table.recorded_in} lists for table {table.config} "
                           f"(a stray file beside the table); move it away")
    if shard.is_symlink():
        raise PublishError(f"{shard}: a symbolic link, which hardpos never reads a table through")
    if file_sha256(str(shard)) != recorded[shard.name]:
        raise changed_file(shard, table.recorded_in,
                           "publish again" if table.recorded_in.endswith(MANIFEST) else "run the stage again")


def _no_rows(source: str, config: str, shards: list[Path], split: str | None):
    """The table's columns and no rows, when its shards hold none (None when they hold rows)."""
    if not shards or any(pq.ParquetFile(p).metadata.num_rows for p in shards):
        return None
    import datasets

    table_split = SHARD_NAME.match(shards[0].name)["prefix"]
    if split not in (None, table_split):
        raise PublishError(f"{source}: table {config} has no split {split!r}, only {table_split!r}")
    schema = pq.read_schema(shards[0])
    return datasets.Dataset.from_dict({name: [] for name in schema.names},
                                      features=datasets.Features.from_arrow_schema(schema),
                                      split=datasets.Split(table_split))


def _load_shards(source: str, config: str, shards: list[Path], split: str | None, kwargs: dict):
    """The checked shards of a local table, and only those (never the files a card names), as `datasets` loads
    them; an empty table with its columns when they hold no rows."""
    import datasets

    empty = _no_rows(source, config, shards, split)
    if empty is not None:
        return empty
    files = {SHARD_NAME.match(shards[0].name)["prefix"]: [str(f) for f in shards]}
    return datasets.load_dataset("parquet", data_files=files, split=split,
                                 **{"fragment_scan_options": dict(VERIFY_PAGES), **kwargs})


def load_table(source: str, config: str, split: str | None = None, **kwargs):
    """A datasets.Dataset (the one split, or the table's only split) of `config` from `source`."""
    import datasets

    config = ALIASES.get(config, config)
    path = Path(source)
    table = local_table(source, config)
    if table is not None:
        loaded = _load_shards(source, config, list(table.shards), split, kwargs)
    elif path.exists():
        raise PublishError(f"{source}: neither a published folder (README.md with configs) nor a run folder "
                           f"(report.json)")
    else:
        loaded = datasets.load_dataset(source, config, split=split, **kwargs)
    if split is None and isinstance(loaded, datasets.DatasetDict) and len(loaded) == 1:
        return next(iter(loaded.values()))
    return loaded
