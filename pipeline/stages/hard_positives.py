"""Stage hard_positives: rewrites of COCO captions that keep their meaning, one table for two kinds of source.

- LLM types (replace, swap, replace_verb, replace_preposition; --llm_engine, --prompt_set): captions -> prompts
  -> joined with the cache by key: hits answered from it, misses sent through RunInference -> validated -> rows
  or rejected dead letters (raw text and reason). The graph is stages/llm_rewrites.py's, which llm_negatives
  shares.
- Rule types (rule_swap, rule_converse, rule_voice, rule_clause, rule_replace) applied to every
  caption (stages/rule_positives.py), validated the same way; no model.
--positive_types picks them; by default the rules only, and the LLM's types first when an --llm_engine is given.
With both, the LLM is asked only about the captions no rule covers (--llm_prompts=uncovered, the default): the
report counts the prompts saved.
"""
from __future__ import annotations

import apache_beam as beam

from pipeline.io import spill
from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.report import table_report
from pipeline.llm.prompts import POSITIVE_TYPES, wants
from pipeline.options import HardposOptions, type_list
from pipeline.perturb.positives import RULE_POSITIVE_TYPES
from pipeline.sources import corpus
from pipeline.sources.files import InputBounds
from pipeline.stages.llm_rewrites import RewriteSpec, check_llm_options, count_units, report_section, rewrite_parts
from pipeline.stages.rule_positives import report_block, rule_parts, rule_types

STAGE = TABLE = "hard_positives"
ALL_TYPES = POSITIVE_TYPES + RULE_POSITIVE_TYPES
RULES_ONLY = ",".join(RULE_POSITIVE_TYPES)
WITH_LLM = ",".join(("replace", "swap") + RULE_POSITIVE_TYPES)


def default_types(opts: HardposOptions) -> str:
    """What --positive_types means when not given to a stage that makes positives: the rules only, so that a
    machine without a GPU builds the whole training set; the LLM's replace and swap first (the rules where it
    gave nothing) when an --llm_engine is named."""
    return WITH_LLM if opts.llm_engine else RULES_ONLY


def positive_types(opts: HardposOptions) -> list[str]:
    """--positive_types, in order; not given (train_set alone): every type, the LLM's first."""
    given = opts.positive_types  # an empty value names no type (refused), not every type
    return type_list("--positive_types", ",".join(ALL_TYPES) if given is None else given, ALL_TYPES)


def llm_kinds(opts: HardposOptions) -> list[str]:
    return [t for t in positive_types(opts) if t in POSITIVE_TYPES]


def spec(opts: HardposOptions) -> RewriteSpec:
    return RewriteSpec(STAGE, TABLE, "positive_type", "hard_positive", tuple(llm_kinds(opts)))


def tables(opts: HardposOptions) -> list[str]:
    return [TABLE]


