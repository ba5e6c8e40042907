"""Stage eval_sets: the REPLACE (VL-CheckList) and SWAP (ARO VG-Attribution) evaluation tables."""
from __future__ import annotations

from collections import defaultdict

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.report import table_report
from pipeline.options import HardposOptions, UsageError
from pipeline.perturb import eval_replace, eval_swap
from pipeline.perturb.eval_replace import ReplaceTable, replace_hard_positive
from pipeline.perturb.eval_swap import swap_hard_positive
from pipeline.perturb.outcomes import Skip
from pipeline.perturb.text import lower_case, single_spaced
from pipeline.sources import aro, vl_checklist
from pipeline.sources.files import READ, InputBounds

STAGE = "eval_sets"
REPLACE, SWAP = "replace", "swap"  # table names: output folders <output_dir>/replace, <output_dir>/swap
SCHEMAS = {REPLACE: "replace_eval", SWAP: "swap_eval"}
PAIR_FIELDS = ["subset", "category", "replaced_from", "replaced_to"]


class _RowsOrDeadLetters(beam.DoFn):
    """Applies `make_row` to each record; a Skip becomes a dead letter tagged with its kind."""

    def __init__(self, table: str):
        self.table = table
        self.rows = Metrics.counter(f"{STAGE}.{table}", "rows")
        self.skipped = Metrics.counter(f"{STAGE}.{table}", "skipped")

    def make_row(self, record: dict) -> dict:
        raise NotImplementedError

    def process(self, record):
        try:
            row = self.make_row(record)
        except Skip as skip:
            self.skipped.inc()
            Metrics.counter(f"{STAGE}.{self.table}", skip.reason).inc()
            yield beam.pvalue.TaggedOutput(skip.kind, dead_letter(
                STAGE, self.table, record["source"], record["source_file"], record["source_index"], skip, record))
            return
        self.rows.inc()
        yield row


class MakeReplaceRows(_RowsOrDeadLetters):
    def __init__(self, table_path: str):
        super().__init__(REPLACE)
        self.table_path = table_path

    def setup(self):
        self.replace_table = ReplaceTable.load(self.table_path)

    def make_row(self, record):
        # One spacing for c, c_n and c_p: VL-CheckList keeps double and leading spaces in some captions c
        # ("ceiling has hanging  hanging lights") and not in their c_n, a cue a model could use alone. The rule
        # runs on the single-spaced texts (its word diff ignores spacing), so span_start indexes the caption row.
        caption, negative = single_spaced(record["caption"]), single_spaced(record["hard_negative"])
        r = replace_hard_positive(caption, negative, record["subset"], record["category"], self.replace_table)
        # One case for c, c_n and c_p, as the official release: VL-CheckList writes relations in capitals in
        # c ("letters ON sign") far more often than in c_n, a cue a cased text encoder could use alone.
        return {
            **{k: record[k] for k in ("example_id", "source", "source_file", "source_index", "subset", "category",
                                      "image_path", "image_id")},
            "caption": lower_case(caption),
            "hard_negative": lower_case(negative),
            "hard_positive": lower_case(r.hard_positive),
            "source_caption": record["caption"],
            "source_negative": record["hard_negative"],
            "replaced_from": r.pair.source,
            "replaced_to": r.pair.target,
            "span_start": r.span_start,
            "original_span": lower_case(r.original_span),
            "positive_span": lower_case(r.positive_span),
            "negative_span": lower_case(r.negative_span),
            "generator": eval_replace.GENERATOR,
            "table_sha256": self.replace_table.sha256,
        }


class MakeSwapRows(_RowsOrDeadLetters):
    def __init__(self):
        super().__init__(SWAP)

    def make_row(self, record):
        # Single-spaced alike, as REPLACE: c_p's phrases carry their spacing with them, so a double space of c
        # (and of c_n, which keeps c's order) would stand elsewhere in c_p alone.
        caption, negative = single_spaced(record["caption"]), single_spaced(record["hard_negative"])
        s = swap_hard_positive(caption, negative, tuple(record["attributes"]), record["obj1_name"],
                               record["obj2_name"])
        return {
            **{k: record[k] for k in ("example_id", "source", "source_file", "source_index", "image_path",
                                      "image_id", "bbox_x", "bbox_y", "bbox_w", "bbox_h")},
            "caption": caption,
            "hard_negative": negative,
            "subset": SWAP,
            "hard_positive": s.hard_positive,
            "attributes": list(s.attributes),
            "objects": list(s.objects),
            "generator": eval_swap.GENERATOR,
        }


