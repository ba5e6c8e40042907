"""REPLACE three ways: which scored REPLACE rows each view keeps, and what it was filtered against.

- released: every row.
- held_out: the rows whose substitution (replaced_from -> replaced_to) the finetuning data never used. A model
  finetuned on captions rewritten with the very substitutions REPLACE tests (sitting -> seated, ...) can gain on
  REPLACE by learning those word pairs, which says nothing of composition. The finetuning substitutions come from
  --finetune_table (the train table's shards: each row's caption -> hard_positive changed span), from
  --finetune_substitutions (a file of `old -> new` lines), or else from the train table a checkpoint of our
  finetune run records it read. Compared as pipeline.perturb.substitution keys, in either direction, so
  "sits -> is seated" in training reaches the REPLACE entry "sitting -> seated".
- strict: the rows of the table entries (subset, category, from, to) a blind read judged true hard positives
  (data/replace_strict_pairs.json, made by benchmarks/replace_strict.py); marked stale when the table it read is
  not the one the rows were built from.

The views are row filters: evaluate.py computes each view's figures with the same figures() over the rows kept.
Plain Python and pyarrow (torch only to read what a checkpoint records), so the evaluator needs no Beam or spaCy.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pipeline.folder_lock import kernel_file
from pipeline.perturb import substitution
from pipeline.tables.folders import PublishError
from pipeline.train.clip import UsageError

STRICT_PAIRS = Path(__file__).resolve().parent / "suites" / "data" / "replace_strict_pairs.json"
MAX_SUBSTITUTION_BYTES = 64 << 20
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class View:
    """A row filter, or None with the reason it could not be built; `info` says what it filtered against."""
    keep: Callable[[dict], bool] | None
    info: dict = field(default_factory=dict)


RELEASED = View(lambda row: True)


def _shown(path: Path) -> str:
    """A path as the results name it: relative to the repository when inside it (same on every machine)."""
    path = Path(path).resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------- held out

def read_substitution_file(path: str) -> list[tuple[str, str]]:
    """The `old -> new` lines of --finetune_substitutions (text after # is a comment; blank lines skipped)."""
    try:
        found = Path(path).stat()
        if not stat.S_ISREG(found.st_mode):  # a FIFO or /dev/zero would never end
            raise UsageError(f"--finetune_substitutions: {path} is not a regular file")
        if kernel_file(path):
            raise UsageError(f"--finetune_substitutions: {path} is a file of the kernel's ({os.path.realpath(path)}), "
                             f"not a list of substitutions")
        if found.st_size > MAX_SUBSTITUTION_BYTES:
            raise UsageError(f"--finetune_substitutions: {path} has {found.st_size:,} bytes, more than "
                             f"{MAX_SUBSTITUTION_BYTES:,} (a list of `old -> new` lines)")
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as e:
        raise UsageError(f"--finetune_substitutions: cannot read {path} ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--finetune_substitutions: {path} is not UTF-8 text (byte {e.start:,} is "
                         f"{e.object[e.start:e.start + 1]!r})") from None
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        old, arrow, new = (part.strip() for part in line.partition("->"))
        if not (arrow and old and new):
            shown = f"{line[:80]!r}{'...' if len(line) > 80 else ''}"
            raise UsageError(f"--finetune_substitutions: {path}:{number}: {shown} is not `old -> new`")
        pairs.append((old, new))
    return pairs


def train_table(location: str, verify: bool = True):
    """(the train table's Parquet shards as ShardRefs, which read_shard reads through no link and checks against
    the recorded sha256 as it reads them; its LocalTable when a report or manifest records it, else None), checked as
    load_table checks them: a run folder or a published folder, or a table's own folder in one (<run>/train,
    <published>/data/train), gives exactly the shards its report.json or manifest lists, no link, each with its
    recorded sha256 (hashed unless verify is False); a glob gives the files it matches, each of which that lies in
    such a table's folder must be one listed there, with its sha256; a folder of a user's own shards (nothing
    recorded) gives its Parquet files, or those of its train/ or data/train/. PublishError (one line) when the
    table does not check."""
    from pipeline.tables.load import ShardRef, check_recorded_shard, local_table, table_folder_of

    path = Path(location)
    if ".." in path.parts:  # <hub>/data/train/../train would read as a user's own folder, its shards unchecked
        raise PublishError(f"{location}: name the train table without '..'")
    if path.is_dir():
        table = local_table(path, "train", verify)
        if table is None:
            where = table_folder_of(path)
            if where is not None and where[1] != "train":
                raise PublishError(f"{location}: the folder of table {where[1]} in {where[0]}, not of its train "
                                   f"table: name the train table (the run or published folder, or its train folder)")
            table = local_table(*where, verify) if where is not None else None
        if table is not None:
            return table.refs(), table
        shards = next((found for found in (sorted(str(p) for p in folder.glob("*.parquet"))
                                            for folder in (path, path / "train", path / "data" / "train")) if found),
                      [])
    else:
        shards = sorted(p for p in glob.glob(location) if p.endswith(".parquet") and Path(p).is_file())
    refs = []
    for shard in shards:
        recorded = check_recorded_shard(shard, verify, "train")
        refs.append(recorded or ShardRef(str(Path(shard).parent), shard))
    return tuple(refs), None


def train_shards(location: str) -> tuple:
    """The train table's Parquet shards (train_table's ShardRefs, their sha256 not read)."""
    return train_table(location, verify=False)[0]


@cache
def table_substitutions(shards: tuple, positive_types: frozenset | None = None,
                        negative_types: frozenset | None = None) -> frozenset[tuple[str, str]]:
    """Every caption -> hard_positive changed span of the shards' rows (those of the type filters when given), the
    ShardRefs train_table checked, read from bytes checked again as they are read (read_shard). Cached: a
    multi-model run reads the table once. ValueError (one line) for an unreadable shard."""
    import pyarrow as pa

    from pipeline.tables.load import read_shard

    wanted = {"positive_type": positive_types, "negative_type": negative_types}
    columns = ["caption", "hard_positive"] + [c for c, types in wanted.items() if types is not None]
    spans = set()
    for ref in shards:
        shard = ref.path
        try:
            full = read_shard(ref)
            schema = full.schema
            odd = next((c for c in columns if c not in schema.names or not
                        (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type))),
                       None)
            if odd is not None:  # the texts are compared as text: an int or a list is another table
                found = f"is {schema.field(odd).type}" if odd in schema.names else "is missing"
                raise ValueError(f"column {odd} {found}, not text: not a hardpos train table")
            table = full.select(columns).to_pydict()
        except PublishError:
            raise  # it names the shard
        except (OSError, pa.ArrowException) as e:
            raise ValueError(f"{shard}: {str(e).splitlines()[0]}") from None
        except ValueError as e:
            raise ValueError(f"{shard}: {e}") from None
        for k, (caption, positive) in enumerate(zip(table["caption"], table["hard_positive"], strict=True)):
            if caption and positive and all(types is None or table[c][k] in types for c, types in wanted.items()):
                span = substitution.changed_span(caption, positive)
                if span:
                    spans.add(span)
    return frozenset(spans)


