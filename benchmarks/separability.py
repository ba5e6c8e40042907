"""The train table's shortcut as figures: how often a text-only bag-of-words model tells its texts apart.

    python benchmarks/separability.py [--train_dir OUTPUT_DIR]
        [--captions ../shared/data/coco/captions_val2017.json] [--output_dir /tmp/separability] [--seed S]

Reads <train_dir>/train/*.parquet (an earlier run's --output_dir), or without --train_dir runs `--stage=all` with
its defaults on --captions into --output_dir first (val2017: about 2 minutes). Prints, with the classifier of
pipeline/checks/separability.py (the one the train_set stage reports): accuracy of P vs N, C vs P and C vs N,
overall and per positive_type and negative_type (chance is 50%); then, for information, P vs N with the
classifier restricted to the changed words (the words of c_p and c_n that c does not have). Where the folder's
report.json has the stage's own figures, says whether they are the same.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.checks.separability import COMPARISONS, changed_bags, separate  # noqa: E402

COLUMNS = ["example_id", "caption_id", "image_id", "caption", "hard_positive", "hard_negative", "positive_type",
           "negative_type"]


def run_stage(captions: str, output_dir: str) -> None:
    cmd = [sys.executable, "-m", "pipeline.run", "--stage=all", f"--coco_captions={captions}",
           f"--output_dir={output_dir}", "--progress_seconds=0"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"stage failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def train_rows(folder: str) -> list[dict]:
    paths = sorted(glob.glob(os.path.join(folder, "train", "*.parquet")))
    if not paths:
        sys.exit(f"no train table in {folder}/train")
    return [r for p in paths for r in pq.read_table(p, columns=COLUMNS).to_pylist()]


def stage_figures(folder: str) -> dict | None:
    try:
        report = json.loads(Path(folder, "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report.get("tables", {}).get("train", {}).get("separability")


def print_figures(figures: dict, names) -> None:
    names = list(names)
    print(f"{'rows':<32} {'pairs':>7}  " + "  ".join(f"{COMPARISONS[n].label:>8}" for n in names))
    first = figures[names[0]]

    def line(label: str, pairs: int, cells: list[float | None]) -> None:
        shown = "  ".join(f"{'n/a' if a is None else f'{a:.1%}':>8}" for a in cells)
        print(f"{label:<32} {pairs:>7,}  {shown}")

    line("all", first["pairs"], [figures[n]["accuracy"] for n in names])
    for by, field in (("by_positive_type", "positive_type"), ("by_negative_type", "negative_type")):
        for value, cell in first[by].items():
            line(f"  {field} {value}", cell["pairs"], [figures[n][by][value]["accuracy"] for n in names])
    ties = ", ".join(f"{COMPARISONS[n].label} {figures[n]['ties']:,}" for n in names)
    print(f"ties (counted half): {ties}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_dir", help="an earlier run's --output_dir holding train/ (else --stage=all runs)")
    parser.add_argument("--captions", default=str(REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"))
    parser.add_argument("--output_dir", default="/tmp/separability", help="where --stage=all writes, without "
                                                                            "--train_dir")
    parser.add_argument("--seed", type=int, default=None,
                        help="the classifier's seed (default: the one the stage's report names, else 0)")
    args = parser.parse_args()
    folder = args.train_dir
    if folder is None:
        print(f"running --stage=all on {args.captions} into {args.output_dir}", flush=True)
        run_stage(args.captions, args.output_dir)
        folder = args.output_dir
    reported = stage_figures(folder)
    seed = args.seed if args.seed is not None else reported["classifier"]["seed"] if reported else 0
    rows = train_rows(folder)
    print(f"train rows: {len(rows):,} ({len({r['image_id'] for r in rows}):,} images) in {folder}; seed {seed}")
    figures = separate(rows, seed)
    print(f"classifier: {figures['classifier']['model']}; tokens: {figures['classifier']['tokenizer']}; "
          f"{figures['classifier']['folds']} folds by image\n")
    print_figures(figures, COMPARISONS)
    if reported is not None:
        same = reported == figures
        print(f"\nthe stage's report.json: {'the same figures' if same else 'OTHER figures (see report.json)'}")
    print("\nfor information, P vs N on the changed words only (c_p's and c_n's words that c does not have):")
    print_figures(separate(rows, seed, bags=changed_bags, names=["p_vs_n"]), ["p_vs_n"])


if __name__ == "__main__":
    main()
