"""Stage order_eval: ARO's COCO-Order style table, each caption with its four word-order perturbations.

A caption for which one of the four cannot change the text (e.g. a single noun and adjective to shuffle) is
discarded with the perturbation's name: an unchanged option would duplicate the correct answer.
"""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.report import table_report
from pipeline.options import HardposOptions
from pipeline.perturb.generators import version
from pipeline.perturb.neg_order import ARO_ORDER
from pipeline.perturb.outcomes import Discard
from pipeline.perturb.text import single_spaced
from pipeline.records import CAPTION_FIELDS
from pipeline.stages.captions import CaptionRowsFn, WriteSamples, check_coco, make_rows

STAGE = TABLE = "order_eval"
SAMPLES_FILE = "order_eval_samples.md"


class MakeOrderRows(CaptionRowsFn):
    stage, table = STAGE, TABLE

    def __init__(self, seed: int, spacy_model, batch_size: int):
        super().__init__(list(ARO_ORDER), spacy_model, batch_size)
        self.seed = seed

    def rows(self, record, doc):
        # The five options single-spaced alike: an option keeps the caption's spacing by position, so a double
        # space of the caption (296 of val2017's rows) stood in some options and not in others, a cue.
        row = {k: record[k] for k in CAPTION_FIELDS if k != "caption"}
        row["caption"] = single_spaced(record["caption"])
        for name in ARO_ORDER:
            found = self.generators.order(name, doc, self.seed, record["example_id"], 1)
            if not found:
                raise Discard(f"no_{name}", f"no word order of {name} differs from the caption")
            row[name] = single_spaced(found[0].text)  # differs from the caption in words (same_text), not spacing
        row.update({"generator": version("aro_order"), "seed": self.seed})
        return [row]


def tables(opts: HardposOptions) -> list[str]:
    return [TABLE]


def check_inputs(opts: HardposOptions) -> None:
    check_coco(opts, list(ARO_ORDER))


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    outputs = make_rows(pipeline, opts, STAGE, TABLE, MakeOrderRows(opts.seed, opts.spacy_model, opts.nlp_batch_size))
    _ = outputs["rows"] | "WriteSamples" >> WriteSamples(
        FileSystems.join(opts.output_dir, SAMPLES_FILE), "order_eval: random captions and their perturbations",
        lambda r: "aro_order", ["caption", *ARO_ORDER], opts.seed)
    return outputs | "WriteTable" >> WriteTableOutputs(STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard)


def expected_units(opts: HardposOptions) -> dict[str, tuple[int, str]]:
    """Progress totals: a record per caption (None where not known before reading the input)."""
    from pipeline.sources import corpus

    captions = corpus.expected_records(opts)
    return {TABLE: (captions, "captions") if captions is not None else None}


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    section = table_report(TABLE, counts, [])
    section.update({"samples_file": SAMPLES_FILE, "seed": opts.seed})
    return {TABLE: section}