def recorded_train_table(pretrained: str | None) -> tuple[str, dict, dict, str] | str:
    """(the train table folder, the finetune run's args, the train table's record {data, fingerprint, shards}, the
    checkpoint that holds them) that a checkpoint of ours records it was trained on (a WiSE-FT patched checkpoint:
    its finetuned checkpoint's), or why there is none here."""
    if not pretrained or not Path(pretrained).is_file():
        return f"--pretrained={pretrained or '(random init)'} is not a checkpoint file that records its train table"
    from pipeline.train.clip import CheckpointError, load_checkpoint_file

    path = pretrained
    for _ in range(2):  # a patched checkpoint names the finetuned one, which holds the run's args
        try:  # mmap: only the pickled metadata is read, not the weights
            state = load_checkpoint_file(path, mmap=True)
        except (CheckpointError, OSError) as e:
            return str(e)
        if not isinstance(state, dict) or "finetuned" not in state or "args" in state:
            break
        path = state["finetuned"]
        if not isinstance(path, str) or not Path(path).is_file():
            return f"the finetuned checkpoint {path} that {pretrained} was patched from is not here"
    args = state.get("args") if isinstance(state, dict) else None
    if not isinstance(args, dict) or not args.get("data"):
        return f"checkpoint {path} records no train table (not a checkpoint of pipeline.train.finetune)"
    if not Path(args["data"]).is_dir():
        return (f"the train table checkpoint {path} records, {args['data']}, is not a folder here (a Hub repo is "
                f"not downloaded for this: give --finetune_table)")
    record = state.get("train_table")
    return args["data"], args, record if isinstance(record, dict) else {}, path


