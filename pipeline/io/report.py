"""Run report: counts computed inside the pipeline, written as <output>/report.json, printed as a table.

Every count is a key tuple in one of these forms (t = table name):
  ("read", t, file)                  records read from an input file
  ("rows", t, file)                  rows that passed the schema check and went to the sink
  ("emitted", t, file)               records that gave rows, where one record can give several rows
  ("dead", t, file, kind, reason)    dead letters: kind is rejected or discarded
  ("group", t, *group)               rows per breakdown group (e.g. subset, category, replaced pair)
  ("shard", t, path)                 rows the sink wrote to one Parquet file of the table
  ("dead_letter_shard", t, path)     rows written to one dead-letter Parquet file of the table
  ("sha256", t, path, digest)        the sha256 of a Parquet file as written (publish and load_table check it)
  ("separability", t, comparison, positive_type, negative_type, outcome)
                                     written train rows per outcome (correct, tie, wrong) of a text-only
                                     classifier's pairwise choice (pipeline/checks/separability.py)
so that read = rows (or emitted) + discarded + rejected can be checked per file from independent counts.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.tables.folders import merge_reports  # noqa: F401  (commit.py and stages use it from here)
from pipeline.tables.folders import read_bounded
from pipeline.tables.folders import REPORT_FILE  # noqa: F401  (run.py, stages/ and checks/ import it from here)
from pipeline.urls import has_scheme


class SumCounts(beam.CombineFn):
    """(key, n) pairs -> {key: total}."""

    def create_accumulator(self):
        return Counter()

    def add_input(self, acc, item):
        key, n = item
        acc[key] += n
        return acc

    def merge_accumulators(self, accs):
        total = Counter()
        for acc in accs:
            total.update(acc)
        return total

    def extract_output(self, acc):
        # Keys in a fixed order, not the order the counts arrived in (which differs between runners and runs):
        # whatever iterates over them writes the same report.
        return dict(sorted(acc.items(), key=lambda item: repr(item[0])))


def table_report(table: str, counts: dict, groups: list[str], expected_groups: list[tuple] = ()) -> dict:
    """The report section of one table. `groups` names the fields of its ("group", ...) keys."""
    files = defaultdict(lambda: {"read": 0, "rows": 0, "emitted": 0, DISCARDED: 0, REJECTED: 0})
    per_record = any(k[0] == "emitted" and k[1] == table for k in counts)
    reasons = {DISCARDED: Counter(), REJECTED: Counter()}
    grouped = Counter({tuple(g): 0 for g in expected_groups})
    shards, dead_shards, sha256 = {}, {}, {}
    for key, n in counts.items():
        kind, name, rest = key[0], key[1], key[2:]
        if name != table:
            continue
        if kind in ("read", "rows", "emitted"):
            files[rest[0]][kind] += n
        elif kind == "dead":
            file, dead_kind, reason = rest
            files[file][dead_kind] += n
            reasons[dead_kind][reason] += n
        elif kind == "group":
            grouped[rest] += n
        elif kind == "shard":
            shards[rest[0]] = n
        elif kind == "dead_letter_shard":
            dead_shards[rest[0]] = n
        elif kind == "sha256":
            sha256[rest[0]] = rest[1]
    out = "emitted" if per_record else "rows"
    for stats in files.values():
        if not per_record:
            del stats["emitted"]
        stats["balanced"] = stats["read"] == stats[out] + stats[DISCARDED] + stats[REJECTED]
    totals = {k: sum(f[k] for f in files.values()) for k in ("read", "rows", out, DISCARDED, REJECTED)}
    written = sum(shards.values())
    return {
        **totals,
        "written": written,
        "balanced": all(f["balanced"] for f in files.values()) and written == totals["rows"],
        "files": {f: files[f] for f in sorted(files)},
        "groups": {"fields": groups, "rows": [[*g, n] for g, n in sorted(grouped.items())]},
        "discard_reasons": _by_count(reasons[DISCARDED]),
        "reject_reasons": _by_count(reasons[REJECTED]),
        "shards": dict(sorted(shards.items())),
        "dead_letter_shards": dict(sorted(dead_shards.items())),
        "sha256": dict(sorted(sha256.items())),
    }


def _by_count(counts: Counter) -> dict:
    """Most common first, ties by name: not Counter.most_common, whose ties keep the order in which the counts
    reached the combiner, which differs between runners (and between runs of a distributed one)."""
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def write_json(path: str, obj) -> None:
    with FileSystems.create(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def read_json(path: str):
    """A JSON file; ValueError when it is not JSON, or nests past Python's recursion limit (a report of 100,000
    nested lists is refused as any other bad report, never a traceback)."""
    if has_scheme(path):
        with FileSystems.open(path) as f:
            data = f.read()
    else:
        data = read_own_file(path)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a report") from None


OWN_FILE_LIMIT = 256 << 20  # a report or commit record: a few MB at CC3M's size; a larger one is not ours


def read_own_file(path: str) -> bytes:
    """A local file of hardpos's own folders (a report, a commit record), read with tables/folders.read_bounded's
    checks and OWN_FILE_LIMIT: ValueError (one line, naming the path) for a FIFO, a folder or a file larger than
    any report; OSError as open raises it (a missing file)."""
    try:
        return read_bounded(path, OWN_FILE_LIMIT, "more than any report, not a file hardpos wrote")
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def format_summary(report: dict) -> str:
    """The table printed at the end of a run."""
    lines = [f"stage {report['stage']}: {report['output_dir']}"]
    header = f"{'table':<16} {'read':>8} {'emitted':>8} {'rows':>8} {'discarded':>10} {'rejected':>9}  balanced"
    lines += [header, "-" * len(header)]
    for name, t in report["tables"].items():
        lines.append(f"{name:<16} {t['read']:>8} {t.get('emitted', t['rows']):>8} {t['rows']:>8} {t[DISCARDED]:>10} "
                     f"{t[REJECTED]:>9}  {'yes' if t['balanced'] else 'NO'}")
    for name, t in report["tables"].items():
        for kind in ("discard_reasons", "reject_reasons"):
            if t[kind]:
                top = ", ".join(f"{r} {n}" for r, n in list(t[kind].items())[:6])
                lines.append(f"  {name} {kind.replace('_', ' ')}: {top}")
        if t.get("separability"):
            lines.append(f"  {name} text-only separability (chance 50%): {separability_line(t['separability'])}")
    return "\n".join(lines)


def format_markdown(report: dict) -> str:
    """The report as markdown (written beside report.json as report.md): the summary table, then the reasons."""
    stages = report.get("stage") or ", ".join(report.get("stages", []))
    lines = [f"# {stages}: {report['output_dir']}", "",
             "| table | read | emitted | rows | discarded | rejected | balanced |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, t in report["tables"].items():
        lines.append(f"| {name} | {t['read']:,} | {t.get('emitted', t['rows']):,} | {t['rows']:,} | "
                     f"{t[DISCARDED]:,} | {t[REJECTED]:,} | {'yes' if t['balanced'] else 'NO'} |")
    for name, t in report["tables"].items():
        for kind in ("discard_reasons", "reject_reasons"):
            if t.get(kind):
                lines += ["", f"**{name}, {kind.replace('_', ' ')}**", "", "| reason | count |", "|---|---:|"]
                lines += [f"| {reason} | {n:,} |" for reason, n in t[kind].items()]
        if t.get("separability"):
            lines += ["", *separability_markdown(name, t["separability"])]
    return "\n".join(lines) + "\n"


def separability_markdown(table: str, section: dict) -> list[str]:
    """A table's separability figures: accuracy of each pairwise choice, overall and per type of the rows."""
    comparisons = _comparisons(section)
    lines = [f"**{table}, text-only separability** ({section['classifier']['model'].split(',')[0]}, "
             f"{section['classifier']['folds']} folds by image, seed {section['classifier']['seed']}; chance is 50%, "
             "a high P vs N means the positive can be told from the negative without the image)", "",
             "| rows | pairs | " + " | ".join(c["label"] for c in comparisons) + " |",
             "|---|---:|" + "---:|" * len(comparisons)]
    first = comparisons[0]
    lines.append(f"| all | {first['pairs']:,} | " + " | ".join(_percent(c["accuracy"]) for c in comparisons) + " |")
    for by, field in (("by_positive_type", "positive_type"), ("by_negative_type", "negative_type")):
        for value, figures in first[by].items():
            cells = [_percent(c[by][value]["accuracy"]) for c in comparisons]
            lines.append(f"| {field} {value} | {figures['pairs']:,} | " + " | ".join(cells) + " |")
    return lines


def separability_line(section: dict) -> str:
    """'P vs N 92.4%, C vs P 89.7%, C vs N 67.0%' of a separability section."""
    return ", ".join(f"{c['label']} {_percent(c['accuracy'])}" for c in _comparisons(section))


def _comparisons(section: dict) -> list[dict]:
    """The figures of each comparison of a separability section (the classifier's description aside)."""
    return [figures for name, figures in section.items() if name != "classifier"]


def _percent(accuracy: float | None) -> str:
    return "n/a" if accuracy is None else f"{accuracy:.1%}"
