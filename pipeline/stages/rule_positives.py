"""The rule-based part of the hard_positives table: rule_replace and rule_swap (perturb/positives.py) for every
caption, validated as an LLM answer of the kind they stand for is (llm/validate.py), with no model loaded.

The unit of account is the caption, as in train_negatives: it gives a row per rule type that found a positive
(it is "emitted"), or one discarded dead letter, no_rule_positive, whose detail says per type why (no_table_synonym
/ no_exchangeable_and: nothing the rule may change; no_valid_candidate: every candidate failed the validation).
One letter per caption, not per type: at 591,753 captions a letter per (caption, type) was 778,000 letters held
in the launcher of a local runner.
"""
from __future__ import annotations

import apache_beam as beam

from pipeline.io.dead_letters import DISCARDED, dead_letter
from pipeline.llm.validate import shared_validator
from pipeline.perturb.generators import PARSER, TAGGER, spacy_pipeline
from pipeline.perturb.outcomes import Discard
from pipeline.perturb.positives import NO_CANDIDATE, RULE_POSITIVE_TYPES, VALIDATED_AS, RulePositives, \
    data_sha256, in_preference, version

ROW_FIELDS = ("example_id", "caption_id", "image_id", "file_name", "image_url", "source_file", "caption")
UNITS, EMITTED = "units", "emitted"
NO_RULE_POSITIVE = "no_rule_positive"


def rule_types(types) -> list[str]:
    return [t for t in types if t in RULE_POSITIVE_TYPES]


class MakeRulePositives(beam.DoFn):
    """Batch of caption records -> one row per (caption, rule type) with a valid positive; per caption its
    source_file as a unit of account, and as emitted when it gave a row, else one discarded letter."""

    def __init__(self, positive_types: list[str], spacy_model: str | None, batch_size: int, seed: int,
                 wordnet: bool):
        self.positive_types, self.spacy_model, self.batch_size = positive_types, spacy_model, batch_size
        self.seed, self.wordnet = seed, wordnet

    def setup(self):
        self.nlp = spacy_pipeline({TAGGER, PARSER}, self.spacy_model)
        self.rules = RulePositives.load(self.positive_types)
        self.validator = shared_validator(self.wordnet)

    def process(self, batch):
        docs = self.nlp.pipe((r["caption"] for r in batch), batch_size=self.batch_size)
        for record, doc in zip(batch, docs, strict=True):
            yield beam.pvalue.TaggedOutput(UNITS, record["source_file"])
            found = self.rules.propose(doc)
            outcomes = [self._first_valid(record, t, found[t]) for t in self.positive_types]
            rows = [o for o in outcomes if not isinstance(o, Discard)]
            if rows:
                yield beam.pvalue.TaggedOutput(EMITTED, record["source_file"])
                yield from rows
                continue
            detail = " | ".join(f"{t}: {o.reason} {o.detail}".strip() for t, o in zip(self.positive_types, outcomes,
                                                                                      strict=True))
            yield beam.pvalue.TaggedOutput(DISCARDED, dead_letter(
                "hard_positives", "hard_positives", record["source"], record["source_file"], record["source_index"],
                Discard(NO_RULE_POSITIVE, detail[:2000]), {k: record[k] for k in ("example_id", "caption_id",
                                                                                  "caption")}))

    def _first_valid(self, record: dict, positive_type: str, candidates: list):
        if not candidates:
            return Discard(NO_CANDIDATE[positive_type])
        element = {"kind": VALIDATED_AS[positive_type], "caption": record["caption"]}
        reasons = []
        for candidate in in_preference(candidates, self.seed, record["example_id"], positive_type):
            verdict = self.validator(element, {"text": candidate.text, "finish_reason": "stop"})
            if verdict.ok:
                # the candidate's text: the validation's equals it but for runs of spaces the rule keeps
                return {**{k: record[k] for k in ROW_FIELDS}, **_provenance(positive_type),
                        "positive_type": positive_type, "hard_positive": candidate.text,
                        "changed_span": verdict.detail or None}
            reasons.append(f"{candidate.text!r}: {verdict.reason} {verdict.detail}".strip())
        return Discard("no_valid_candidate", " | ".join(reasons))


def _provenance(positive_type: str) -> dict:
    """A rule row's generator; the LLM's columns are empty (no model, prompt or sampling made it)."""
    return {"generator": version(positive_type), "model": None, "llm_engine": None, "prompt_set": None,
            "prompt_sha256": None, "chat_format": None, "max_new_tokens": None, "temperature": None, "top_p": None,
            "sampling_seed": None, "attempt": None, "output_tokens": None}


def rule_parts(records, opts, types: list[str]) -> dict:
    """{"rows", "units" and "emitted" (the source_file of each caption, and of each that gave a row),
    "discarded", "counts" (captions asked)} from caption records."""
    batches = records | "BatchRuleCaptions" >> beam.BatchElements(min_batch_size=opts.nlp_batch_size,
                                                                   max_batch_size=opts.nlp_batch_size * 4)
    made = batches | "RulePositives" >> beam.ParDo(MakeRulePositives(
        types, opts.spacy_model, opts.nlp_batch_size, opts.seed, opts.positive_checks == "wordnet")).with_outputs(
        UNITS, EMITTED, DISCARDED, main="rows")
    captions = records | "RuleCaptions" >> beam.Map(lambda _: (("rules", "hard_positives", "captions"), 1))
    return {"rows": made.rows, "units": made[UNITS], EMITTED: made[EMITTED], DISCARDED: made[DISCARDED],
            "counts": captions}


def report_block(section: dict, types: list[str], counts: dict) -> dict:
    """Per rule type: captions asked, rows, yield; and the generator versions and data files."""
    captions = counts.get(("rules", "hard_positives", "captions"), 0)
    rows = {kind: n for kind, n in section["groups"]["rows"]}
    return {t: {"captions": captions, "rows": rows.get(t, 0),
                "yield": round(rows.get(t, 0) / captions, 4) if captions else 0.0,
                "generator": version(t), "data_sha256": data_sha256()[t]} for t in types}
