"""Stage hard_positives: LLM rewrites of COCO captions that keep their meaning, validated, cached, resumable.

captions -> prompts (REPLACE for every caption, SWAP for captions with "and" and < 15 words, ...)
         -> joined with the cache by key: hits answered from it, misses sent through RunInference
         -> validated -> rows (accepted) or rejected dead letters (raw text and reason).
The unit of account is the prompt: read = prompts (+ malformed caption records) = rows + rejected.
"""
from __future__ import annotations

import functools
import json

import apache_beam as beam
from apache_beam.io import fileio

from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.report import table_report
from pipeline.llm.cache import best_entry, cache_key, cache_pattern, parse_line
from pipeline.llm.cache import lines as cache_lines
from pipeline.llm.engines import ENGINES, EngineConfig, ReplayError, Sampling, read_replay
from pipeline.llm.prompts import CHAT_FORMATS, POSITIVE_TYPES, load_prompt, wants
from pipeline.llm.validate import shared_validator
from pipeline.options import HardposOptions, UsageError, type_list
from pipeline.perturb.outcomes import Reject
from pipeline.sources import coco
from pipeline.sources.files import InputBounds

STAGE = TABLE = "hard_positives"
RECORD_FIELDS = ("example_id", "caption_id", "image_id", "file_name", "image_url", "source_file", "caption",
                 "source", "source_index")


def positive_types(opts: HardposOptions) -> list[str]:
    return type_list("--positive_types", opts.positive_types, POSITIVE_TYPES)


def engine_config(opts: HardposOptions) -> EngineConfig:
    return EngineConfig(engine=opts.llm_engine, model=opts.model, base_url=opts.llm_base_url or "",
                        concurrency=opts.llm_concurrency, timeout_s=opts.llm_timeout,
                        device=opts.llm_device, batch_size=opts.llm_batch_size,
                        tensor_parallel_size=opts.tensor_parallel_size, max_num_seqs=opts.max_num_seqs,
                        gpu_memory_utilization=opts.gpu_memory_utilization,
                        replay_path=opts.llm_replay or "", chat_format=opts.chat_format)


def base_sampling(opts: HardposOptions) -> Sampling:
    return Sampling(0, opts.temperature, opts.top_p)


def make_prompts(record: dict, types: list[str], model: str, chat_format: str, base: Sampling):
    """One prompt element per positive type this caption gets."""
    for positive_type in types:
        if not wants(positive_type, record["caption"]):
            continue
        prompt = load_prompt(positive_type)
        sampling = {**base.key(), "max_new_tokens": prompt.max_new_tokens}
        yield {
            "key": cache_key(model, prompt.sha256, chat_format, sampling, record["caption"]),
            "prompt": prompt.render(record["caption"], chat_format),
            "prompt_sha256": prompt.sha256,
            "positive_type": positive_type,
            "max_new_tokens": prompt.max_new_tokens,
            **{k: record[k] for k in RECORD_FIELDS},
        }


class _SplitHits(beam.DoFn):
    """(key, {prompt: [elements], cache: [entries]}) -> hit (entry, elements) or MISS (one element to ask,
    carrying the others and any earlier attempts). Captions sharing a text share one generation."""

    MISS = "miss"

    def __init__(self, retries: int):
        self.retries = retries

    def process(self, item):
        _, grouped = item
        elements = sorted(grouped["prompt"], key=lambda e: e["example_id"])
        entry = best_entry(list(grouped["cache"]))
        if not elements:
            pass  # a cached result for a caption not in this run
        elif entry is not None and (entry.get("accepted") is not None or len(entry["attempts"]) > self.retries):
            yield {"entry": entry, "elements": elements, "from_cache": True}
        else:
            ask = dict(elements[0])
            ask["attempts"] = entry["attempts"] if entry else []
            ask["sharers"] = elements
            yield beam.pvalue.TaggedOutput(self.MISS, ask)