def check_flags(finetune_table: str | None, finetune_substitutions: str | None) -> None:
    """Fail fast, before any model loads: --finetune_table names shards that check against their report or
    manifest (their sha256 is read by held_out), --finetune_substitutions parses."""
    if finetune_table:
        try:
            shards = train_shards(finetune_table)
        except PublishError as e:
            raise UsageError(f"--finetune_table: {e}") from None
        if not shards:
            raise UsageError(f"--finetune_table: no Parquet shard at {finetune_table}")
    if finetune_substitutions:
        read_substitution_file(finetune_substitutions)


def _trained_on(folder: str, record: dict, path: str, table) -> str | None:
    """Why the train table now at folder cannot be taken for the one checkpoint `path` was trained on (None when
    its fingerprint is the one the checkpoint recorded)."""
    recorded = record.get("fingerprint")
    if not isinstance(recorded, str) or not recorded:
        return (f"checkpoint {path} records no fingerprint of its train table {folder} (written before hardpos "
                f"recorded one, or trained from the Hub), so that this is the table it was trained on cannot be "
                f"checked: give --finetune_table")
    now = table.fingerprint if table is not None else None
    if now != recorded:
        found = f"its shards' fingerprint is {now[:12]}…" if now else "no report.json or manifest records its shards"
        return (f"{folder} is not the train table checkpoint {path} was trained on ({found}, the checkpoint "
                f"recorded {recorded[:12]}…): give --finetune_table with the table it was trained on")
    return None


def held_out(finetune_table: str | None, finetune_substitutions: str | None, pretrained: str | None) -> View:
    """The held_out view from the flags, else from what the checkpoint records (only when the table there is the
    one it was trained on: its fingerprint); keep=None (with the reason) when there is no source. A bad flag is a
    UsageError naming it."""
    from pipeline.train.data import type_filter

    check_flags(finetune_table, finetune_substitutions)
    pairs, sources = set(), []
    if finetune_table:
        try:
            shards, _ = train_table(finetune_table)
            pairs |= table_substitutions(tuple(shards))
        except ValueError as e:  # PublishError too
            raise UsageError(f"--finetune_table: {e}") from None
        sources.append(f"--finetune_table={finetune_table} ({len(shards)} shards)")
    if finetune_substitutions:
        pairs |= set(read_substitution_file(finetune_substitutions))
        sources.append(f"--finetune_substitutions={finetune_substitutions}")
    if not sources:
        recorded = recorded_train_table(pretrained)
        if isinstance(recorded, str):
            return View(None, {"reason": f"no finetuning substitutions: --finetune_table and "
                                         f"--finetune_substitutions not given, and {recorded}"})
        folder, args, record, path = recorded
        try:
            shards, table = train_table(folder)
        except PublishError as e:
            return View(None, {"reason": f"the train table the checkpoint records does not check: {e}"})
        if not shards:
            return View(None, {"reason": f"no Parquet shard in {folder}, the train table the checkpoint records"})
        stale = _trained_on(folder, record, path, table)
        if stale:
            return View(None, {"reason": stale})
        filters = [type_filter(f"--{name}", args.get(name) or "all") for name in ("positive_types", "negative_types")]
        try:
            pairs |= table_substitutions(tuple(shards), *(None if f is None else frozenset(f) for f in filters))
        except ValueError as e:
            return View(None, {"reason": f"the train table the checkpoint records is unreadable: {e}"})
        types = ", ".join(f"{n}={args.get(n) or 'all'}" for n in ("positive_types", "negative_types"))
        sources.append(f"the train table the checkpoint records: {folder} ({len(shards)} shards, the ones it was "
                       f"trained on; {types})")
    keys = substitution.either_way(pairs)
    return View(lambda row: substitution.key(row["replaced_from"], row["replaced_to"]) not in keys,
                {"source": "; ".join(sources), "substitutions": len(pairs)})


