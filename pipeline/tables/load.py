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

from pathlib import Path

import pyarrow.parquet as pq

from pipeline.tables.folders import (
    MANIFEST,
    NEXT,
    PublishError,
    changed_file,
    check_checksums,
    find_reports,
    find_tables,
    is_published_folder,
    read_manifest,
)
from pipeline.tables.shards import SHARD_NAME, VERIFY_PAGES, file_sha256

# Table folder names of a run (eval_sets writes replace/ and swap/) -> config names.
ALIASES = {"replace": "replace_eval", "swap": "swap_eval"}


def check_published(folder: Path, config: str) -> list[Path]:
    """The config's shards in a published folder, checked: exactly the ones its manifest lists, with their sha256,
    and the card the manifest lists (a card edited to name other files is refused, though load_table reads the
    shards it checked, never the files a card names). PublishError (one line) otherwise, or when the manifest is
    unreadable or a publish into the folder was cut off. A folder with no manifest (a download of the Hub
    repository) has nothing recorded to check against."""
    shards = sorted((folder / "data" / config).glob("*.parquet"))
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
        if not (folder / path).is_file() or file_sha256(str(folder / path)) != entry["sha256"]:
            raise changed_file(folder / path, MANIFEST, "publish again")
    return shards


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
    if path.is_dir() and is_published_folder(path):
        shards = check_published(path, config)
        if not shards:
            raise PublishError(f"{source}: no config {config} (no data/{config}/*.parquet)")
        loaded = _load_shards(source, config, shards, split, kwargs)
    elif path.is_dir() and find_reports(path):
        # The table's shards must match the row counts and sha256 of its report; another run still going on in
        # the folder does not stop this table from loading.
        tables = {t.config: t for t in find_tables(path, verify=False, allow_partial=True, keep_empty=True)}
        if config not in tables:
            raise PublishError(f"{source}: no table {config}; found {', '.join(sorted(tables))}")
        table = tables[config]
        check_checksums(table.run_dir, table.section, table.files)
        loaded = _load_shards(source, config, list(table.files), split, kwargs)
    elif path.exists():
        raise PublishError(f"{source}: neither a published folder (README.md with configs) nor a run folder "
                           f"(report.json)")
    else:
        loaded = datasets.load_dataset(source, config, split=split, **kwargs)
    if split is None and isinstance(loaded, datasets.DatasetDict) and len(loaded) == 1:
        return next(iter(loaded.values()))
    return loaded