class _Decide(beam.DoFn):
    """(entry, elements) -> a row per element whose attempts hold an accepted rewrite, else a rejected letter."""

    def __init__(self, model: str, engine: str, chat_format: str, wordnet: bool):
        self.model, self.engine, self.chat_format, self.wordnet = model, engine, chat_format, wordnet

    def setup(self):
        self.validator = shared_validator(self.wordnet)

    def process(self, result):
        entry, elements = result["entry"], result["elements"]
        if result["from_cache"]:
            yield beam.pvalue.TaggedOutput("llm", ("cache_hits", len(elements)))
        else:
            yield beam.pvalue.TaggedOutput("llm", ("generation_calls", entry.get("sent_now", 0)))
            yield beam.pvalue.TaggedOutput("llm", ("shared_prompts", len(elements) - 1))
        verdicts = [self.validator(elements[0], a) for a in entry["attempts"]]
        accepted = next((i for i, v in enumerate(verdicts) if v.ok), None)
        for element in elements:
            if accepted is None:
                last = verdicts[-1] if verdicts else None
                reason = last.reason if last else "no_generation"
                raws = [a["text"] for a in entry["attempts"]]
                detail = f"{last.detail if last else ''} | raw: {json.dumps(raws, ensure_ascii=False)}"
                letter_record = {k: element[k] for k in RECORD_FIELDS if k in element}
                letter_record.update(positive_type=element["positive_type"], raw=raws,
                                     cleaned=[v.text for v in verdicts], reasons=[v.reason for v in verdicts])
                yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                    STAGE, TABLE, element["source"], element["source_file"], element["source_index"],
                    Reject(reason, detail[:2000]), letter_record))
                continue
            attempt = entry["attempts"][accepted]
            sampling = attempt.get("sampling", {})
            yield {
                **{k: element[k] for k in ("example_id", "caption_id", "image_id", "file_name", "image_url",
                                           "source_file", "caption", "positive_type")},
                "hard_positive": verdicts[accepted].text,
                "changed_span": verdicts[accepted].detail or None,
                "model": self.model,
                "llm_engine": self.engine,
                "prompt_sha256": element["prompt_sha256"],
                "chat_format": self.chat_format,
                "max_new_tokens": int(sampling.get("max_new_tokens", element["max_new_tokens"])),
                "temperature": float(sampling.get("temperature", 0.0)),
                "top_p": float(sampling.get("top_p", 1.0)),
                "sampling_seed": sampling.get("seed"),
                "attempt": accepted,
                "output_tokens": int(attempt.get("output_tokens", 0)),
            }


def _read_cache(pipeline: beam.Pipeline, cache_dir: str):
    return (
        pipeline
        | "MatchCache" >> fileio.MatchFiles(cache_pattern(cache_dir),
                                            empty_match_treatment=fileio.EmptyMatchTreatment.ALLOW)
        | "ReadCacheFiles" >> fileio.ReadMatches()
        | "CacheLines" >> beam.FlatMap(lambda f: cache_lines(f.read()))
        | "ParseCache" >> beam.Map(parse_line)
        | "DropDamaged" >> beam.Filter(lambda kv: kv is not None)
    )


def tables(opts: HardposOptions) -> list[str]:
    return [TABLE]


def check_inputs(opts: HardposOptions) -> None:
    if not opts.coco_captions:
        raise UsageError("--stage=hard_positives needs --coco_captions=FILE (a COCO captions JSON)")
    if opts.llm_engine not in ENGINES:
        raise UsageError(f"--llm_engine is required: one of {', '.join(ENGINES)}")
    if not opts.model:
        raise UsageError("--model is required (a local path or a model id the engine can load)")
    if not opts.cache_dir:
        raise UsageError("--cache_dir is required (LLM results are kept there so a re-run asks nothing twice)")
    if opts.llm_engine == "openai" and not opts.llm_base_url:
        raise UsageError("--llm_engine=openai needs --llm_base_url (e.g. http://localhost:8000/v1)")
    if opts.llm_engine == "replay":
        if not opts.llm_replay:
            raise UsageError("--llm_engine=replay needs --llm_replay=FILE (JSONL of positive_type, caption, text)")
        try:
            read_replay(opts.llm_replay)
        except OSError as e:
            raise UsageError(f"--llm_replay: cannot read {opts.llm_replay}: {e}") from None
        except ReplayError as e:
            raise UsageError(f"--llm_replay: {e}") from None
    if opts.chat_format not in CHAT_FORMATS:
        raise UsageError(f"--chat_format: one of {', '.join(CHAT_FORMATS)}")
    positive_types(opts)
    if opts.positive_checks == "wordnet":
        from pipeline.perturb.wordnet import wordnet_available

        if not wordnet_available():
            raise UsageError("--positive_checks=wordnet needs WordNet (see README), or use --positive_checks=rules")
    coco.check_file(opts.coco_captions)


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    return build_rows(pipeline, opts)["counts"]


