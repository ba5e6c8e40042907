"""Stage train_negatives: rule-based hard negatives for COCO captions, one table of (caption, negative) rows.

A first pass counts the input captions' vocabulary and trigrams and each photo's words, and with swap parses
them for their relations (perturb/relations.py), as one side input; each generator then proposes
every legal candidate per caption and --negative_ranker emits the most plausible (perturb/rank.py). LLM
negative types in --negative_types (llm_replace_obj, ...) are written beside it, as llm_negatives/
(stages/llm_negatives.py), in the same pipeline."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.report import table_report
from pipeline.llm.prompts import LLM_NEGATIVE_TYPES
from pipeline.options import HardposOptions, UsageError, type_list
from pipeline.perturb.generators import NEGATIVE_TYPES, RANKED, version
from pipeline.perturb.outcomes import Discard
from pipeline.perturb.rank import NgramScorer
from pipeline.records import CAPTION_FIELDS
from pipeline.stages import llm_negatives
from pipeline.stages.captions import CaptionRowsFn, WriteSamples, check_coco, make_rows

STAGE = TABLE = "train_negatives"
SAMPLES_FILE = "train_negatives_samples.md"
GROUP_FIELDS = ["negative_type", "atom", "first_of_caption"]


def negative_types(opts: HardposOptions) -> list[str]:
    """Every type of --negative_types, rule-based and LLM, in its order ("all": every rule-based one)."""
    return type_list("--negative_types", opts.negative_types, NEGATIVE_TYPES + LLM_NEGATIVE_TYPES, allow_all=True,
                     all_means=NEGATIVE_TYPES)


def rule_types(opts: HardposOptions) -> list[str]:
    return [t for t in negative_types(opts) if t in NEGATIVE_TYPES]


class MakeNegativeRows(CaptionRowsFn):
    stage, table = STAGE, TABLE

    def __init__(self, negative_types: list[str], per_caption: int, seed: int, spacy_model, batch_size: int,
                 ranker: str = "ngram", ranker_model: str | None = None, ranker_device: str = "auto",
                 ranker_batch_size: int = 64):
        super().__init__(negative_types, spacy_model, batch_size)
        self.photo_words = "replace" in negative_types  # replace never names what its photo's captions name
        self.per_caption, self.seed = per_caption, seed
        self.ranker, self.ranker_model = ranker, ranker_model
        self.ranker_device, self.ranker_batch_size = ranker_device, ranker_batch_size

    def setup(self):
        super().setup()
        self.lm = None
        if self.ranker == "lm" and set(RANKED) & set(self.negative_types):
            from pipeline.llm.scoring import LMScorer

            self.lm = LMScorer(self.ranker_model, self.ranker_device, self.ranker_batch_size)

    def _scorer(self, corpus):
        if self.ranker == "lm":
            return self.lm
        return NgramScorer(corpus) if self.ranker == "ngram" else None

    def batch_rows(self, records, docs, corpus, named=None):
        found = self.generators.negatives(docs, [r["example_id"] for r in records], self.seed, self.per_caption,
                                          corpus, self._scorer(corpus), named)
        out = []
        for record, by_type in zip(records, found, strict=True):
            rows = []
            for negative_type, choices in by_type.items():
                ranked = negative_type in RANKED
                for index, choice in enumerate(choices):
                    candidate = choice.candidate
                    rows.append({
                        **{k: record[k] for k in CAPTION_FIELDS},
                        "hard_negative": candidate.text,
                        "negative_type": negative_type,
                        "negative_index": index,
                        "atom": choice.atom,
                        "changed_span": candidate.changed_span,
                        "new_span": candidate.new_span,
                        "span_start": candidate.span_start,
                        "span_end": candidate.span_end,
                        "generator": version(negative_type),
                        "ranker": self.ranker if ranked else None,
                        "rank_score": choice.score,
                        "candidates": choice.candidates,
                        "seed": self.seed,
                    })
            out.append(rows or Discard("no_candidate",
                                       f"no {' / '.join(self.negative_types)} negative for this caption"))
        return out


def _group(row: dict) -> tuple:
    return row["negative_type"], row["atom"] or "", row["negative_index"] == 0


def tables(opts: HardposOptions) -> list[str]:
    types = negative_types(opts)
    return ([TABLE] if rule_types(opts) else []) + ([llm_negatives.TABLE] if llm_negatives.llm_types(types) else [])


def check_inputs(opts: HardposOptions) -> None:
    if llm_negatives.llm_types(negative_types(opts)):
        llm_negatives.check_inputs(opts, STAGE)
    if not rule_types(opts):
        return
    check_coco(opts, rule_types(opts))
    if opts.negative_ranker == "lm":
        from pipeline.llm.models import ModelMissing, resolve

        try:
            source = resolve(opts.ranker_model)
        except ModelMissing as e:
            raise UsageError(f"--negative_ranker=lm: {e}") from None
        if source.gguf_file and not FileSystems.exists(FileSystems.join(source.path, source.gguf_file)):
            raise UsageError(f"--ranker_model: no such file {opts.ranker_model}")


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    """The stage's graph, returning its report counts: the rule-based table and, for LLM types, llm_negatives."""
    parts = []
    if rule_types(opts):
        parts.append(_rule_table(pipeline, opts))
    if llm_negatives.llm_types(negative_types(opts)):
        parts.append(llm_negatives.build(pipeline, opts, STAGE, negative_types(opts)))
    return parts[0] if len(parts) == 1 else parts | "AllNegativeCounts" >> beam.Flatten()


