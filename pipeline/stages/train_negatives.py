"""Stage train_negatives: rule-based hard negatives for COCO captions, one table of (caption, negative) rows."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.report import table_report
from pipeline.options import HardposOptions, type_list
from pipeline.perturb.generators import NEGATIVE_TYPES, version
from pipeline.perturb.outcomes import Discard
from pipeline.stages.captions import CaptionRowsFn, WriteSamples, check_coco, make_rows

STAGE = TABLE = "train_negatives"
SAMPLES_FILE = "train_negatives_samples.md"
GROUP_FIELDS = ["negative_type", "atom", "first_of_caption"]


def negative_types(opts: HardposOptions) -> list[str]:
    return type_list("--negative_types", opts.negative_types, NEGATIVE_TYPES, allow_all=True)


class MakeNegativeRows(CaptionRowsFn):
    stage, table = STAGE, TABLE

    def __init__(self, negative_types: list[str], per_caption: int, seed: int, spacy_model, batch_size: int):
        super().__init__(negative_types, spacy_model, batch_size)
        self.per_caption, self.seed = per_caption, seed

    def rows(self, record, doc):
        rows = []
        for negative_type in self.negative_types:
            found = self.generators.generate(negative_type, doc, self.seed, record["example_id"], self.per_caption)
            for index, (candidate, atom) in enumerate(found):
                rows.append({
                    **{k: record[k] for k in ("example_id", "caption_id", "image_id", "file_name", "image_url",
                                              "source_file", "caption")},
                    "hard_negative": candidate.text,
                    "negative_type": negative_type,
                    "negative_index": index,
                    "atom": atom,
                    "changed_span": candidate.changed_span,
                    "new_span": candidate.new_span,
                    "span_start": candidate.span_start,
                    "span_end": candidate.span_end,
                    "generator": version(negative_type),
                    "seed": self.seed,
                })
        if not rows:
            raise Discard("no_candidate", f"no {' / '.join(self.negative_types)} negative for this caption")
        return rows


def _group(row: dict) -> tuple:
    return row["negative_type"], row["atom"] or "", row["negative_index"] == 0


def tables(opts: HardposOptions) -> list[str]:
    return [TABLE]


def check_inputs(opts: HardposOptions) -> None:
    check_coco(opts, negative_types(opts))


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    return build_rows(pipeline, opts)["counts"]


def build_rows(pipeline: beam.Pipeline, opts: HardposOptions) -> dict:
    """The stage's graph; returns {"rows": negative rows, "counts": report counts} (train_set joins the rows)."""
    types = negative_types(opts)
    fn = MakeNegativeRows(types, opts.negatives_per_caption, opts.seed, opts.spacy_model, opts.nlp_batch_size)
    outputs = make_rows(pipeline, opts, STAGE, TABLE, fn)
    _ = outputs["rows"] | "WriteSamples" >> WriteSamples(
        FileSystems.join(opts.output_dir, SAMPLES_FILE), "train_negatives: random (caption, hard negative) pairs",
        lambda r: r["negative_type"], ["caption", "hard_negative", "atom"], opts.seed)
    counts = outputs | "WriteTable" >> WriteTableOutputs(STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard,
                                                         group=_group)
    return {"rows": outputs["rows"], "counts": counts}


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    section = table_report(TABLE, counts, GROUP_FIELDS)
    captions = section["read"] - section["rejected"]
    by_type = {t: {"captions_with_negative": 0, "rows": 0} for t in negative_types(opts)}
    atoms = {}
    for negative_type, atom, first, n in section["groups"]["rows"]:
        by_type[negative_type]["rows"] += n
        if first:
            by_type[negative_type]["captions_with_negative"] += n
            if atom:
                atoms[atom] = atoms.get(atom, 0) + n
    for stats in by_type.values():
        stats["yield"] = round(stats["captions_with_negative"] / captions, 4) if captions else 0.0
    section.update({"negative_types": by_type, "replace_atoms": atoms, "samples_file": SAMPLES_FILE,
                    "negatives_per_caption": opts.negatives_per_caption, "seed": opts.seed})
    return {TABLE: section}