def build_rows(pipeline: beam.Pipeline, opts: HardposOptions) -> dict:
    """The stage's graph; returns {"rows": accepted rows, "counts": report counts} (train_set joins the rows)."""
    types = positive_types(opts)
    base = base_sampling(opts)
    read = pipeline | "ReadCaptionsForPositives" >> coco.ReadCocoCaptions(opts.coco_captions, STAGE, TABLE,
                                                                          InputBounds.of(opts))
    prompts = read["records"] | "MakePrompts" >> beam.FlatMap(make_prompts, types, opts.model, opts.chat_format, base)
    joined = ({"prompt": prompts | "KeyPrompts" >> beam.Map(lambda e: (e["key"], e)),
               "cache": _read_cache(pipeline, opts.cache_dir)}
              | "JoinCache" >> beam.CoGroupByKey())
    split = joined | "SplitHits" >> beam.ParDo(_SplitHits(opts.llm_retries)).with_outputs(_SplitHits.MISS,
                                                                                         main="hit")
    wordnet = opts.positive_checks == "wordnet"
    # Beam's inference module imports torch when it is installed (seconds): only when this graph is built.
    from apache_beam.ml.inference.base import RunInference

    from pipeline.llm.handler import HardPositiveHandler

    handler = HardPositiveHandler(engine_config(opts), opts.cache_dir, base, opts.llm_retries,
                                  opts.retry_temperature, functools.partial(shared_validator, wordnet),
                                  opts.llm_batch_size)
    generated = (
        split[_SplitHits.MISS]
        | "Generate" >> RunInference(handler)
        | "Unpack" >> beam.Map(lambda r: {"entry": r.inference, "elements": r.example["sharers"],
                                          "from_cache": False})
    )
    decided = ((split.hit, generated) | "AllAnswers" >> beam.Flatten()
               | "Validate" >> beam.ParDo(_Decide(opts.model, opts.llm_engine, opts.chat_format, wordnet))
               .with_outputs(REJECTED, "llm", main="rows"))
    # read = prompts per file + malformed caption records (each of those is one rejected letter)
    read_counts = (
        (prompts | "PromptFiles" >> beam.Map(lambda e: e["source_file"]),
         read[REJECTED] | "RejectedFiles" >> beam.Map(lambda d: d["source_file"]))
        | "ReadUnits" >> beam.Flatten()
        | "CountReadUnits" >> beam.combiners.Count.PerElement()
    )
    rejected = (read[REJECTED], decided[REJECTED]) | "AllRejected" >> beam.Flatten()
    discarded = pipeline | "NoDiscards" >> beam.Create([])
    written = {"rows": decided.rows, "read": read_counts, REJECTED: rejected, DISCARDED: discarded} | \
        "WriteTable" >> WriteTableOutputs(STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard,
                                          group=lambda r: (r["positive_type"],))
    extra = (
        (decided["llm"] | "LlmCounts" >> beam.Map(lambda kv: (("llm", TABLE, kv[0]), kv[1])),
         read["read"] | "CaptionCounts" >> beam.Map(lambda fn: (("llm", TABLE, "captions"), fn[1])),
         prompts | "PromptCounts" >> beam.Map(lambda e: (("llm", TABLE, "prompts", e["positive_type"]), 1)),
         decided[REJECTED] | "RejectByType" >> beam.Map(
             lambda d: (("llm", TABLE, "rejected", json.loads(d["record"])["positive_type"]), 1)))
        | "LlmAll" >> beam.Flatten()
    )
    counts = (written, extra) | "AllCounts" >> beam.Flatten()
    return {"rows": decided.rows, "counts": counts}


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    section = table_report(TABLE, counts, ["positive_type"])
    llm = {"captions": 0, "cache_hits": 0, "generation_calls": 0, "shared_prompts": 0}
    by_type = {t: {"prompts": 0, "accepted": 0, "rejected": 0} for t in positive_types(opts)}
    for key, n in counts.items():
        if key[0] != "llm" or key[1] != TABLE:
            continue
        if len(key) == 3:
            llm[key[2]] = llm.get(key[2], 0) + n
        elif key[2] in ("prompts", "rejected"):
            by_type.setdefault(key[3], {"prompts": 0, "accepted": 0, "rejected": 0})[key[2]] += n
    for positive_type, n in section["groups"]["rows"]:
        by_type.setdefault(positive_type, {"prompts": 0, "accepted": 0, "rejected": 0})["accepted"] += n
    prompts = sum(t["prompts"] for t in by_type.values())
    section.update({
        **llm,
        "prompts": prompts,
        "accepted": section["rows"],
        "rejected_generations": sum(t["rejected"] for t in by_type.values()),
        "positive_types": by_type,
        "prompts_balanced": prompts == section["rows"] + sum(t["rejected"] for t in by_type.values()),
        "model": opts.model, "llm_engine": opts.llm_engine, "chat_format": opts.chat_format,
        "prompt_sha256": {t: load_prompt(t).sha256 for t in positive_types(opts)},
        "sampling": {"temperature": opts.temperature, "top_p": opts.top_p, "llm_retries": opts.llm_retries,
                     "retry_temperature": opts.retry_temperature,
                     "max_new_tokens": {t: load_prompt(t).max_new_tokens for t in positive_types(opts)}},
        "positive_checks": opts.positive_checks,
    })
    section["balanced"] = section["balanced"] and section["prompts_balanced"]
    return {TABLE: section}
