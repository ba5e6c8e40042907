"""Check a train_negatives output folder: `python -m pipeline.checks.negatives OUTPUT_DIR [--min_replace_yield 0.95]`.

Independent of how the rows were made, it asserts:
- no hard negative equals its caption (up to case and spacing);
- replace: the negative differs from the caption in exactly one contiguous word span, whose new words share
  no WordNet synset (any part of speech) with the old ones (a/an/the aside); the row's span columns say so;
- swap, negclip and the order shuffles: the caption's multiset of words, in a different order;
- the replace yield (captions with a replace negative / captions read and not rejected) is at least the
  minimum, and the report balances (read = emitted + discarded + rejected, rows written = rows counted).
Exits 1 and prints the violations when any is found.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import os
import sys
from collections import Counter

import pyarrow.parquet as pq

from pipeline.io.report import REPORT_FILE, read_json
from pipeline.perturb.candidates import same_text
from pipeline.perturb.neg_replace import replaced_words_unrelated
from pipeline.perturb.text import words

TABLE = "train_negatives"
KEEPS_WORDS = {"swap", "negclip", "shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj", "shuffle_within_trigrams",
               "shuffle_trigrams", "shuffle_bigrams"}


def _changed_spans(a: list[str], b: list[str]) -> list[tuple]:
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [op for op in matcher.get_opcodes() if op[0] != "equal"]


def check_row(row: dict, lexicon) -> list[str]:
    c, n, kind = row["caption"], row["hard_negative"], row["negative_type"]
    problems = []
    if same_text(c, n):
        problems.append("hard negative equals caption")
    start, end = row["span_start"], row["span_end"]
    if c[start:end] != row["changed_span"] or n[start:start + len(row["new_span"])] != row["new_span"]:
        problems.append("span columns do not locate the change")
    if kind == "replace":
        spans = _changed_spans(words(c), words(n))
        if len(spans) != 1:
            problems.append(f"{len(spans)} changed spans, expected 1")
        else:
            _, i1, i2, j1, j2 = spans[0]
            old, new = " ".join(words(c)[i1:i2]), " ".join(words(n)[j1:j2])
            if not replaced_words_unrelated(lexicon, old, new):
                problems.append(f"new words share a WordNet synset with the old ones: {old!r} -> {new!r}")
    elif kind in KEEPS_WORDS:
        if sorted(words(c)) != sorted(words(n)):
            problems.append("words differ from the caption's")
        elif words(c) == words(n):
            problems.append("same word order as the caption")
    else:
        problems.append(f"unknown negative_type {kind}")
    return problems


def check_output(output_dir: str, min_replace_yield: float = 0.95) -> tuple[list[str], dict]:
    from pipeline.perturb.lexicon import Lexicon
    from pipeline.perturb.wordnet import load_wordnet

    lexicon = Lexicon(load_wordnet())
    report = read_json(os.path.join(output_dir, REPORT_FILE))["tables"][TABLE]
    violations, by_type, replace_captions, rows_seen = [], Counter(), set(), 0
    for path in sorted(glob.glob(os.path.join(output_dir, TABLE, "*.parquet"))):
        for row in pq.read_table(path).to_pylist():
            rows_seen += 1
            by_type[row["negative_type"]] += 1
            if row["negative_type"] == "replace":
                replace_captions.add(row["example_id"])
            for problem in check_row(row, lexicon):
                violations.append(f"{row['example_id']} {row['negative_type']}: {problem}: {row['caption']!r} -> "
                                  f"{row['hard_negative']!r}")
    captions = report["read"] - report["rejected"]
    figures = {"rows": rows_seen, "rows_by_type": dict(sorted(by_type.items())), "captions": captions,
               "replace_yield": len(replace_captions) / captions if captions else 0.0}
    if rows_seen != report["rows"]:
        violations.append(f"{rows_seen} rows on disk, the report says {report['rows']}")
    if not report["balanced"]:
        violations.append("report does not balance: read != emitted + discarded + rejected")
    if "replace" in report.get("negative_types", {}) and figures["replace_yield"] < min_replace_yield:
        violations.append(f"replace yield {figures['replace_yield']:.2%} < {min_replace_yield:.0%}")
    return violations, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir")
    parser.add_argument("--min_replace_yield", type=float, default=0.95)
    args = parser.parse_args(argv)
    violations, figures = check_output(args.output_dir, args.min_replace_yield)
    print(f"{figures['rows']} rows over {figures['captions']} captions; replace yield {figures['replace_yield']:.2%}")
    for kind, n in figures["rows_by_type"].items():
        print(f"  {kind}: {n}")
    for v in violations[:50]:
        print(f"VIOLATION {v}")
    print(f"{len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
