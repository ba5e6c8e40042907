"""Getting a table back: `load_table(source, config)` for a Hub repository, a published folder, or a run's
output folder, so the trainer and evaluator read all three the same way.

    from pipeline.publish.load import load_table
    train = load_table("ORG/NAME", "train")             # the Hub (datasets.load_dataset(repo, config))
    train = load_table("out/release/hub", "train")      # a published folder (same resolution as the Hub)
    train = load_table("out/sample", "replace_eval")    # a run folder (report.json + Parquet tables)
"""
from __future__ import annotations

import json
from pathlib import Path

from pipeline.io.parquet import file_sha256
from pipeline.publish.layout import (
    MANIFEST,
    PublishError,
    check_checksums,
    find_reports,
    find_tables,
    is_published_folder,
)

# Table folder names of a run (eval_sets writes replace/ and swap/) -> config names.
ALIASES = {"replace": "replace_eval", "swap": "swap_eval"}


def check_published(folder: Path, config: str) -> None:
    """The config's shards in a published folder are the ones its manifest lists, with their sha256."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return  # published before manifests: nothing recorded to check against
    listed = {path: entry for path, entry in json.loads(manifest_path.read_text(encoding="utf-8"))["files"].items()
              if path.startswith(f"data/{config}/")}
    on_disk = {p.relative_to(folder).as_posix() for p in (folder / "data" / config).glob("*.parquet")}
    if on_disk != set(listed):
        which = sorted(on_disk ^ set(listed))[0]
        raise PublishError(f"{folder}: {which} is {'not in' if which in on_disk else 'missing, though listed in'} "
                           f"{MANIFEST}; publish again")
    for path, entry in sorted(listed.items()):
        if file_sha256(str(folder / path)) != entry["sha256"]:
            raise PublishError(f"{folder / path}: its sha256 differs from the one {MANIFEST} recorded (the file "
                               f"changed or is damaged); publish again")


def load_table(source: str, config: str, split: str | None = None, **kwargs):
    """A datasets.Dataset (the one split, or the table's only split) of `config` from `source`."""
    import datasets

    config = ALIASES.get(config, config)
    path = Path(source)
    if path.is_dir() and is_published_folder(path):
        check_published(path, config)
        loaded = datasets.load_dataset(str(path), config, split=split, **kwargs)
    elif path.is_dir() and find_reports(path):
        # The table's shards must match the row counts and sha256 of its report; another run still going on in
        # the folder does not stop this table from loading.
        tables = {t.config: t for t in find_tables(path, verify=False, allow_partial=True)}
        if config not in tables:
            raise PublishError(f"{source}: no table {config}; found {', '.join(sorted(tables))}")
        table = tables[config]
        check_checksums(table.run_dir, table.section, table.files)
        files = {table.split: [str(f) for f in table.files]}
        loaded = datasets.load_dataset("parquet", data_files=files, split=split, **kwargs)
    elif path.exists():
        raise PublishError(f"{source}: neither a published folder (README.md with configs) nor a run folder "
                           f"(report.json)")
    else:
        loaded = datasets.load_dataset(source, config, split=split, **kwargs)
    if split is None and isinstance(loaded, datasets.DatasetDict) and len(loaded) == 1:
        return next(iter(loaded.values()))
    return loaded
