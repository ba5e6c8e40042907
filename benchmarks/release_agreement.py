"""Row-for-row agreement of our REPLACE evaluation set with the paper's released one. Prints figures.

    python benchmarks/release_agreement.py OUTPUT_DIR --release PATH/TO/hard_positives

The release (github.com/amitakamath/hard_positives) holds data/vl_checklist_{attributes,relations}.json
(image_id, true_caption = c, false_caption = c_n) and swapped_data/ with the same records, true_caption = c_p.
A row of ours agrees when the release has a record of the same image with the same (c, c_n) and the same c_p.
Both are counted exactly and with case folded: the release writes relations in lower case throughout and
keeps the source's capitals in some attribute captions. Each is also counted with spacing folded (both sides
single-spaced): the release keeps VL-CheckList's double and leading spaces in 185 attribute records,
which our rows no longer have (no spacing cue between c, c_p and c_n).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import Counter

import pyarrow.parquet as pq


def release_positives(release: str) -> dict[tuple, set[str]]:
    """(subset, image_id, c, c_n) -> the released c_p strings."""
    found: dict[tuple, set[str]] = {}
    for subset, name in (("attribute", "vl_checklist_attributes.json"), ("relation", "vl_checklist_relations.json")):
        with open(os.path.join(release, "data", name), encoding="utf-8") as f:
            originals = json.load(f)
        with open(os.path.join(release, "swapped_data", name), encoding="utf-8") as f:
            positives = json.load(f)
        if len(originals) != len(positives):
            sys.exit(f"{name}: data/ and swapped_data/ differ in length")
        for o, p in zip(originals, positives, strict=True):
            key = (subset, str(o["image_id"]), o["true_caption"], o["false_caption"])
            found.setdefault(key, set()).add(p["true_caption"])
    return found


COMPARISONS = {  # name -> how both sides' texts are compared
    "exact": lambda t: t,
    "spacing folded": lambda t: " ".join(t.split()),
    "case folded": str.casefold,
    "case+spacing": lambda t: " ".join(t.casefold().split()),
}


def agreement(rows: list[dict], release: dict[tuple, set[str]], comparison: str) -> dict:
    norm = COMPARISONS[comparison]
    index: dict[tuple, set[str]] = {}
    for (subset, image, c, cn), positives in release.items():
        index.setdefault((subset, image, norm(c), norm(cn)), set()).update(norm(p) for p in positives)
    counts = Counter()
    for row in rows:
        image = os.path.splitext(os.path.basename(row["image_path"]))[0]
        key = (row["subset"], image, norm(row["caption"]), norm(row["hard_negative"]))
        counts[row["subset"], "rows"] += 1
        if key in index:
            counts[row["subset"], "pair_in_release"] += 1
            if norm(row["hard_positive"]) in index[key]:
                counts[row["subset"], "same_positive"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="an eval_sets output folder (with replace/)")
    parser.add_argument("--release", required=True, help="a checkout of amitakamath/hard_positives")
    args = parser.parse_args(argv)
    rows = [r for p in sorted(glob.glob(os.path.join(args.output_dir, "replace", "*.parquet")))
            for r in pq.read_table(p).to_pylist()]
    release = release_positives(args.release)
    print(f"{len(rows):,} REPLACE rows of ours; {sum(len(v) for v in release.values()):,} released (c, c_n, c_p)")
    print(f"{'comparison':<14} {'subset':<10} {'rows':>7} {'(c, c_n) in release':>20} {'same c_p':>9} {'share':>7}")
    for comparison in COMPARISONS:
        counts = agreement(rows, release, comparison)
        for subset in ("attribute", "relation", "all"):
            pick = ("attribute", "relation") if subset == "all" else (subset,)
            n = sum(counts[s, "rows"] for s in pick)
            pair = sum(counts[s, "pair_in_release"] for s in pick)
            same = sum(counts[s, "same_positive"] for s in pick)
            print(f"{comparison:<14} {subset:<10} {n:>7,} {pair:>20,} {same:>9,} "
                  f"{same / n if n else 0:>7.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
