"""The strict REPLACE view: every substitution of the paper's table (c -> c_p) read blind in context, per pair.

    python benchmarks/replace_strict.py --sheet /tmp/strict_sheet.jsonl [--replace_dir DIR]
    python benchmarks/replace_strict.py --labels          # judged/replace_strict_reader*.jsonl -> the data file

1. --sheet: builds the REPLACE table from the real VL-CheckList files (or reads --replace_dir), draws ROWS_PER_PAIR
   rows of every table entry (subset, category, from, to) with random.Random(SEED), mixes in CONTROLS rows whose
   rewrite is the row's hard negative (a strict reader rejects them), shuffles, and writes what a blind reader sees:
   an id, the caption and the rewrite; nothing of the pair, the category or which rows are controls. The key
   (DIR/sheet.key.jsonl) maps the ids back.
2. --labels: from the judged files (one per reader, the key's rows with the reader's fluent / same_meaning /
   minimal), per table entry: the rows read, the share each reader judged true, and the verdict: a pair is a true
   hard positive when every reader judged at least TRUE_SHARE of its rows true. Writes
   pipeline/train/suites/data/replace_strict_pairs.json, which the evaluator's strict view reads.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
JUDGED = REPO / "benchmarks" / "judged"
LABELS_FILE = REPO / "pipeline" / "train" / "suites" / "data" / "replace_strict_pairs.json"
TABLE_FILE = REPO / "pipeline" / "perturb" / "data" / "replace_table.json"
SEED, ROWS_PER_PAIR, CONTROLS = 2033, 12, 40
LABELS = ("fluent", "same_meaning", "minimal")
TRUE_SHARE = 0.8


def build_replace(root: str, out: str) -> None:
    cmd = [sys.executable, "-m", "pipeline.run", "--stage=eval_sets", "--runner=DirectRunner",
           f"--vl_checklist_root={root}", f"--output_dir={out}", "--progress_seconds=0"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"eval_sets failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def replace_rows(replace_dir: str) -> list[dict]:
    return [r for p in sorted(glob.glob(os.path.join(replace_dir, "replace", "*.parquet")))
            for r in pq.read_table(p).to_pylist()]


def entry(row: dict) -> tuple[str, str, str, str]:
    return row["subset"], row["category"], row["replaced_from"], row["replaced_to"]


def write_sheet(rows: list[dict], sheet: str) -> None:
    rng = random.Random(SEED)
    by_entry = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["example_id"]):
        by_entry[entry(r)].append(r)
    picked = []
    for key in sorted(by_entry):
        for r in rng.sample(by_entry[key], min(ROWS_PER_PAIR, len(by_entry[key]))):
            picked.append({"kind": "pair", "subset": key[0], "category": key[1], "from": key[2], "to": key[3],
                           "example_id": r["example_id"], "caption": r["caption"], "rewrite": r["hard_positive"]})
    taken = {p["example_id"] for p in picked}
    rest = [r for r in sorted(rows, key=lambda r: r["example_id"]) if r["example_id"] not in taken]
    for r in rng.sample(rest, CONTROLS):
        picked.append({"kind": "control_negative", "subset": r["subset"], "category": r["category"],
                       "from": r["replaced_from"], "to": r["replaced_to"], "example_id": r["example_id"],
                       "caption": r["caption"], "rewrite": r["hard_negative"]})
    order = list(range(len(picked)))
    rng.shuffle(order)
    with open(sheet, "w", encoding="utf-8") as f:
        for sheet_id, k in enumerate(order):
            f.write(json.dumps({"id": sheet_id, "caption": picked[k]["caption"], "rewrite": picked[k]["rewrite"]},
                               ensure_ascii=False) + "\n")
    with open(sheet + ".key.jsonl", "w", encoding="utf-8") as f:
        for sheet_id, k in enumerate(order):
            f.write(json.dumps({"id": sheet_id, **picked[k]}, ensure_ascii=False) + "\n")
    print(f"wrote {len(picked)} rows ({len(picked) - CONTROLS} of {len(by_entry)} table entries, {CONTROLS} controls)"
          f" to {sheet}; key {sheet}.key.jsonl")


def is_true(row: dict) -> bool:
    return all(row[label] for label in LABELS)


def read_labels() -> dict:
    readers = {}
    for path in sorted(JUDGED.glob("replace_strict_reader*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        readers[path.stem.rsplit("_", 1)[-1]] = rows
    if len(readers) < 2:
        sys.exit(f"need two readers' files in {JUDGED} (replace_strict_reader*.jsonl), found {len(readers)}")
    pairs: dict[tuple, dict] = {}
    print(f"{'subset/category':<20} {'from -> to':<30} " + " ".join(f"{n:>9}" for n in readers) + "  verdict")
    for name, rows in readers.items():
        controls = [r for r in rows if r["kind"] == "control_negative"]
        print(f"{name}: controls judged true {sum(map(is_true, controls))} of {len(controls)}")
        for r in rows:
            if r["kind"] != "pair":
                continue
            key = (r["subset"], r["category"], r["from"], r["to"])
            shares = pairs.setdefault(key, {})
            read, true = shares.get(name, (0, 0))
            shares[name] = (read + 1, true + is_true(r))
    out = []
    for key in sorted(pairs):
        shares = pairs[key]
        verdict = all(true / read >= TRUE_SHARE for read, true in shares.values())
        out.append({"subset": key[0], "category": key[1], "from": key[2], "to": key[3],
                    "rows_read": min(read for read, _ in shares.values()),
                    "true_share": {n: round(true / read, 3) for n, (read, true) in shares.items()},
                    "true_hard_positive": verdict})
        print(f"{key[0] + '/' + key[1]:<20} {key[2] + ' -> ' + key[3]:<30} " +
              " ".join(f"{true:>3}/{read:<5}" for read, true in shares.values()) + f"  {'TRUE' if verdict else 'no'}")
    return {"pairs": out, "readers": sorted(readers)}


def write_labels(labels: dict) -> None:
    table_sha = hashlib.sha256(TABLE_FILE.read_bytes()).hexdigest()
    data = {
        "name": "REPLACE strict view: per-pair blind verdicts",
        "version": 1,
        "comment": ("Every entry of the paper's REPLACE table (pipeline/perturb/data/replace_table.json) read blind in "
                    f"context: {ROWS_PER_PAIR} rows per entry drawn with random.Random({SEED}) from the REPLACE set "
                    "built on the real VL-CheckList VG files, shuffled with hard negatives as controls, each read by "
                    "two readers who saw only the caption and the rewrite. A row is true when fluent, meaning the same "
                    "for any photo, and one minimal change. An entry is a true hard positive when every reader judged "
                    f"at least {TRUE_SHARE:.0%} of its rows true. The judged rows: "
                    "benchmarks/judged/replace_strict_reader*.jsonl; made by benchmarks/replace_strict.py --labels."),
        "table_sha256": table_sha,
        "true_share_needed": TRUE_SHARE,
        "readers": labels["readers"],
        "pairs": labels["pairs"],
    }
    LABELS_FILE.parent.mkdir(parents=True, exist_ok=True)
    LABELS_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    kept = sum(p["true_hard_positive"] for p in labels["pairs"])
    print(f"wrote {LABELS_FILE.relative_to(REPO)}: {kept} of {len(labels['pairs'])} entries true hard positives")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vl_checklist_root", default=str(REPO.parent / "shared/data/vl_checklist"))
    parser.add_argument("--replace_dir", default=None, help="an eval_sets output folder to read instead of building")
    parser.add_argument("--sheet", default=None, help="write the blind sheet here")
    parser.add_argument("--labels", action="store_true", help="compute the per-pair verdicts from the judged files")
    args = parser.parse_args()
    if args.sheet:
        replace_dir = args.replace_dir
        if replace_dir is None:
            replace_dir = "/tmp/replace_strict_build"
            build_replace(args.vl_checklist_root, replace_dir)
        write_sheet(replace_rows(replace_dir), args.sheet)
    if args.labels:
        write_labels(read_labels())


if __name__ == "__main__":
    main()
