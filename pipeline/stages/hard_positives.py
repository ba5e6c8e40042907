"""Stage hard_positives: LLM rewrites of COCO captions that keep their meaning, validated, cached, resumable.

captions -> prompts (REPLACE for every caption, SWAP for captions with "and" and < 15 words, ...; --prompt_set)
         -> joined with the cache by key: hits answered from it, misses sent through RunInference
         -> validated -> rows (accepted) or rejected dead letters (raw text and reason).
The graph is stages/llm_rewrites.py's, which llm_negatives shares.
"""
from __future__ import annotations

import apache_beam as beam

from pipeline.llm.prompts import POSITIVE_TYPES
from pipeline.options import HardposOptions, type_list
from pipeline.stages.llm_rewrites import RewriteSpec, build_rewrites, check_llm_options, report_section

STAGE = TABLE = "hard_positives"


def positive_types(opts: HardposOptions) -> list[str]:
    return type_list("--positive_types", opts.positive_types, POSITIVE_TYPES)


def spec(opts: HardposOptions) -> RewriteSpec:
    return RewriteSpec(STAGE, TABLE, "positive_type", "hard_positive", tuple(positive_types(opts)))


def tables(opts: HardposOptions) -> list[str]:
    return [TABLE]


def check_inputs(opts: HardposOptions) -> None:
    check_llm_options(opts, STAGE)
    positive_types(opts)


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    """The stage's graph, returning its report counts."""
    return build_rewrites(pipeline, opts, spec(opts))


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    return {TABLE: report_section(counts, opts, spec(opts))}