def _rule_table(pipeline: beam.Pipeline, opts: HardposOptions):
    types = rule_types(opts)
    fn = MakeNegativeRows(types, opts.negatives_per_caption, opts.seed, opts.spacy_model, opts.nlp_batch_size,
                          opts.negative_ranker, opts.ranker_model, opts.ranker_device, opts.ranker_batch_size)
    outputs = make_rows(pipeline, opts, STAGE, TABLE, fn, with_corpus=True, with_relations="swap" in types)
    _ = outputs["rows"] | "WriteSamples" >> WriteSamples(
        FileSystems.join(opts.output_dir, SAMPLES_FILE), "train_negatives: random (caption, hard negative) pairs",
        lambda r: r["negative_type"], ["caption", "hard_negative", "atom"], opts.seed)
    written = {k: v for k, v in outputs.items() if k != "corpus"} | "WriteTable" >> WriteTableOutputs(
        STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard, group=_group)
    corpus = outputs["corpus"] | "CorpusFigures" >> beam.FlatMap(
        lambda m: [(("corpus", TABLE, "captions"), m.captions), (("corpus", TABLE, "words"), m.words),
                   (("corpus", TABLE, "trigrams"), len(m.keys3))])
    return (written, corpus) | "TableCounts" >> beam.Flatten()


def expected_units(opts: HardposOptions) -> dict[str, tuple]:
    """Progress totals: a record per caption; an LLM negative table, a prompt per (caption, type) (None where
    the input's size is not known before reading it)."""
    from pipeline.sources import corpus

    captions = corpus.expected_records(opts)
    found = {TABLE: (captions, "captions") if captions is not None else None} if rule_types(opts) else {}
    if llm_negatives.llm_types(negative_types(opts)):
        prompts = None if captions is None else captions * len(llm_negatives.llm_types(negative_types(opts)))
        found[llm_negatives.TABLE] = (prompts, "prompts", prompts) if prompts is not None else None
    return found


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    found = {}
    if rule_types(opts):
        found[TABLE] = _rule_report(counts, opts)
    types = negative_types(opts)
    if llm_negatives.llm_types(types):
        found[llm_negatives.TABLE] = llm_negatives.report_section_of(counts, opts, STAGE, types)
    return found


def _rule_report(counts: dict, opts: HardposOptions) -> dict:
    section = table_report(TABLE, counts, GROUP_FIELDS)
    captions = section["read"] - section["rejected"]
    by_type = {t: {"captions_with_negative": 0, "rows": 0} for t in rule_types(opts)}
    atoms = {}
    for negative_type, atom, first, n in section["groups"]["rows"]:
        by_type[negative_type]["rows"] += n
        if first:
            by_type[negative_type]["captions_with_negative"] += n
            if atom:
                atoms[atom] = atoms.get(atom, 0) + n
    for stats in by_type.values():
        stats["yield"] = round(stats["captions_with_negative"] / captions, 4) if captions else 0.0
    corpus = {key[2]: n for key, n in counts.items() if key[0] == "corpus" and key[1] == TABLE}
    ranker = {"name": opts.negative_ranker}
    if opts.negative_ranker == "lm":
        from pipeline.llm.models import resolve

        ranker["model"] = resolve(opts.ranker_model).name
    section.update({"negative_types": by_type, "replace_atoms": atoms, "samples_file": SAMPLES_FILE,
                    "negatives_per_caption": opts.negatives_per_caption, "seed": opts.seed, "ranker": ranker,
                    "corpus": corpus})
    return section
