"""The rule-based part of the hard_positives table: rule_replace, rule_swap and rule_clause (perturb/positives.py)
for every caption, validated as an LLM answer of the kind they stand for is (llm/validate.py), with no model loaded.

Two passes, so that the table teaches many substitutions and not a word list:
1. ProposeRulePositives parses each caption and keeps every valid candidate per type with its substitution key
   (perturb/substitution.py: "man" -> "guy" and "men" -> "guys" are one). A candidate whose substitution is one of
   the REPLACE evaluation set's (either direction) is held out unless --allow_eval_substitutions.
2. The corpus statistic: in how many captions each substitution is a candidate. ChooseRulePositives (a side
   input) takes, per caption and type, the candidate of the rarest substitution; and caps every substitution at
   --max_substitution_share of the type's captions: where a substitution is a candidate in more captions than
   that, a seeded draw per (caption, substitution) admits it in only that many. A caption whose every candidate
   lost the draw is a dead letter (over_share).
The choice depends on the whole input and the seed only: the same rows whatever the sharding or worker order.

The unit of account is the caption, as in train_negatives: it gives a row per rule type that found a positive (it
is "emitted"), or one discarded dead letter, no_rule_positive, whose detail says per type why (no_table_synonym /
no_exchangeable_and / no_clause_form: nothing the rule may change; no_valid_candidate: every candidate failed the
validation; held_out_eval_substitution: only REPLACE's substitutions; over_share). One letter per caption, not per
type: at 591,753 captions a letter per (caption, type) was 778,000 letters held in the launcher of a local runner.
"""
from __future__ import annotations

import hashlib
import math
from collections import Counter

import apache_beam as beam

from pipeline.io import parses, spill
from pipeline.io.dead_letters import DISCARDED, dead_letter
from pipeline.io.report import SumCounts
from pipeline.llm.validate import shared_validator
from pipeline.perturb import substitution
from pipeline.perturb.generators import PARSER, TAGGER, spacy_pipeline
from pipeline.perturb.outcomes import Discard
from pipeline.perturb.pos_replace import RULE_REPLACE
from pipeline.perturb.positives import NO_CANDIDATE, OWN_CHECKS, RULE_POSITIVE_TYPES, VALIDATED_AS, \
    RulePositives, data_sha256, in_preference, version
from pipeline.records import CAPTION_FIELDS

ROW_FIELDS = CAPTION_FIELDS
RECORD_FIELDS = (*ROW_FIELDS, "source", "source_index")
UNITS, EMITTED = "units", "emitted"
NO_RULE_POSITIVE = "no_rule_positive"
HELD_OUT, OVER_SHARE = "held_out_eval_substitution", "over_share"
# Why an LLM's replace answer is refused that says nothing against a pair of the synonym table: the span's shape
# (a word added or dropped, a phrase for a phrase) and the WordNet check (the table is the authority on its pairs).
TABLE_SHAPES = frozenset({"words_added", "words_deleted", "more_than_one_word", "more_than_one_span",
                          "span_too_long", "same_word", "no_content_word", "not_a_synonym"})
# Applicability counts that are not a substitution's: captions with a candidate, with a held-out one, left with
# none because of the hold-out.
CAPTIONS, HELD, HELD_LOST = "__captions__", "__held_out__", "__held_out_lost__"
ADDS_BE, DROPS_BE = "__adds_be__", "__drops_be__"  # captions with an option that adds / takes out "is", "are"
BE = frozenset({"is", "are", "was", "were"})
# Up to this many captions a substitution is always admitted: the share cap is for a corpus, not for a sample
# of a few hundred captions, where every substitution is a large share.
MIN_ALLOWANCE = 20
BIN_RATIO = 1.01  # the allowance's resolution: 1%


def rule_types(types) -> list[str]:
    return [t for t in types if t in RULE_POSITIVE_TYPES]


def substitution_key(old: str, new: str) -> str:
    """The candidate's substitution, inflection aside, as a string a count can be keyed by."""
    before, after = substitution.key(old, new)
    return f"{' '.join(before)} -> {' '.join(after)}"