def check_inputs(opts: HardposOptions) -> None:
    types = positive_types(opts)
    if llm_kinds(opts):
        check_llm_options(opts, STAGE)
    if rule_types(types):
        from pipeline.stages.captions import check_coco

        check_coco(opts, ["replace"])  # the spaCy parser and WordNet, as replace negatives need them


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    """The stage's graph, returning its report counts."""
    read = corpus.read_captions(pipeline, opts, STAGE, TABLE, InputBounds.of(opts))
    parts, saved = [], []
    rules = rule_types(positive_types(opts))
    if rules:
        parts.append(rule_parts(read["records"], opts, rules))
    if llm_kinds(opts):
        prompted = read["records"]
        if rules and llm_uncovered(opts):
            prompted, covered = _split_covered(read["records"], parts[0]["rows"])
            saved = [covered | "SavedPrompts" >> beam.FlatMap(
                lambda r, kinds: [(("llm", TABLE, "prompts_saved"), 1) for k in kinds if wants(k, r["caption"])],
                llm_kinds(opts)) | "SumSavedPrompts" >> beam.CombinePerKey(sum)]
        parts.insert(0, rewrite_parts(prompted, pipeline, opts, spec(opts)))
    # caption records that gave no prompt and no rule row: malformed ones, and (img2dataset) failed downloads
    malformed = [read[REJECTED] | "RejectedFiles" >> beam.Map(lambda d: d["source_file"]),
                 read[DISCARDED] | "DiscardedFiles" >> beam.Map(lambda d: d["source_file"])]
    discarded = [read[DISCARDED]] + [p[DISCARDED] for p in parts if DISCARDED in p]
    # emitted: an accepted LLM prompt, or a caption with a rule positive (it may have two rows, one per rule)
    emitted = [p["rows"] | "LlmEmitted" >> beam.Map(lambda r: r["source_file"]) if "emitted" not in p else p["emitted"]
               for p in parts]
    written = {
        "rows": [p["rows"] for p in parts] | "AllRows" >> beam.Flatten(),
        # read = LLM prompts + captions asked for rule positives + malformed caption records
        "read": count_units([p["units"] for p in parts] + malformed, ""),
        "emitted": emitted | "AllEmitted" >> beam.Flatten(),
        # parts, not a Flatten (a local runner keeps a Flatten whole): WriteTableOutputs writes them as one
        REJECTED: tuple([read[REJECTED]] + [p[REJECTED] for p in parts if REJECTED in p]),
        DISCARDED: tuple(discarded),
    } | "WriteTable" >> WriteTableOutputs(STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard,
                                         group=lambda r: (r["positive_type"],))
    captions = read["read"] | "CaptionCounts" >> beam.Map(lambda fn: (("llm", TABLE, "captions"), fn[1]))
    return ([written, captions] + [p["counts"] for p in parts if "counts" in p] + saved) | \
        "AllCounts" >> beam.Flatten()


def llm_uncovered(opts: HardposOptions) -> bool:
    """Whether the LLM is asked only about the captions no rule positive covers (--llm_prompts)."""
    return opts.llm_prompts == "uncovered" and bool(rule_types(positive_types(opts)))


def _split_covered(records, rule_rows):
    """Caption records -> (those with no rule positive, those with one): the LLM is asked only about the first."""
    keyed = {"record": records | "KeyRecordsForLlm" >> beam.Map(lambda r: (r["example_id"], r)),
             "rule": rule_rows | "KeyRuleRows" >> beam.Map(lambda r: (r["example_id"], 1))}
    grouped = spill.co_group_by_key(keyed, "CoveredByRules")
    split = grouped | "SplitCovered" >> beam.FlatMap(
        lambda item: [beam.pvalue.TaggedOutput("covered" if list(item[1]["rule"]) else "uncovered", r)
                      for r in item[1]["record"]]).with_outputs("covered", "uncovered")
    return split.uncovered, split.covered


def expected_units(opts: HardposOptions) -> dict[str, tuple]:
    """Progress totals: a prompt per (caption, LLM type) the caption gets, and a unit per caption for the rules;
    then the prompts alone (the LLM's answers come long before their rows)."""
    captions = corpus.caption_texts(opts)
    if captions is None or (llm_kinds(opts) and llm_uncovered(opts)):  # not known before reading the input, or
        return {TABLE: None}  # before the rules have run
    prompts = sum(wants(kind, c) for kind in llm_kinds(opts) for c in captions if isinstance(c, str))
    rules = len(captions) if rule_types(positive_types(opts)) else 0
    unit = " + ".join(name for name, n in (("prompts", prompts), ("captions", rules)) if n) or "captions"
    return {TABLE: (prompts + rules, unit, prompts)}


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    if llm_kinds(opts):
        section = report_section(counts, opts, spec(opts))
        section["llm_prompts"] = "uncovered" if llm_uncovered(opts) else "all"
        section.setdefault("prompts_saved", 0)
    else:
        section = table_report(TABLE, counts, ["positive_type"])
        section["captions"] = counts.get(("llm", TABLE, "captions"), 0)
    rules = rule_types(positive_types(opts))
    if rules:
        section["rule_types"] = report_block(section, rules, counts)
        from pipeline.perturb.substitution import replace_eval_pairs

        # what the rules left out, either direction (none with --allow_eval_substitutions): the card names them
        section["eval_substitutions_held_out"] = [] if opts.allow_eval_substitutions else \
            [f"{old} <-> {new}" for old, new in replace_eval_pairs()]
    section["positive_types_asked"] = positive_types(opts)
    return {TABLE: section}
