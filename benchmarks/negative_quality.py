"""Quality of the training negatives, judged by reading and counted automatically. Prints figures.

    python benchmarks/negative_quality.py [--captions ../shared/data/coco/captions_val2017.json]
        [--output_dir /tmp/negative_quality] [--judged benchmarks/judged/negatives.jsonl] [--skip_run]
        [--ranker ngram]

1. Runs `--stage=train_negatives --negative_types=replace,swap,negclip` on the whole captions file (the corpus
   first pass needs the whole input, as in a real run).
2. Draws the 400 captions of issue 12's blind read: random.Random(7).sample(annotations, 400). For each type,
   the rows of those captions, in the sample's order, up to 100, go to --judged for reading, one JSON line each
   with empty labels: fluent (natural English), contradicts (a different scene: a paraphrase, a near-synonym
   or an impossible scene fails), minimal (one small change). An existing file's labels are kept: a row is
   matched by (negative_type, caption_id, hard_negative); rows no longer emitted are dropped, new ones added.
3. Prints the judged table once labels are filled in (valid = all three), the table of a second reader's blind
   re-read of other captions' rows (--reread) when present, the tables of swap's colour moves read apart
   (--colour_moves and its _reread twin), a blind read of swap's exchanges and negclip on other captions
   (--exchanges), a third and a fourth reader's blind reads of replace (--replace_reread, --replace_reread2), a
   blind read of swap exchanges split by whether the role rule keeps them (--swap_roles), the two blind reads of
   a ranker that tried reliability tiers first (--replace_reread3, --tiers_paired; not kept), the two rankers'
   negatives of the same captions read blind (--lm_paired), an eighth reader's blind read of replace/9
   (--replace_reread4), and the automatic figures on the whole file:
   yield per type, rare-word share, identical swap/negclip negatives, a/an errors, conjunct swaps, moved
   quantity heads, and every check of `pipeline.checks.negatives`.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.checks.negatives import check_output  # noqa: E402
from pipeline.sources.coco import load_captions_file  # noqa: E402

TYPES = ("replace", "swap", "negclip")
SAMPLE_SEED, SAMPLE_SIZE, PER_TYPE = 7, 400, 100
LABELS = ("fluent", "contradicts", "minimal")
TARGETS = {"replace": 0.85, "swap": 0.60, "negclip": 0.60}
YIELD_TARGETS = {"replace": 0.95, "swap": 0.70, "negclip": 0.75}


def run_stage(captions: str, output_dir: str, ranker: str) -> None:
    cmd = [sys.executable, "-m", "pipeline.run", "--stage=train_negatives", f"--coco_captions={captions}",
           f"--output_dir={output_dir}", f"--negative_types={','.join(TYPES)}", f"--negative_ranker={ranker}",
           "--progress_seconds=0"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"stage failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def sample_ids(captions: str) -> list[int]:
    annotations = load_captions_file(captions)[1]
    return [a["id"] for a in random.Random(SAMPLE_SEED).sample(annotations, SAMPLE_SIZE)]


def rows_to_judge(output_dir: str, ids: list[int]) -> list[dict]:
    rows = [r for p in sorted(glob.glob(os.path.join(output_dir, "train_negatives", "*.parquet")))
            for r in pq.read_table(p).to_pylist() if r["negative_index"] == 0]
    order = {caption_id: k for k, caption_id in enumerate(ids)}
    picked = []
    for negative_type in TYPES:
        of_type = sorted((r for r in rows if r["negative_type"] == negative_type and r["caption_id"] in order),
                         key=lambda r: order[r["caption_id"]])
        picked += [{"negative_type": negative_type, "caption_id": r["caption_id"], "caption": r["caption"],
                    "hard_negative": r["hard_negative"], **{label: None for label in LABELS}, "note": ""}
                   for r in of_type[:PER_TYPE]]
    return picked


def merge_labels(fresh: list[dict], path: Path) -> list[dict]:
    if not path.exists():
        return fresh
    old = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            old[r["negative_type"], r["caption_id"], r["hard_negative"]] = r
    return [old.get((r["negative_type"], r["caption_id"], r["hard_negative"]), r) for r in fresh]


def judged_table(rows: list[dict], title: str) -> None:
    print(f"\n{title}:")
    print(f"{'type':<9} {'rows':>5} {'labelled':>9} {'fluent':>7} {'contradicts':>12} {'minimal':>8} {'valid':>7}"
          "  target")
    for negative_type in TYPES:
        of_type = [r for r in rows if r["negative_type"] == negative_type]
        done = [r for r in of_type if all(r[label] is not None for label in LABELS)]
        if not done:
            print(f"{negative_type:<9} {len(of_type):>5} {0:>9}   (not labelled yet)")
            continue
        share = {label: sum(bool(r[label]) for r in done) / len(done) for label in LABELS}
        valid = sum(all(r[label] for label in LABELS) for r in done) / len(done)
        print(f"{negative_type:<9} {len(of_type):>5} {len(done):>9} {share['fluent']:>7.0%} "
              f"{share['contradicts']:>12.0%} {share['minimal']:>8.0%} {valid:>7.0%}  >= {TARGETS[negative_type]:.0%}: "
              f"{'met' if valid >= TARGETS[negative_type] else 'NOT met'}")


def automatic_figures(output_dir: str, captions: str) -> None:
    violations, figures = check_output(output_dir, None, captions)
    checks = figures["checks"]
    replace_rows = figures["rows_by_type"].get("replace", 0)
    print(f"\nAutomatic figures on all {figures['captions']:,} captions:")
    for negative_type in TYPES:
        y = figures["yield"].get(negative_type, 0.0)
        print(f"  yield {negative_type:<8} {y:7.2%}  (target >= {YIELD_TARGETS[negative_type]:.0%}: "
              f"{'met' if y >= YIELD_TARGETS[negative_type] else 'NOT met'})")
    print(f"  rare-word share (replace negatives with a word in no input caption): "
          f"{checks['rare_word'] / replace_rows if replace_rows else 0:.2%} ({checks['rare_word']} rows; target <= 1%)")
    both = figures["swap_and_negclip"]
    print(f"  identical swap/negclip negatives: {checks['swap_equals_negclip']} of {both:,} captions with both "
          f"({checks['swap_equals_negclip'] / both if both else 0:.1%}; target <= 10%)")
    for name, target in (("a_an", 0), ("conjunct_swap", 0), ("quantity_head_moved", 0)):
        print(f"  {name}: {checks[name]} (target {target})")
    print("  every check: " + ", ".join(f"{c} {n}" for c, n in checks.items()))
    print(f"  {len(violations)} violations in all")


def calibrated_read(path: Path, title: str, calibration_title: str) -> None:
    """A blind reader's labels (when the file exists): its own rows, then the earlier reader's rows it was given
    unmarked (calibration: true), so that the two readers can be compared."""
    if not path.exists():
        return
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    judged_table([r for r in rows if not r["calibration"]], f"{title} ({path.name})")
    judged_table([r for r in rows if r["calibration"]], calibration_title)


def paired_read(path: Path, versions: dict[str, str], title: str) -> None:
    """A blind reader's labels on two negatives of the same captions (the rows' `version`), one table each."""
    if not path.exists():
        return
    labelled = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for version, name in versions.items():
        judged_table([r for r in labelled if r["version"] == version], f"{title} ({path.name}): {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", default=str(REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"))
    parser.add_argument("--output_dir", default="/tmp/negative_quality")
    parser.add_argument("--judged", default=str(REPO / "benchmarks" / "judged" / "negatives.jsonl"))
    parser.add_argument("--reread", default=str(REPO / "benchmarks" / "judged" / "negatives_reread.jsonl"),
                        help="a second reader's labels on rows of other captions, printed as a second table")
    parser.add_argument("--colour_moves", default=str(REPO / "benchmarks" / "judged" / "colour_moves.jsonl"),
                        help="labelled colour-move rows of swap, read apart from the sample")
    parser.add_argument("--replace_reread", default=str(REPO / "benchmarks" / "judged" / "replace_reread.jsonl"),
                        help="a third reader's blind labels on replace rows of other captions, with rows of "
                             "--reread mixed in (calibration: true) to compare the two readers")
    parser.add_argument("--replace_reread2", default=str(REPO / "benchmarks" / "judged" / "replace_reread2.jsonl"),
                        help="a fourth reader's blind labels on replace/6 rows of other captions, with rows of "
                             "--replace_reread mixed in (calibration: true)")
    parser.add_argument("--replace_reread3", default=str(REPO / "benchmarks" / "judged" / "replace_reread3.jsonl"),
                        help="a fifth reader's blind labels on rows of other captions chosen by a ranker that tried "
                             "reliability tiers first (not kept), with rows of --replace_reread2 mixed in")
    parser.add_argument("--replace_reread4", default=str(REPO / "benchmarks" / "judged" / "replace_reread4.jsonl"),
                        help="an eighth reader's blind labels on replace/9 rows of other captions, with rows of "
                             "--replace_reread2 mixed in")
    parser.add_argument("--tiers_paired", default=str(REPO / "benchmarks" / "judged" / "replace_tiers_paired.jsonl"),
                        help="a sixth reader's blind labels on both negatives (replace/7, tiers) of the captions "
                             "where the tiers changed the choice")
    parser.add_argument("--lm_paired", default=str(REPO / "benchmarks" / "judged" / "replace_lm_paired.jsonl"),
                        help="a seventh reader's blind labels on both rankers' negatives (ngram, lm) of captions "
                             "where they choose differently")
    parser.add_argument("--exchanges", default=str(REPO / "benchmarks" / "judged" / "exchanges_reread.jsonl"),
                        help="a blind reader's labels on swap exchanges and negclip rows of other captions")
    parser.add_argument("--swap_roles", default=str(REPO / "benchmarks" / "judged" / "swap_roles_reread.jsonl"),
                        help="a blind reader's labels on swap exchanges made before the role rule, split here into "
                             "the rows swap still makes and those the rule removed")
    parser.add_argument("--ranker", default="ngram", choices=("ngram", "lm", "none"))
    parser.add_argument("--skip_run", action="store_true", help="use the rows already in --output_dir")
    args = parser.parse_args()
    if not args.skip_run:
        run_stage(args.captions, args.output_dir, args.ranker)
    judged = Path(args.judged)
    rows = merge_labels(rows_to_judge(args.output_dir, sample_ids(args.captions)), judged)
    judged.parent.mkdir(parents=True, exist_ok=True)
    judged.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    counts = Counter(r["negative_type"] for r in rows)
    print(f"{len(rows)} rows to judge in {judged}: " + ", ".join(f"{t} {counts[t]}" for t in TYPES))
    judged_table(rows, f"Judged by reading ({SAMPLE_SIZE} captions drawn with random.Random({SAMPLE_SEED}).sample, "
                       f"up to {PER_TYPE} rows per type)")
    reread = Path(args.reread)
    if reread.exists():
        judged_table([json.loads(line) for line in reread.read_text(encoding="utf-8").splitlines() if line.strip()],
                     f"Re-read blind by a second reader, other captions ({reread.name}: rows of other captions, "
                     "types mixed and hidden)")
    moves = Path(args.colour_moves)
    if moves.exists():
        judged_table([json.loads(line) for line in moves.read_text(encoding="utf-8").splitlines() if line.strip()],
                     f"swap's colour moves alone, 40 drawn from all val2017 swap rows outside the rows the rules were "
                     f"tuned on ({moves.name})")
    moves_reread = moves.with_name(moves.stem + "_reread.jsonl")
    if moves_reread.exists():
        judged_table([json.loads(line) for line in moves_reread.read_text(encoding="utf-8").splitlines()
                      if line.strip()], f"the same, re-read blind by a second reader on 40 other colour moves "
                                        f"({moves_reread.name})")
    calibrated_read(Path(args.replace_reread), "replace after its rules of 2026-11-24, 100 rows of captions read "
                    "nowhere else, read blind by a third reader", "the same reader on 30 rows of the second reader's "
                    "replace rows, mixed in unmarked (the second reader passed 18 of them)")
    calibrated_read(Path(args.replace_reread2), "replace/6 (the preposition and verb-object rules of 2026-11-24, "
                    "evening), 80 rows of captions read nowhere else, read blind by a fourth reader", "the same "
                    "reader on 20 of the third reader's replace rows, mixed in unmarked (the third reader passed 10 "
                    "of them)")
    calibrated_read(Path(args.replace_reread3), "a ranker that tried reliability tiers first (not kept), 80 rows of "
                    "captions read nowhere else, read blind by a fifth reader", "the same reader on 20 of the fourth "
                    "reader's replace rows, mixed in unmarked (the fourth reader passed 15 of them)")
    calibrated_read(Path(args.replace_reread4), "replace/9 (this code), 80 rows of captions read nowhere else, "
                    "read blind by an eighth reader", "the same reader on 20 of the fourth reader's replace rows, "
                    "mixed in unmarked (the fourth reader passed 15 of them)")
    paired_read(Path(args.tiers_paired), {"replace/7": "replace/7 (smallest drop)", "tiers": "the tiers' choice"},
                "the 28 of those captions where the tiers chose another negative, both negatives read blind by a "
                "sixth reader, mixed")
    paired_read(Path(args.lm_paired), {"ngram": "--negative_ranker=ngram", "lm": "--negative_ranker=lm (SmolLM2)"},
                "replace/8 on 50 captions read nowhere else where the two rankers choose differently, both "
                "negatives read blind by a seventh reader, mixed")
    exchanges = Path(args.exchanges)
    if exchanges.exists():
        judged_table([json.loads(line) for line in exchanges.read_text(encoding="utf-8").splitlines()
                      if line.strip()], "swap's exchanges (no colour moves) and negclip, 40 each drawn from all "
                                        f"val2017 rows of captions read nowhere else, read blind ({exchanges.name})")
    roles = Path(args.swap_roles)
    if roles.exists():
        labelled = [json.loads(line) for line in roles.read_text(encoding="utf-8").splitlines() if line.strip()]
        made = {(r["caption_id"], r["hard_negative"]) for p in
                sorted(glob.glob(os.path.join(args.output_dir, "train_negatives", "*.parquet")))
                for r in pq.read_table(p, columns=["caption_id", "hard_negative", "negative_type"]).to_pylist()
                if r["negative_type"] == "swap"}
        for still, title in ((True, "still made"), (False, "removed by the role rule (perturb/relations.py)")):
            judged_table([r for r in labelled if ((r["caption_id"], r["hard_negative"]) in made) is still],
                         f"swap exchanges of captions read nowhere else, made before the role rule, read blind "
                         f"({roles.name}): {title}")
    automatic_figures(args.output_dir, args.captions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