class ProposeRulePositives(beam.DoFn):
    """Batch of caption records (or, from a chain's parse table, a (records, their parses) pair) -> per caption its
    valid candidates per rule type, each with its substitution key; per caption its source_file as a unit of
    account."""

    def __init__(self, positive_types: list[str], spacy_model: str | None, batch_size: int, wordnet: bool,
                 allow_eval_substitutions: bool):
        self.positive_types, self.spacy_model, self.batch_size = positive_types, spacy_model, batch_size
        self.wordnet, self.allow_eval_substitutions = wordnet, allow_eval_substitutions

    def setup(self):
        self.nlp = spacy_pipeline({TAGGER, PARSER}, self.spacy_model)
        self.rules = RulePositives.load(self.positive_types)
        self.validator = shared_validator(self.wordnet)
        self.held_out = frozenset() if self.allow_eval_substitutions else substitution.replace_eval_keys()

    def process(self, batch):
        if isinstance(batch, tuple):
            batch, docs = batch[0], parses.from_bytes(batch[1], self.nlp.vocab, batch[0])
        else:
            docs = self.nlp.pipe((r["caption"] for r in batch), batch_size=self.batch_size)
        for record, doc in zip(batch, docs, strict=True):
            yield beam.pvalue.TaggedOutput(UNITS, record["source_file"])
            found = self.rules.propose(doc)
            item = {"record": {k: record[k] for k in RECORD_FIELDS}, "options": {}, "why": {}, "held_out": []}
            for t in self.positive_types:
                options, reasons, held = self._valid(record["caption"], t, found[t])
                item["options"][t] = options
                if held:
                    item["held_out"].append(t)
                if not options:
                    reason = NO_CANDIDATE[t] if not found[t] else HELD_OUT if held and not reasons else \
                        "no_valid_candidate"
                    item["why"][t] = [reason, " | ".join(reasons)]
            yield item

    def _valid(self, caption: str, positive_type: str, candidates: list) -> tuple[list[dict], list[str], int]:
        """(the valid candidates as {text, span, key}, why the others failed, how many were held out)."""
        options, reasons, held = [], [], 0
        for candidate in candidates:
            kind = VALIDATED_AS[positive_type]
            if kind is None:
                ok, detail = OWN_CHECKS[positive_type](caption, candidate.text), ""
                why = "" if ok else "words_changed"
            else:
                verdict = self.validator({"kind": kind, "caption": caption},
                                         {"text": candidate.text, "finish_reason": "stop"})
                ok, detail, why = verdict.ok, verdict.detail, f"{verdict.reason} {verdict.detail}".strip()
                if not ok and positive_type == RULE_REPLACE and verdict.reason in TABLE_SHAPES:
                    # a phrase of the table ("filled with" -> "full of", "fire hydrant" -> "hydrant"): an LLM
                    # answer of that shape is refused as likely wrong; the table's pairs were read one by one
                    ok, detail = True, f"{candidate.changed_span.lower()!r} -> {candidate.new_span.lower()!r}"
            if not ok:
                reasons.append(f"{candidate.text!r}: {why}")
                continue
            key = substitution.key(candidate.changed_span, candidate.new_span)
            if key in self.held_out:
                held += 1
                continue
            span = detail or (f"{candidate.changed_span.lower()!r} -> {candidate.new_span.lower()!r}"
                              if kind is None else None)
            # the candidate's text: the validation's equals it but for runs of spaces the rule keeps
            surface = f"{candidate.changed_span.lower()} -> {candidate.new_span.lower()}"
            # the cap's unit: a synonym or an exchange inflection aside; a clause's rewrite as written ("riding ->
            # is riding" and "is riding -> rides" are two ways of saying, where a stem would make them one)
            flow = sum(w in BE for w in substitution.words(candidate.new_span)) - \
                sum(w in BE for w in substitution.words(candidate.changed_span))
            options.append({"text": candidate.text, "span": span, "surface": surface, "flow": flow,
                            "key": surface if kind is None else substitution_key(candidate.changed_span,
                                                                                 candidate.new_span)})
        return options, reasons, held


