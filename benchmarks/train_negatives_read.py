"""The training set's negatives as the train table uses them, read blind; and its text-only figures. Prints figures.

    python benchmarks/train_negatives_read.py [--captions ../shared/data/coco/captions_val2017.json]
        [--output_dir /tmp/train_triples] [--skip_run] [--sheet FILE] [--per_type 120]

1. Runs `--stage=all` with its defaults on the whole captions file.
2. The train table's triples: how many negatives were made from the positive (the caption's negative carried over to
   it), how many have the positive's very words (only the structure differs), how each was picked, and the text-only
   figures (P vs N, C vs P, C vs N) overall and per negative source.
3. --sheet: per negative type the train table uses, the first --per_type rows (every row, for a type with fewer) of
   captions drawn with random.Random(--sample_seed) among those no file in benchmarks/judged/ holds, each shown as
   the text the negative is a change of (the positive where negative_source is hard_positive, else the caption)
   and the negative; a type the train table holds too few of (exchange) is made up to --per_type with the
   caption's own negatives of the type (train_negatives, as written, any rank); with --calibration_dir, also
   CALIBRATION train rows of another version's run; shuffled with CONTROLS rule hard positives of other captions
   (true rewrites: a strict reader finds they do not contradict). The key (types, ids) goes beside the sheet,
   never to a reader.
4. The blind reads, benchmarks/judged/train_negatives_round*_reader*.jsonl: per reader and type, the share read as
   fluent (natural English), contradicts (a different scene: false of any photo the text describes; a paraphrase, a
   near-synonym or an impossible scene fails), minimal (one small change); valid = all three. Target 80% per type.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.rule_positives import run_stage, table_rows  # noqa: E402  (`--stage=all` with its defaults)
from pipeline.checks import separability  # noqa: E402

JUDGED = REPO / "benchmarks" / "judged"
SAMPLE_SEED, PER_TYPE, CONTROLS, CALIBRATION = 2041, 120, 30, 60
LABELS = ("fluent", "contradicts", "minimal")
TARGET = 0.80


def scores(rows: list[dict]) -> dict[str, float]:
    """The report's classifier (pipeline/checks/separability.py) on these rows alone."""
    counts = separability.WordCounts(0)
    for row in rows:
        counts = counts.add(row)
    model, outcomes = counts.model(), Counter()
    for row in rows:
        outcomes.update(model.outcomes(row).items())
    return {name: (outcomes[(name, "correct")] + outcomes[(name, "tie")] / 2) / len(rows)
            for name in separability.COMPARISONS}


def triple_figures(output_dir: str, train: list[dict]) -> None:
    section = json.loads(Path(output_dir, "report.json").read_text())["tables"]["train"]
    triples = section["triples"]
    rows, read = section["rows"], section["read"]
    print(f"train: {rows:,} triples of {read:,} captions ({rows / read:.1%})")
    print(f"  negative made from the positive: {triples['negative_from_positive']:,} "
          f"({triples['share_negative_from_positive']:.1%}); the positive's very words (structure only): "
          f"{triples['same_words']:,} ({triples['share_same_words']:.2%}); picked: {triples['picked']}")
    print(f"  {'rows':<28} {'n':>7} {'P vs N':>7} {'C vs P':>7} {'C vs N':>7}")
    groups = {"all": train}
    for key in ("negative_source", "negative_type", "positive_type"):
        for value in sorted({r[key] for r in train}):
            groups[f"{key}={value}"] = [r for r in train if r[key] == value]
    for name, rows in groups.items():
        s = scores(rows)
        print(f"  {name:<28} {len(rows):>7,} " + " ".join(f"{s[k]:>7.1%}" for k in separability.COMPARISONS))


def judged_before() -> set[int]:
    """Caption ids of every row any earlier read judged."""
    ids = set()
    for path in JUDGED.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row.get("caption_id") is not None:
                    ids.add(row["caption_id"])
    return ids


