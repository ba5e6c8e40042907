"""Getting a table back: `load_table(source, config)` for a Hub repository, a published folder, or a run's
output folder, so the trainer and evaluator read all three the same way.

    from pipeline.publish.load import load_table
    train = load_table("ORG/NAME", "train")             # the Hub (datasets.load_dataset(repo, config))
    train = load_table("out/release/hub", "train")      # a published folder (same resolution as the Hub)
    train = load_table("out/sample", "replace_eval")    # a run folder (report.json + Parquet tables)
"""
from __future__ import annotations

from pathlib import Path

from pipeline.publish.layout import PublishError, find_reports, find_tables

# Table folder names of a run (eval_sets writes replace/ and swap/) -> config names.
ALIASES = {"replace": "replace_eval", "swap": "swap_eval"}


def _is_card_folder(path: Path) -> bool:
    card = path / "README.md"
    return card.is_file() and "\nconfigs:" in card.read_text(encoding="utf-8").split("\n---", 1)[0]


def load_table(source: str, config: str, split: str | None = None, **kwargs):
    """A datasets.Dataset (the one split, or the table's only split) of `config` from `source`."""
    import datasets

    config = ALIASES.get(config, config)
    path = Path(source)
    if path.is_dir() and _is_card_folder(path):
        loaded = datasets.load_dataset(str(path), config, split=split, **kwargs)
    elif path.is_dir() and find_reports(path):
        tables = {t.config: t for t in find_tables(path)}
        if config not in tables:
            raise PublishError(f"{source}: no table {config}; found {', '.join(sorted(tables))}")
        table = tables[config]
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