def applicability(item: dict):
    """((type, substitution key), 1) for every distinct key a caption may take, ((type, CAPTIONS), 1) per type
    it has any for; and the held-out counts."""
    for t, options in item["options"].items():
        for key in sorted({o["key"] for o in options}):
            yield (t, key), 1
        if options:
            yield (t, CAPTIONS), 1
        if any(o["flow"] > 0 for o in options):
            yield (t, ADDS_BE), 1
        if any(o["flow"] < 0 for o in options):
            yield (t, DROPS_BE), 1
    for t in item["held_out"]:
        yield (t, HELD), 1
        if not item["options"][t]:
            yield (t, HELD_LOST), 1


def balanced(options: list[dict], t: str, example_id: str, seed: int, counts: dict, on: bool = True) -> list[dict]:
    """With `on` (--balance_is), the options without those that add "is"/"are" where the draw says the type has
    enough of them: a caption rewrite may add it in as many captions as another may take it out ("A man riding" ->
    "A man is riding" as often as "A man is riding" -> "A man rides"), else "is" alone marks the positive against
    its caption to a text-only model. Off by default: the training set's negative is made from the positive
    (--negative_from), so "is" is in both."""
    adds, drops = counts.get((t, ADDS_BE), 0), counts.get((t, DROPS_BE), 0)
    if not on or not adds or draw(seed, example_id, t, ADDS_BE) * adds < drops:
        return options
    return [o for o in options if o["flow"] <= 0]