# --------------------------------------------------------------------------------------------------- strict

def strict(row_table_sha256: list[str] = (), pairs_path: Path | None = None,
           table_path: Path | None = None) -> View:
    """The strict view: rows of the entries judged true (pairs_path, default STRICT_PAIRS). Stale (still
    computed) when the read's table_sha256 is not the sha256 of the REPLACE table file (table_path, default the
    one eval_sets reads), or not the one the evaluated rows record."""
    pairs_path, table_path = pairs_path or STRICT_PAIRS, table_path or substitution.REPLACE_TABLE
    read = json.loads(Path(pairs_path).read_text(encoding="utf-8"))
    entries = frozenset((p["subset"], p["category"], p["from"], p["to"]) for p in read["pairs"]
                        if p["true_hard_positive"])
    read_sha, table_sha = read["table_sha256"], _sha256(table_path)
    stale = []
    if read_sha != table_sha:
        stale.append(f"its table_sha256 {read_sha[:12]}… is not the sha256 of {_shown(table_path)} "
                     f"({table_sha[:12]}…)")
    other = sorted(set(row_table_sha256) - {read_sha})
    if other:
        shas = ", ".join(f"{sha[:12]}…" for sha in other)
        stale.append(f"the REPLACE rows were built from another table (sha256 {shas})")
    info = {"pairs_file": _shown(pairs_path), "entries_read": len(read["pairs"]), "true_entries": len(entries),
            "table_sha256": read_sha, "replace_table": _shown(table_path), "replace_table_sha256": table_sha,
            "table_sha256_matches": read_sha == table_sha, "stale": bool(stale),
            "stale_reason": "; ".join(stale) or None}
    return View(lambda row: (row["subset"], row["category"], row["replaced_from"], row["replaced_to"]) in entries,
                info)


def compute(records: list[dict], views: dict[str, View], figures_of: Callable[[list[dict]], dict]) -> dict:
    """view -> its status, the rows it keeps of the scored REPLACE rows, what it filtered against and
    figures_of(the rows kept); held_out also lists the REPLACE pairs it left out."""
    replace = [r for r in records if r["table"] == "replace_eval"]
    out = {}
    for name, view in views.items():
        if view.keep is None:
            out[name] = {"status": "not_computed", "of": len(replace), **view.info}
            continue
        kept = [r for r in replace if view.keep(r)]
        out[name] = {"status": "ok", "rows": len(kept), "of": len(replace), **view.info, **figures_of(kept)}
        if name == "held_out":
            out[name]["left_out"] = sorted({f"{r['replaced_from']} -> {r['replaced_to']}" for r in replace
                                            if not view.keep(r)})
    return out


def notes(replace_views: dict) -> list[str]:
    """One line per view that is not plain: what held_out was filtered against (or why it was not computed),
    what strict read and whether its table matches."""
    lines = []
    h = replace_views["held_out"]
    if h["status"] == "ok":
        lines.append(f"held_out: rows whose substitution is none of the {h['substitutions']:,} substitutions of "
                     f"{h['source']}, either direction; left out: {', '.join(h['left_out']) or 'none'}")
    else:
        lines.append(f"held_out: not computed: {h['reason']}")
    s = replace_views["strict"]
    check = (f"STALE: {s['stale_reason']}" if s["stale"] else
             f"its table_sha256 matches {s['replace_table']}")
    lines.append(f"strict: the {s['true_entries']} of {s['entries_read']} REPLACE table entries a blind read judged "
                 f"true hard positives ({s['pairs_file']}); {check}")
    return lines
