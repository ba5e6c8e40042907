"""Check an eval_sets output folder: `python -m pipeline.checks.eval_sets OUTPUT_DIR [--vl_checklist_root DIR]`.

Independent of how the rows were made, it asserts:
- REPLACE: c_p differs from c in exactly one span; every word of c_p is in c or in the replacement phrase
  (the table target with its indefinite article); c_p never equals c or c_n; c, c_n and c_p are single-spaced
  (no spacing cue); no material rows; with the source given, source_caption and source_negative are the source
  captions verbatim and c, c_n them single-spaced in lower case.
- SWAP: c_p has c's multiset of words, in another order, reading "<det> a2 o2 and <det> a1 o1" where c reads
  "<det> a1 o1 and <det> a2 o2" (attribute-object pairs kept, phrase order reversed); c_p != c, c_n; c, c_n and
  c_p are single-spaced.
- Files and report agree: rows and dead letters on disk per input file add up to the records read.
Exits 1 and prints the violations when any is found.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import os
import sys
from collections import Counter, defaultdict

from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.parquet import shard_pattern
from pipeline.checks import CHECK_INPUT_ERRORS, one_line
from pipeline.io.report import REPORT_FILE, read_json
from pipeline.perturb.text import indefinite_article, lower_case, single_spaced, words
from pipeline.sources import vl_checklist
from pipeline.sources.files import read_json_list
from pipeline.tables.shards import read_table

DETERMINERS = {"the", "a", "an"}


def _read_parquet(pattern: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(pattern)):
        rows += read_table(path).to_pylist()
    return rows


def _changed_spans(a: list[str], b: list[str]) -> list[tuple]:
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [op for op in matcher.get_opcodes() if op[0] != "equal"]


def _spacing(row: dict) -> list[str]:
    """c, c_n and c_p single-spaced alike: a spacing that differs between them is a cue a model could use alone."""
    spaced = [name for name in ("caption", "hard_negative", "hard_positive") if row[name] != single_spaced(row[name])]
    return [f"{', '.join(spaced)} not single-spaced (double, leading or trailing spaces)"] if spaced else []


def check_replace_row(row: dict) -> list[str]:
    c, c_p = row["caption"], row["hard_positive"]
    c_words, n_words, p_words = words(c), words(row["hard_negative"]), words(c_p)
    problems = []
    if p_words == c_words or c_p == c:
        problems.append("hard positive equals caption")
    if p_words == n_words:
        problems.append("hard positive equals hard negative")
    if row["category"] == "material":
        problems.append("material row")
    problems += _spacing(row)
    start, original = row["span_start"], row["original_span"]
    if c[start:start + len(original)] != original or \
            c_p != c[:start] + row["positive_span"] + c[start + len(original):]:
        problems.append("hard positive is not the caption with original_span replaced by positive_span")
    spans = _changed_spans(c_words, p_words)
    if len(spans) != 1:
        problems.append(f"hard positive differs from caption in {len(spans)} spans")
    phrase = words(row["replaced_to"])
    allowed = set(c_words) | set(phrase)
    article = indefinite_article(row["replaced_to"])
    for i, w in enumerate(p_words):
        # The one word allowed besides: the article the replacement needs, right before it ("an ivory").
        if w not in allowed and not (w == article and p_words[i + 1:i + 1 + len(phrase)] == phrase):
            problems.append(f"word {w!r} is in neither the caption nor the replacement phrase")
    return problems


def _phrase_reading(caption_words: list[str], attributes: list[str], objects: list[str]) -> list[str] | None:
    """[det1, det2] when the caption reads '<det1> a1 o1 and <det2> a2 o2', else None."""
    a1, a2 = (words(a) for a in attributes)
    o1, o2 = (words(o) for o in objects)
    n1 = 1 + len(a1) + len(o1)
    first, rest = caption_words[:n1], caption_words[n1:]
    if first[1:] != a1 + o1 or first[0] not in DETERMINERS:
        return None
    if rest[:1] != ["and"] or rest[1:2] == [] or rest[1] not in DETERMINERS or rest[2:] != a2 + o2:
        return None
    return [first[0], rest[1]]


def check_swap_row(row: dict) -> list[str]:
    c_words, n_words, p_words = words(row["caption"]), words(row["hard_negative"]), words(row["hard_positive"])
    problems = _spacing(row)
    if Counter(p_words) != Counter(c_words):
        problems.append("hard positive does not have the caption's multiset of words")
    if p_words == c_words:
        problems.append("hard positive equals caption")
    if p_words == n_words:
        problems.append("hard positive equals hard negative")
    attrs, objs = list(row["attributes"]), list(row["objects"])
    dets = _phrase_reading(c_words, attrs, objs)
    if dets is None:
        problems.append("caption does not read '<det> a1 o1 and <det> a2 o2' with the row's attributes/objects")
    elif _phrase_reading(p_words, attrs[::-1], objs[::-1]) != dets[::-1]:
        problems.append("hard positive is not '<det> a2 o2 and <det> a1 o1' (pairs kept, order reversed)")
    return problems


def check_source_captions(rows: list[dict], root: str) -> list[str]:
    """source_caption and source_negative are the VL-CheckList captions, character for character (casing and
    spacing kept); c and c_n are them single-spaced in lower case."""
    sources = {rel: read_json_list(os.path.join(root, rel)) for rel in vl_checklist.FILES.values()}
    problems = []
    for row in rows:
        held = sources.get(row["source_file"])
        index = row["source_index"]
        if held is None or not isinstance(index, int) or not 0 <= index < len(held):
            problems.append(f"{row['source_file']}:{index}: no such record in --vl_checklist_root "
                            f"({'no such file' if held is None else f'the file holds {len(held):,}'})")
            continue
        try:
            raw = held[index]
            source = [raw[1]["POS"][0], raw[1]["NEG"][0]]
        except (KeyError, IndexError, TypeError):
            problems.append(f"{row['source_file']}:{index}: the record is not a VL-CheckList record")
            continue
        if [row["source_caption"], row["source_negative"]] != source:
            problems.append(f"{row['source_file']}:{row['source_index']}: source captions differ from the source")
        if [row["caption"], row["hard_negative"]] != [lower_case(single_spaced(t)) for t in source]:
            problems.append(f"{row['source_file']}:{row['source_index']}: captions are not the source single-spaced "
                            f"in lower case")
    return problems


def check_accounting(output_dir: str, table: str, rows: list[dict], report: dict) -> list[str]:
    """What is on disk, per input file, adds up to what the report says was read."""
    section = report["tables"].get(table)
    if section is None:
        return [f"report.json has no section for {table}"]
    on_disk = defaultdict(Counter)
    for row in rows:
        on_disk[row["source_file"]]["rows"] += 1
    for kind in (REJECTED, DISCARDED):
        for letter in _read_parquet(shard_pattern(os.path.join(output_dir, kind), table)):
            on_disk[letter["source_file"]][kind] += 1
            if not letter["reason"]:
                on_disk[letter["source_file"]]["no_reason"] += 1
    problems = []
    for file, stats in section["files"].items():
        disk = on_disk.pop(file, Counter())
        for kind in ("rows", REJECTED, DISCARDED):
            if disk[kind] != stats[kind]:
                problems.append(f"{table} {file}: {disk[kind]} {kind} on disk, report says {stats[kind]}")
        if stats["read"] != disk["rows"] + disk[REJECTED] + disk[DISCARDED]:
            problems.append(f"{table} {file}: read {stats['read']} != rows + rejected + discarded on disk")
        if disk["no_reason"]:
            problems.append(f"{table} {file}: {disk['no_reason']} dead letters without a reason")
    problems += [f"{table} {file}: on disk but not in the report" for file in on_disk]
    return problems


def check_output(output_dir: str, vl_checklist_root: str | None = None) -> tuple[dict, list[str]]:
    """(rows checked per table, violations) for an eval_sets output folder."""
    report = read_json(os.path.join(output_dir, REPORT_FILE))
    checked, problems = {}, []
    for table, check in (("replace", check_replace_row), ("swap", check_swap_row)):
        if table not in report["tables"]:
            continue
        # Every Parquet file in the table folder, shard-named or not: a stray file would load with the table.
        rows = []
        for path in sorted(glob.glob(os.path.join(output_dir, table, "*.parquet"))):
            found = read_table(path)
            missing = [c for c in ("source_file", "source_index") if c not in found.column_names]
            if missing:
                problems.append(f"{table}: {os.path.basename(path)} has no {missing[0]} column: not one of the "
                                f"table's shards, yet it would load with them")
                continue
            rows += found.to_pylist()
        checked[table] = len(rows)
        for row in rows:
            problems += [f"{table} {row['source_file']}:{row['source_index']}: {p}" for p in check(row)]
        problems += check_accounting(output_dir, table, rows, report)
        if table == "replace" and vl_checklist_root:
            problems += check_source_captions(rows, vl_checklist_root)
    return checked, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir")
    parser.add_argument("--vl_checklist_root", help="also check captions against the VL-CheckList source")
    args = parser.parse_args(argv)
    try:
        checked, problems = check_output(args.output_dir, args.vl_checklist_root)
    except CHECK_INPUT_ERRORS as e:  # an unreadable folder or source: one line, as the pipeline says it
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    for p in problems[:50]:
        print(p)
    summary = ", ".join(f"{n} {t} rows" for t, n in checked.items())
    print(f"checked {summary}: {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    from pipeline.urls import redact_output

    redact_output()  # before anything prints: no secret of a flag reaches the terminal
    sys.exit(main())