def _replace_pair(row: dict) -> tuple:
    return tuple(row[f] for f in PAIR_FIELDS)


def _replace_table(opts: HardposOptions) -> str:
    return opts.replace_table or str(eval_replace.DEFAULT_TABLE)


def tables(opts: HardposOptions) -> list[str]:
    """The sets this run builds: each one whose source is given."""
    return [t for t, given in ((REPLACE, opts.vl_checklist_root), (SWAP, opts.aro_vga)) if given]


def check_inputs(opts: HardposOptions) -> None:
    """Fail fast, before any work, on a missing flag or a missing, unreadable or malformed input file."""
    if not tables(opts):
        raise UsageError("--stage=eval_sets needs --vl_checklist_root (REPLACE) and/or --aro_vga (SWAP)")
    if opts.vl_checklist_root:
        vl_checklist.check_root(opts.vl_checklist_root)
        try:
            ReplaceTable.load(_replace_table(opts))
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(f"--replace_table: {_replace_table(opts)}: {e}") from None
    if opts.aro_vga:
        aro.check_file(opts.aro_vga)


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    """Adds the graph of every set whose source is given; returns the PCollection of report counts."""
    counts = []
    for table in tables(opts):
        if table == REPLACE:
            source = vl_checklist.read_vl_checklist(opts.vl_checklist_root, STAGE, REPLACE, InputBounds.of(opts))
            make_rows, group = MakeReplaceRows(_replace_table(opts)), _replace_pair
        else:
            source = aro.read_aro_attribution(opts.aro_vga, STAGE, SWAP, InputBounds.of(opts))
            make_rows, group = MakeSwapRows(), None
        read = pipeline | f"Read{table.title()}Source" >> source
        built = read["records"] | f"Make{table.title()}Rows" >> beam.ParDo(make_rows).with_outputs(
            REJECTED, DISCARDED, main="rows")
        rejected = (read[REJECTED], built[REJECTED]) | f"{table.title()}Rejected" >> beam.Flatten()
        outputs = {"rows": built.rows, READ: read[READ], REJECTED: rejected, DISCARDED: built[DISCARDED]}
        counts.append(
            outputs | f"Write{table.title()}" >> WriteTableOutputs(
                STAGE, table, SCHEMAS[table], opts.output_dir, opts.rows_per_shard, group=group))
    return counts | "AllTables" >> beam.Flatten()


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    """Report sections of the built tables; REPLACE adds its per-subset and per-pair tables (paper Tables 4-6)."""
    sections = {}
    for table in tables(opts):
        if table == REPLACE:
            rt = ReplaceTable.load(_replace_table(opts))
            expected = [(s, c, p.source, p.target) for (s, c) in rt.categories() for p in rt.pairs_for(s, c)]
            section = table_report(table, counts, PAIR_FIELDS, expected)
            section.update(_pair_tables(section["groups"]["rows"], rt))
            section["replace_table_sha256"] = rt.sha256
        else:
            section = table_report(table, counts, [])
        sections[table] = section
    return sections


def _pair_tables(group_rows: list, rt: ReplaceTable) -> dict:
    pairs = {f"{s}/{c}": {f"{p.source} -> {p.target}": 0 for p in rt.pairs_for(s, c)} for s, c in rt.categories()}
    for subset, category, source, target, n in group_rows:
        pairs[f"{subset}/{category}"][f"{source} -> {target}"] = n
    categories = {name: sum(counts.values()) for name, counts in pairs.items()}
    subsets = defaultdict(int)
    for name, n in categories.items():
        subsets[name.split("/")[0]] += n
    return {"subsets": dict(subsets), "categories": categories, "pairs": pairs}
