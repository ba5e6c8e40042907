"""LLM hard negatives (SugarCrepe's approach): an LLM rewrites a caption to describe another scene, one object,
attribute or relation replaced (llm_replace_obj/att/rel) or two objects or attributes swapped (llm_swap_obj/att),
with prompts written from SugarCrepe's (prompts/negatives/). The answers go through the positives' one-span and
same-words rules and the rule-based negatives' meaning checks (llm/validate.validate_negative); the graph,
cache and resume are the hard positives' (stages/llm_rewrites.py).

Not a stage of its own: the types are chosen in --negative_types, next to the rule-based ones, and
train_negatives (and --stage=all) write this table beside train_negatives; train_set takes the first type of
--negative_types a caption has, so an LLM negative can come first with a rule-based one to fall back on.
"""
from __future__ import annotations

import apache_beam as beam

from pipeline.llm.prompts import LLM_NEGATIVE_TYPES
from pipeline.options import HardposOptions
from pipeline.stages.llm_rewrites import RewriteSpec, build_rewrites, check_llm_options, report_section

TABLE = "llm_negatives"


def llm_types(types: list[str]) -> list[str]:
    return [t for t in types if t in LLM_NEGATIVE_TYPES]


def spec(stage: str, types: list[str]) -> RewriteSpec:
    return RewriteSpec(stage, TABLE, "negative_type", "hard_negative", tuple(llm_types(types)))


def check_inputs(opts: HardposOptions, stage: str) -> None:
    check_llm_options(opts, stage)


def build(pipeline: beam.Pipeline, opts: HardposOptions, stage: str, types: list[str]):
    return build_rewrites(pipeline, opts, spec(stage, types))


def report_section_of(counts: dict, opts: HardposOptions, stage: str, types: list[str]) -> dict:
    return report_section(counts, opts, spec(stage, types))