def sample(train: list[dict], negatives: list[dict], positives: list[dict], seed: int, per_type: int,
           calibration: list[dict] | None = None) -> list[dict]:
    seen = judged_before()
    fresh = [r for r in train if r["caption_id"] not in seen]
    random.Random(seed).shuffle(fresh)
    picked = []
    for t in sorted({r["negative_type"] for r in train}):
        of_type = [r for r in fresh if r["negative_type"] == t][:per_type]
        picked += [{"kind": t, "negative_source": r["negative_source"], "positive_type": r["positive_type"],
                    "caption_id": r["caption_id"], "caption": r["caption"],
                    "text": r["hard_positive"] if r["negative_source"] == "hard_positive" else r["caption"],
                    "negative": r["hard_negative"]} for r in of_type]
    taken = {r["caption_id"] for r in picked} | seen
    # the train table carries few exchanges: the caption's own exchanges (negatives table, as written, any rank, of
    # captions an earlier read may have judged for another negative) make the read of the type up to per_type rows,
    # reported apart
    picked_ids = {r["caption_id"] for r in picked}
    exchanges = [r for r in negatives if r["negative_type"] == "exchange" and r["caption_id"] not in picked_ids]
    random.Random(seed + 3).shuffle(exchanges)
    missing = per_type - sum(r["kind"] == "exchange" for r in picked)
    picked += [{"kind": "exchange", "negative_source": "negatives_table", "positive_type": None,
                "caption_id": r["caption_id"], "caption": r["caption"], "text": r["caption"],
                "negative": r["hard_negative"]} for r in exchanges[:max(missing, 0)]]
    taken |= {r["caption_id"] for r in picked}
    if calibration:  # another version's train negatives, as its table holds them (the reader's calibration)
        earlier = [r for r in calibration if r["caption_id"] not in taken]
        random.Random(seed + 4).shuffle(earlier)
        picked += [{"kind": f"{r['negative_type']}_calibration", "negative_source": "caption",
                    "positive_type": r["positive_type"], "caption_id": r["caption_id"], "caption": r["caption"],
                    "text": r["caption"], "negative": r["hard_negative"]} for r in earlier[:CALIBRATION]]
        taken |= {r["caption_id"] for r in picked}
    others = [r for r in positives if r["caption_id"] not in taken]
    for r in random.Random(seed + 1).sample(others, CONTROLS):
        picked.append({"kind": "control_positive", "negative_source": None, "positive_type": r["positive_type"],
                       "caption_id": r["caption_id"], "caption": r["caption"], "text": r["caption"],
                       "negative": r["hard_positive"]})
    return picked


def write_sheet(path: str, rows: list[dict], seed: int) -> None:
    """What a blind reader sees: an id, the text and the candidate negative, shuffled; nothing of type or source."""
    order = list(range(len(rows)))
    random.Random(seed + 2).shuffle(order)
    with open(path, "w", encoding="utf-8") as f:
        for k in order:
            f.write(json.dumps({"id": k, "text": rows[k]["text"], "negative": rows[k]["negative"]},
                               ensure_ascii=False) + "\n")
    with open(path + ".key.jsonl", "w", encoding="utf-8") as f:
        for k, r in enumerate(rows):
            f.write(json.dumps({"id": k, **r}, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows for a blind reader to {path} (key: {path}.key.jsonl)")


def read_table(path: Path, current: set[tuple[int, str]]) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows or any(r.get(label) is None for r in rows for label in LABELS):
        print(f"{path.name}: not read yet")
        return
    read = [r for r in rows if r["kind"] != "control_positive"]
    kept = [r for r in read if (r["caption_id"], r["negative"]) in current]
    print(f"{path.name} ({rows[0].get('reader', 'reader')}; the train table still holds {len(kept)} of its "
          f"{len(read)} negatives):")
    print(f"  {'kind':<32} {'rows':>5} {'fluent':>7} {'contra':>7} {'minimal':>8} {'valid':>7}")
    groups = {}
    for r in rows:
        groups.setdefault(r["kind"], []).append(r)
        if r["kind"] != "control_positive":
            groups.setdefault(f"{r['kind']} from {r['negative_source']}", []).append(r)
    for kind in sorted(groups):
        of_kind = groups[kind]
        shares = [sum(r[label] for r in of_kind) / len(of_kind) for label in LABELS]
        valid = sum(all(r[label] for label in LABELS) for r in of_kind) / len(of_kind)
        mark = "" if kind.startswith("control") or " from " in kind or kind.endswith("_calibration") else \
            ("  (target 80%)" if valid >= TARGET else "  (BELOW the 80% target)")
        print(f"  {kind:<32} {len(of_kind):>5} " + " ".join(f"{s:>7.0%}" for s in shares) + f" {valid:>7.0%}{mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--captions", default=str(REPO.parent / "shared/data/coco/captions_val2017.json"))
    parser.add_argument("--output_dir", default="/tmp/train_triples")
    parser.add_argument("--skip_run", action="store_true", help="read an earlier run in --output_dir")
    parser.add_argument("--sheet", default=None, help="write the rows to read, shuffled, for a blind reader")
    parser.add_argument("--sample_seed", type=int, default=SAMPLE_SEED)
    parser.add_argument("--per_type", type=int, default=PER_TYPE)
    parser.add_argument("--calibration_dir", default=None,
                        help="--sheet: also CALIBRATION train rows of a run made by another version (e.g. before "
                             "this one), as that table holds them, shown alike: how the readers judge it")
    args = parser.parse_args()
    if not args.skip_run:
        run_stage(args.captions, args.output_dir)
    train = table_rows(args.output_dir, "train")
    triple_figures(args.output_dir, train)
    if args.sheet:
        calibration = table_rows(args.calibration_dir, "train") if args.calibration_dir else None
        rows = sample(train, table_rows(args.output_dir, "train_negatives"),
                      table_rows(args.output_dir, "hard_positives"), args.sample_seed, args.per_type, calibration)
        write_sheet(args.sheet, rows, args.sample_seed)
    current = {(r["caption_id"], r["hard_negative"]) for r in train} | \
        {(r["caption_id"], r["hard_negative"]) for r in table_rows(args.output_dir, "train_negatives")}
    for path in sorted(JUDGED.glob("train_negatives_round*_reader*.jsonl")):
        read_table(path, current)


if __name__ == "__main__":
    main()