def draw(seed: int, example_id: str, positive_type: str, key: str) -> float:
    """A number in [0, 1) fixed by (seed, caption, type, substitution): the cap's draw."""
    digest = hashlib.sha256(f"{seed}\x00{example_id}\x00{positive_type}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def threshold(item: dict, counts: dict, seed: int, balance: bool = False):
    """((type, bin), 1) per type the caption has candidates for: the bin of the smallest allowance that would admit
    one of them (draw x applicability below it), on a log scale of ratio BIN_RATIO. The histogram says, for any
    allowance, how many captions would get a row: the allowance is then chosen against the rows it gives."""
    example_id = item["record"]["example_id"]
    for t, options in item["options"].items():
        options = balanced(options, t, example_id, seed, counts, balance)
        if options:
            tau = min(draw(seed, example_id, t, o["key"]) * counts[(t, o["key"])] for o in options)
            yield (t, math.floor(math.log(max(tau, 1e-9)) / math.log(BIN_RATIO))), 1


def allowances(histogram: dict, max_share: float) -> dict:
    """Per type the largest allowance a such that a <= max_share x (captions a admits a row for): then no
    substitution is more than max_share of the rows the type gets (up to the draw's spread). Integer counts in,
    so the same for any sharding."""
    out = {}
    for t in sorted({t for t, _ in histogram}):
        admitted, best = 0, MIN_ALLOWANCE
        for b in sorted(k for u, k in histogram if u == t):
            admitted += histogram[(t, b)]
            edge = BIN_RATIO ** (b + 1)  # every caption of this bin and below is admitted at this allowance
            if edge <= max_share * admitted:
                best = max(best, edge)
        out[t] = best
    return out


def _rarest(options: list[dict], seed: int, example_id: str, t: str, counts: dict) -> dict:
    ranked = in_preference(options, seed, example_id, t)
    return min(ranked, key=lambda o: counts[(t, o["key"])])  # the first of the rarest


class FirstChoice(beam.DoFn):
    """Round 1: per caption and type, the candidate of the rarest substitution the cap's draw admits; a type whose
    every candidate lost the draw waits for round 2. Counts per substitution what round 1 took and what waits."""

    def __init__(self, positive_types: list[str], seed: int, balance: bool = False):
        self.positive_types, self.seed, self.balance = positive_types, seed, balance

    def process(self, item, counts: dict, allowance: dict):
        example_id, item["chosen"], item["waiting"] = item["record"]["example_id"], {}, []
        for t in self.positive_types:
            options = balanced(item["options"][t], t, example_id, self.seed, counts, self.balance)
            admitted = [o for o in options
                        if draw(self.seed, example_id, t, o["key"]) * counts[(t, o["key"])] < allowance[t]]
            if admitted:
                chosen = _rarest(admitted, self.seed, example_id, t, counts)
                item["chosen"][t] = chosen
                yield beam.pvalue.TaggedOutput("round1", ((t, "taken", chosen["key"]), 1))
            elif item["options"][t]:
                item["waiting"].append(t)
                for key in sorted({o["key"] for o in options}):
                    yield beam.pvalue.TaggedOutput("round1", ((t, "waiting", key), 1))
        yield item


class SecondChoice(beam.DoFn):
    """Round 2: what round 1's draw admitted but the captions took elsewhere is offered, by a second draw, to
    the captions still waiting (those with no other way to get a row of the type), up to the same cap. Then
    rows; per caption its source_file as emitted when it gave a row, else one discarded letter."""

    def __init__(self, positive_types: list[str], seed: int, balance: bool = False):
        self.positive_types, self.seed, self.balance = positive_types, seed, balance

    def process(self, item, counts: dict, allowance: dict, round1: dict):
        record, rows, outcomes = item["record"], [], []
        for t in self.positive_types:
            options, chosen = item["options"][t], item["chosen"].get(t)
            if t in item["waiting"]:
                options = balanced(options, t, record["example_id"], self.seed, counts, self.balance)
                admitted = [o for o in options if
                            draw(self.seed + 1, record["example_id"], t, o["key"]) * round1[(t, "waiting", o["key"])]
                            < allowance[t] - round1.get((t, "taken", o["key"]), 0)]
                chosen = _rarest(admitted, self.seed, record["example_id"], t, counts) if admitted else None
            if chosen is None:
                outcomes.append(Discard(*item["why"][t]) if not item["options"][t] else
                                Discard(OVER_SHARE, ", ".join(sorted({o["key"] for o in item["options"][t]}))))
                continue
            rows.append({**{k: record[k] for k in ROW_FIELDS}, **_provenance(t), "positive_type": t,
                         "hard_positive": chosen["text"], "changed_span": chosen["span"]})
            outcomes.append(None)
            yield beam.pvalue.TaggedOutput("chosen", (("rules", "hard_positives", "substitution", t,
                                                       chosen["key"], chosen["surface"]), 1))
        if rows:
            yield beam.pvalue.TaggedOutput(EMITTED, record["source_file"])
            yield from rows
            return
        detail = " | ".join(f"{t}: {o.reason} {o.detail}".strip() for t, o in zip(self.positive_types, outcomes,
                                                                                  strict=True))
        yield beam.pvalue.TaggedOutput(DISCARDED, dead_letter(
            "hard_positives", "hard_positives", record["source"], record["source_file"], record["source_index"],
            Discard(NO_RULE_POSITIVE, detail[:2000]), {k: record[k] for k in ("example_id", "caption_id",
                                                                              "caption")}))


def _provenance(positive_type: str) -> dict:
    """A rule row's generator; the LLM's columns are empty (no model, prompt or sampling made it)."""
    return {"generator": version(positive_type), "model": None, "llm_engine": None, "prompt_set": None,
            "prompt_sha256": None, "chat_format": None, "max_new_tokens": None, "temperature": None, "top_p": None,
            "sampling_seed": None, "attempt": None, "output_tokens": None}


def rule_parts(records, opts, types: list[str]) -> dict:
    """{"rows", "units" and "emitted" (the source_file of each caption, and of each that gave a row),
    "discarded", "counts" (captions asked, substitutions applicable, held out and chosen)} from caption
    records. In a chain whose train_negatives kept its parses (io/parses.py) the captions come parsed from there,
    checked to be the records read."""
    table = parses.reading_table()
    if table:
        batches = parses.read_batches(records.pipeline, table)
        _ = parses.check_same(records, batches, table)
    else:
        batches = records | "BatchRuleCaptions" >> beam.BatchElements(min_batch_size=opts.nlp_batch_size,
                                                                       max_batch_size=opts.nlp_batch_size * 4)
    proposed = batches | "ProposeRulePositives" >> beam.ParDo(ProposeRulePositives(
        types, opts.spacy_model, opts.nlp_batch_size, opts.positive_checks == "wordnet",
        opts.allow_eval_substitutions)).with_outputs(UNITS, main="items")
    applicable = (proposed.items | "RuleApplicability" >> beam.FlatMap(applicability)
                  | "SumApplicability" >> beam.CombineGlobally(SumCounts()))
    # a spilling run writes the items to files and reads them back in each pass that waits on a corpus figure
    # (a local runner would hold them all between the passes)
    items = spill.spill(proposed.items, "RuleItems")
    histogram = (spill.unspill(items, "RuleItemsForThresholds", beam.pvalue.AsSingleton(applicable))
                 | "RuleThresholds" >> beam.FlatMap(threshold, beam.pvalue.AsSingleton(applicable), opts.seed,
                                                   opts.balance_is)
                 | "SumThresholds" >> beam.CombineGlobally(SumCounts()))
    allowance = histogram | "RuleAllowances" >> beam.Map(allowances, opts.max_substitution_share)
    first = spill.unspill(items, "RuleItemsForFirstChoice", beam.pvalue.AsSingleton(applicable),
                          beam.pvalue.AsSingleton(allowance)) | "FirstChoice" >> beam.ParDo(
        FirstChoice(types, opts.seed, opts.balance_is), beam.pvalue.AsSingleton(applicable),
        beam.pvalue.AsSingleton(allowance)).with_outputs("round1", main="items")
    round1 = first.round1 | "SumFirstChoice" >> beam.CombineGlobally(SumCounts())
    second = spill.unspill(spill.spill(first.items, "RuleItemsRound1"), "RuleItemsRound1",
                           beam.pvalue.AsSingleton(round1))
    chosen = second | "SecondChoice" >> beam.ParDo(
        SecondChoice(types, opts.seed, opts.balance_is), beam.pvalue.AsSingleton(applicable),
        beam.pvalue.AsSingleton(allowance),
        beam.pvalue.AsSingleton(round1)).with_outputs(EMITTED, DISCARDED, "chosen", main="rows")
    captions = proposed[UNITS] | "RuleCaptions" >> beam.Map(lambda _: (("rules", "hard_positives", "captions"), 1))
    shown = applicable | "ApplicabilityCounts" >> beam.FlatMap(
        lambda counts: [(("rules", "hard_positives", "applicable", t, key), n) for (t, key), n in counts.items()
                        if key.startswith("__")])
    # summed where made: a count per caption would cross a local runner one element each
    counts = ([c | f"SumRuleCounts{i}" >> beam.CombinePerKey(sum) for i, c in enumerate((captions, shown,
                                                                                         chosen["chosen"]))]
              | "RuleCounts" >> beam.Flatten())
    return {"rows": chosen.rows, "units": proposed[UNITS], EMITTED: chosen[EMITTED], DISCARDED: chosen[DISCARDED],
            "counts": counts}


def report_block(section: dict, types: list[str], counts: dict) -> dict:
    """Per rule type: captions asked, captions with a candidate, rows, yield; the substitutions (how many
    distinct, the largest share, the commonest), what the REPLACE hold-out left out; the generator versions and
    data files."""
    captions = counts.get(("rules", "hard_positives", "captions"), 0)
    rows = {kind: n for kind, n in section["groups"]["rows"]}
    block = {}
    for t in types:
        by_key, by_surface = Counter(), Counter()
        for k, n in counts.items():
            if k[:4] == ("rules", "hard_positives", "substitution", t):
                by_key[k[4]] += n
                by_surface[k[5]] += n
        total = sum(by_key.values())
        top = sorted(by_surface.items(), key=lambda kv: (-kv[1], kv[0]))
        applicable = lambda name: counts.get(("rules", "hard_positives", "applicable", t, name), 0)  # noqa: E731
        block[t] = {"captions": captions, "captions_with_candidate": applicable(CAPTIONS), "rows": rows.get(t, 0),
                    "yield": round(rows.get(t, 0) / captions, 4) if captions else 0.0,
                    # as written ("man -> guy", "men -> guys") and inflection aside (one: the cap's unit)
                    "distinct_substitutions": len(by_surface), "distinct_substitutions_any_inflection": len(by_key),
                    "largest_share": round(max(by_key.values()) / total, 4) if total else 0.0,
                    "commonest_substitutions": [[k, n, round(n / total, 4)] for k, n in top[:10]],
                    "held_out_eval_substitution": {"captions_with_one": applicable(HELD),
                                                   "captions_left_without": applicable(HELD_LOST)},
                    "generator": version(t), "data_sha256": data_sha256()[t]}
    return block
