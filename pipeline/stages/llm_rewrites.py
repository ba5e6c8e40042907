"""What the LLM stages share: captions -> prompts -> joined with the cache by key: hits answered from it, misses
sent through RunInference -> validated -> rows (accepted) or rejected dead letters (raw text and reason).

hard_positives (positive types, validate()) and llm_negatives (SugarCrepe's five kinds, validate_negative())
are the same graph with another table, kinds and row columns (`RewriteSpec`). The unit of account is the
prompt: read = prompts (+ malformed caption records) = rows + rejected.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.progress import Tick
from pipeline.io.report import table_report
from pipeline.llm.cache import best_entry, cache_key, cache_pattern, parse_line
from pipeline.llm.cache import file_lines as cache_file_lines
from pipeline.llm.engines import (
    ENGINES,
    EngineConfig,
    ReplayError,
    Sampling,
    read_replay,
)
from pipeline.llm.prompts import CHAT_FORMATS, PROMPT_SETS, load_prompt, wants
from pipeline.llm.validate import shared_validator
from pipeline.options import HardposOptions, UsageError
from pipeline.perturb.outcomes import Reject
from pipeline.records import CAPTION_FIELDS
from pipeline.sources import corpus
from pipeline.sources.files import InputBounds, regular_file_problem
from pipeline.urls import has_scheme

# A prompt element's "key" is its cache key (llm/cache.py): the caption's own key travels as caption_key.
RECORD_FIELDS = (*(f for f in CAPTION_FIELDS if f != "key"), "source", "source_index")


@dataclass(frozen=True)
class RewriteSpec:
    stage: str
    table: str            # also the schema name
    kind_column: str      # positive_type or negative_type
    text_column: str      # hard_positive or hard_negative
    kinds: tuple[str, ...]

    @property
    def label(self) -> str:
        return "".join(part.title() for part in self.table.split("_"))


def model_name(opts: HardposOptions) -> str:
    """What rows record as the model: the embedded one's name when --model is not given."""
    from pipeline.llm.models import resolve

    return resolve(opts.model).name if opts.llm_engine == "transformers" else opts.model


def cache_model(opts: HardposOptions) -> str:
    """What the cache keys answers by: the model, and with --llm_engine=replay the replay file's sha256 too (its
    answers are the file's, not a model's: another file under the same --model is not answered from the cache)."""
    if opts.llm_engine != "replay":
        return model_name(opts)
    return f"{model_name(opts)}\x1freplay {_replay_sha256(opts)}"


def _replay_sha256(opts: HardposOptions) -> str:
    """The replay file's sha256 as this launch first read it (files.pinned_sha256): the cache key, made_from and the
    workers' check (the engine's replay_sha256) name the same bytes."""
    if opts.llm_engine != "replay" or not opts.llm_replay:
        return ""
    from pipeline.sources.files import pinned_sha256

    return pinned_sha256(opts.llm_replay)


def engine_config(opts: HardposOptions) -> EngineConfig:
    return EngineConfig(engine=opts.llm_engine, model=opts.model, base_url=opts.llm_base_url or "",
                        concurrency=opts.llm_concurrency, timeout_s=opts.llm_timeout,
                        max_reply_bytes=opts.llm_max_reply_bytes,
                        device=opts.llm_device, batch_size=opts.llm_batch_size,
                        tensor_parallel_size=opts.tensor_parallel_size, max_num_seqs=opts.max_num_seqs,
                        gpu_memory_utilization=opts.gpu_memory_utilization,
                        replay_path=opts.llm_replay or "", replay_max_line_bytes=opts.max_record_bytes,
                        replay_sha256=_replay_sha256(opts),
                        chat_format=opts.chat_format, prompt_set=opts.prompt_set)


def base_sampling(opts: HardposOptions) -> Sampling:
    return Sampling(0, opts.temperature, opts.top_p)


def make_prompts(record: dict, kinds: tuple[str, ...], model: str, chat_format: str, prompt_set: str,
                 base: Sampling):
    """One prompt element per kind this caption gets. Without the prompt's text: every element is held between
    steps (a local runner keeps them all in memory) and only the ones sent to the model need it (_SplitHits adds
    it to those)."""
    for kind in kinds:
        if not wants(kind, record["caption"]):
            continue
        prompt = load_prompt(kind, prompt_set)
        sampling = {**base.key(), "max_new_tokens": prompt.max_new_tokens}
        yield {
            "key": cache_key(model, prompt.sha256, chat_format, sampling, record["caption"]),
            "prompt_sha256": prompt.sha256,
            "prompt_set": prompt.prompt_set,
            "kind": kind,
            "max_new_tokens": prompt.max_new_tokens,
            "caption_key": record["key"],
            **{k: record[k] for k in RECORD_FIELDS},
        }


class _SplitHits(beam.DoFn):
    """(key, {prompt: [elements], cache: [entries]}) -> hit (entry, elements) or MISS (one element to ask,
    carrying the others and any earlier attempts). Captions sharing a text share one generation."""

    MISS = "miss"

    def __init__(self, retries: int, prompt_set: str = "paper"):
        self.retries, self.prompt_set = retries, prompt_set

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
            ask["prompt"] = load_prompt(ask["kind"], self.prompt_set).text(ask["caption"])
            ask["attempts"] = entry["attempts"] if entry else []
            ask["sharers"] = elements
            yield beam.pvalue.TaggedOutput(self.MISS, ask)


class _Decide(beam.DoFn):
    """(entry, elements) -> a row per element whose attempts hold an accepted rewrite, else a rejected letter."""

    def __init__(self, spec: RewriteSpec, model: str, engine: str, chat_format: str, wordnet: bool):
        self.spec, self.model, self.engine, self.chat_format, self.wordnet = spec, model, engine, chat_format, wordnet

    def setup(self):
        self.validator = shared_validator(self.wordnet)

    def process(self, result):
        spec = self.spec
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
                letter_record.update({spec.kind_column: element["kind"], "raw": raws,
                                      "cleaned": [v.text for v in verdicts], "reasons": [v.reason for v in verdicts]})
                yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                    spec.stage, spec.table, element["source"], element["source_file"], element["source_index"],
                    Reject(reason, detail[:2000]), letter_record))
                continue
            attempt = entry["attempts"][accepted]
            sampling = attempt.get("sampling", {})
            yield {
                **{k: element[k] for k in CAPTION_FIELDS if k != "key"},
                "key": element["caption_key"],
                spec.kind_column: element["kind"],
                spec.text_column: verdicts[accepted].text,
                "changed_span": verdicts[accepted].detail or None,
                **({"generator": None} if spec.table == "hard_positives" else {}),
                "model": self.model,
                "llm_engine": self.engine,
                "prompt_set": element["prompt_set"],
                "prompt_sha256": element["prompt_sha256"],
                "chat_format": self.chat_format,
                "max_new_tokens": int(sampling.get("max_new_tokens", element["max_new_tokens"])),
                "temperature": float(sampling.get("temperature", 0.0)),
                "top_p": float(sampling.get("top_p", 1.0)),
                "sampling_seed": sampling.get("seed"),
                "attempt": accepted,
                "output_tokens": int(attempt.get("output_tokens", 0)),
            }


def _read_cache(pipeline: beam.Pipeline, cache_dir: str, table: str, label: str):
    return (
        pipeline
        | f"MatchCache{label}" >> fileio.MatchFiles(cache_pattern(cache_dir, table),
                                                    empty_match_treatment=fileio.EmptyMatchTreatment.ALLOW)
        | f"ReadCacheFiles{label}" >> fileio.ReadMatches()
        | f"CacheLines{label}" >> beam.FlatMap(cache_file_lines)
        | f"ParseCache{label}" >> beam.Map(parse_line)
        | f"DropDamaged{label}" >> beam.Filter(lambda kv: kv is not None)
    )


CACHE_TABLES = ("hard_positives", "llm_negatives")  # the cache's folder per table (llm/cache.py)


def _check_cache_path(opts: HardposOptions) -> None:
    """A local cache folder below the output folder (the default <output_dir>/llm_cache) is no link and reached
    through none, and no table folder in any cache folder is a link: answers are written there and read back as
    this run's (a --cache_dir named through a link elsewhere is the user's choice, as any folder named is)."""
    if has_scheme(opts.cache_dir):
        return
    from pipeline.io.commit import below_output, folder_path_problem
    from pipeline.tables.folders import MANIFEST, published_folder_holding

    for folder in (opts.cache_dir, *(os.path.join(opts.cache_dir, t) for t in CACHE_TABLES)):
        release = published_folder_holding(folder)
        if release is not None:  # answers written into a release would sit under its manifest, or be uploaded
            raise UsageError(f"--cache_dir {opts.cache_dir}: {folder} is in {release}, a published folder (publish's "
                             f"{MANIFEST} or card), which no stage writes into; choose another --cache_dir")
    existing = os.path.abspath(opts.cache_dir)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):  # a file there: the answers could not be written, after all the work
        raise UsageError(f"--cache_dir {opts.cache_dir}: {existing} is a file, not a folder")

    below = not has_scheme(opts.output_dir) and below_output(opts.cache_dir, opts.output_dir) is not None
    if below and os.path.islink(opts.cache_dir):
        raise UsageError(f"--cache_dir {opts.cache_dir} is a symbolic link in the output folder, which hardpos never "
                         f"writes through; remove the link or choose another --cache_dir")
    problem = folder_path_problem("--cache_dir", opts.cache_dir, opts.output_dir) if below else None
    linked = next((t for t in CACHE_TABLES if os.path.islink(os.path.join(opts.cache_dir, t))), None)
    if problem or linked:
        raise UsageError(problem or f"--cache_dir {opts.cache_dir}: {linked}/ is a symbolic link, which hardpos never "
                                    f"writes answers through; remove it")


def check_llm_options(opts: HardposOptions, stage: str) -> None:
    """The engine, model, cache, replay file, chat format and prompt set flags, before any work."""
    from pipeline.stages.captions import check_captions

    check_captions(opts)
    if opts.llm_engine not in ENGINES:
        raise UsageError(f"--llm_engine: one of {', '.join(ENGINES)}")
    if opts.llm_engine == "transformers" and not opts.model:
        from pipeline.llm.models import ModelMissing, embedded_path

        try:
            embedded_path()
        except ModelMissing as e:
            raise UsageError(f"--model not given and no embedded model: {e}") from None
    elif not opts.model:
        raise UsageError(f"--model is required with --llm_engine={opts.llm_engine} (a model path or id)")
    if not opts.cache_dir:  # LLM results are kept so that a re-run asks nothing twice
        opts.cache_dir = FileSystems.join(opts.output_dir, "llm_cache")
    _check_cache_path(opts)
    if opts.llm_engine == "openai":
        _check_server(opts)
    if opts.llm_engine == "replay":
        if not opts.llm_replay:
            raise UsageError("--llm_engine=replay needs --llm_replay=FILE (JSONL of type, caption, text)")
        if not os.path.exists(opts.llm_replay):
            raise UsageError(f"--llm_replay: cannot read {opts.llm_replay}: no such file")
        problem = regular_file_problem(opts.llm_replay)  # before anything opens it: a FIFO would block forever
        if problem:
            raise UsageError(f"--llm_replay: {opts.llm_replay}: {problem}")
        try:
            for _ in read_replay(opts.llm_replay, opts.max_record_bytes):  # every line checked now, before work
                pass
        except OSError as e:
            raise UsageError(f"--llm_replay: cannot read {opts.llm_replay}: {e}") from None
        except ReplayError as e:
            raise UsageError(f"--llm_replay: {e}") from None
    if opts.chat_format not in CHAT_FORMATS:
        raise UsageError(f"--chat_format: one of {', '.join(CHAT_FORMATS)}")
    if opts.llm_engine == "transformers" and opts.chat_format == "auto" and not _has_chat_template(opts.model):
        raise UsageError(f"--chat_format=auto: {opts.model} has no chat template; use --chat_format=none or llama2")
    if opts.prompt_set not in PROMPT_SETS:
        raise UsageError(f"--prompt_set: one of {', '.join(PROMPT_SETS)}")
    if opts.positive_checks == "wordnet":
        from pipeline.perturb.wordnet import wordnet_available

        if not wordnet_available():
            raise UsageError("--positive_checks=wordnet needs WordNet (see README), or use --positive_checks=rules")


def _check_server(opts: HardposOptions) -> None:
    """--llm_base_url (else OPENAI_BASE_URL) names a server that answers, before any work."""
    import os

    from pipeline.llm.openai_client import key_problem, server_problem, url_problem
    from pipeline.urls import hidden_why, redacted

    given = "--llm_base_url" if opts.llm_base_url else "OPENAI_BASE_URL"
    opts.llm_base_url = opts.llm_base_url or os.environ.get("OPENAI_BASE_URL")
    if not opts.llm_base_url:
        raise UsageError("--llm_engine=openai needs --llm_base_url or OPENAI_BASE_URL (e.g. http://localhost:8000/v1)")
    problem = key_problem(os.environ.get("OPENAI_API_KEY") or "")  # before any request; never shows the key
    if problem:
        raise UsageError(problem)
    problem = url_problem(opts.llm_base_url) or server_problem(opts.llm_base_url, min(opts.llm_timeout, 10.0))
    if problem:  # a URL whose secrets cannot be told apart is not shown at all
        shown = "" if hidden_why(opts.llm_base_url) else f"={redacted(opts.llm_base_url)}"
        raise UsageError(f"{given}{shown}: {problem}")


def _has_chat_template(model: str | None) -> bool:
    """Whether the model's tokenizer has a chat template (read before the run: a worker would fail late)."""
    if not model:
        return True  # the embedded SmolLM2-135M-Instruct has one
    import os

    if not os.path.isdir(model):
        return True  # a Hub id or a GGUF file: found out when the model loads
    import json

    config = os.path.join(model, "tokenizer_config.json")
    if os.path.isfile(os.path.join(model, "chat_template.jinja")):
        return True
    try:
        with open(config, encoding="utf-8") as f:
            return bool(json.load(f).get("chat_template"))
    except (OSError, ValueError):
        return False


def build_rewrites(pipeline: beam.Pipeline, opts: HardposOptions, spec: RewriteSpec):
    """The graph of one LLM table; returns its report counts. Step labels carry the table, so several of these
    run in one pipeline."""
    read = corpus.read_captions(pipeline, opts, spec.stage, spec.table, InputBounds.of(opts))
    parts = rewrite_parts(read["records"], pipeline, opts, spec)
    # read = prompts per file + caption records that gave none (each of those is one dead letter)
    units = (parts["units"], read[REJECTED] | f"RejectedFiles{spec.label}" >> beam.Map(lambda d: d["source_file"]),
             read[DISCARDED] | f"DiscardedFiles{spec.label}" >> beam.Map(lambda d: d["source_file"]))
    written = {"rows": parts["rows"], "read": count_units(units, spec.label),
               REJECTED: (read[REJECTED], parts[REJECTED]) | f"AllRejected{spec.label}" >> beam.Flatten(),
               DISCARDED: read[DISCARDED]} | \
        f"WriteTable{spec.label}" >> WriteTableOutputs(spec.stage, spec.table, spec.table, opts.output_dir,
                                                       opts.rows_per_shard, group=lambda r: (r[spec.kind_column],))
    captions = read["read"] | f"CaptionCounts{spec.label}" >> beam.Map(
        lambda fn, t: (("llm", t, "captions"), fn[1]), spec.table)
    return (written, parts["counts"], captions) | f"AllCounts{spec.label}" >> beam.Flatten()


def _prompt_count(answer: dict) -> int:
    return len(answer["elements"])


def count_units(units, label: str):
    """The source_file of each unit of account (a prompt, a (caption, rule type) pair, a malformed record), from
    several PCollections -> (file, units), the "read" counts of WriteTableOutputs."""
    # counted per PCollection where it is made, then summed: a Flatten of a unit per caption would be kept whole
    # by a local runner
    counted = [u | f"UnitsPerFile{label}{i or ''}" >> beam.combiners.Count.PerElement() for i, u in enumerate(units)]
    return (counted | f"AllUnits{label}" >> beam.Flatten()
            | f"SumUnits{label}" >> beam.CombinePerKey(sum))


# Prompts per bucket, in batches: enough for full batches, few enough buckets to spread over the workers.
BATCHES_PER_BUCKET = 16


def bucket_of(key: str, buckets: int) -> int:
    return int(hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12], 16) % buckets


def in_batches(bucket: tuple[int, Iterable[dict]], batch_size: int) -> Iterator[list[dict]]:
    """A bucket's prompts in key order, cut into batches of batch_size (the last may be smaller)."""
    prompts = sorted(bucket[1], key=lambda e: e["key"])
    for start in range(0, len(prompts), batch_size):
        yield prompts[start:start + batch_size]


def prompt_batches(misses, batch_size: int, label: str):
    """The prompts to ask, in batches made from the prompts themselves: a bucket per prompt from a hash of its key
    (as many buckets as the prompts fill BATCHES_PER_BUCKET batches), each bucket in key order cut into batches.
    Not RunInference's own batching, which sizes batches by timing: there a batch's make-up, and with it a
    model's padding, followed the machine's load and the worker count."""
    buckets = (misses | f"CountMisses{label}" >> beam.combiners.Count.Globally()
               | f"Buckets{label}" >> beam.Map(lambda n: max(1, n // (batch_size * BATCHES_PER_BUCKET))))
    return (misses
            | f"BucketPrompts{label}" >> beam.Map(lambda e, n: (bucket_of(e["key"], n), e),
                                                  beam.pvalue.AsSingleton(buckets))
            | f"GroupBuckets{label}" >> beam.GroupByKey()
            | f"Batch{label}" >> beam.FlatMap(in_batches, batch_size))


def rewrite_parts(records, pipeline: beam.Pipeline, opts: HardposOptions, spec: RewriteSpec) -> dict:
    """The LLM part of a table from caption records: {"rows", "units" (the source_file of each prompt),
    "rejected" (generations that failed), "counts" (the report's llm counts)}."""
    label = spec.label
    base = base_sampling(opts)
    model = model_name(opts)
    prompts = records | f"MakePrompts{label}" >> beam.FlatMap(
        make_prompts, spec.kinds, cache_model(opts), opts.chat_format, opts.prompt_set, base)
    joined = ({"prompt": prompts | f"KeyPrompts{label}" >> beam.Map(lambda e: (e["key"], e)),
               "cache": _read_cache(pipeline, opts.cache_dir, spec.table, label)}
              | f"JoinCache{label}" >> beam.CoGroupByKey())
    split = joined | f"SplitHits{label}" >> beam.ParDo(_SplitHits(opts.llm_retries, opts.prompt_set)).with_outputs(
        _SplitHits.MISS, main="hit")
    wordnet = opts.positive_checks == "wordnet"
    # Beam's inference module imports torch when it is installed (seconds): only when this graph is built.
    from apache_beam.ml.inference.base import RunInference

    from pipeline.llm.handler import HardPositiveHandler

    handler = HardPositiveHandler(engine_config(opts), opts.cache_dir, base, opts.llm_retries,
                                  opts.retry_temperature, functools.partial(shared_validator, wordnet),
                                  opts.llm_batch_size, spec.table)
    generated = (
        prompt_batches(split[_SplitHits.MISS], opts.llm_batch_size, label)
        | f"Generate{label}" >> RunInference(handler)
        | f"Unpack{label}" >> beam.FlatMap(lambda r: [
            {"entry": entry, "elements": element["sharers"], "from_cache": False}
            for element, entry in zip(r.example, r.inference, strict=True)])
    )
    # progress: prompts answered from the cache, and by the model
    _ = split.hit | f"ProgressCached{label}" >> beam.ParDo(Tick(spec.table, "cached", size=_prompt_count))
    _ = generated | f"ProgressGenerated{label}" >> beam.ParDo(Tick(spec.table, "generated", size=_prompt_count))
    # Validated apart, each in the step that made its answers: a Flatten before the validation would make the
    # local runner hold every generated answer until the model's last batch, and "accepted" would not move till then.
    decide = _Decide(spec, model, opts.llm_engine, opts.chat_format, wordnet)
    parts = [answers | f"Validate{how}{label}" >> beam.ParDo(decide).with_outputs(REJECTED, "llm", main="rows")
             for how, answers in (("Cached", split.hit), ("Generated", generated))]
    for how, part in zip(("Cached", "Generated"), parts, strict=True):
        _ = part.rows | f"ProgressAccepted{how}{label}" >> beam.ParDo(Tick(spec.table, "accepted"))
    decided = {tag: [p[tag] for p in parts] | f"Decided{tag.title()}{label}" >> beam.Flatten()
               for tag in ("rows", REJECTED, "llm")}
    kind_column, table = spec.kind_column, spec.table
    counts = (
        (decided["llm"] | f"LlmCounts{label}" >> beam.Map(lambda kv: (("llm", table, kv[0]), kv[1])),
         prompts | f"PromptCounts{label}" >> beam.Map(lambda e: (("llm", table, "prompts", e["kind"]), 1)),
         decided[REJECTED] | f"RejectByType{label}" >> beam.Map(
             lambda d: (("llm", table, "rejected", json.loads(d["record"])[kind_column]), 1)))
        | f"LlmAll{label}" >> beam.Flatten()
    )
    return {"rows": decided["rows"], "units": prompts | f"PromptFiles{label}" >> beam.Map(lambda e: e["source_file"]),
            REJECTED: decided[REJECTED], "counts": counts}


def report_section(counts: dict, opts: HardposOptions, spec: RewriteSpec) -> dict:
    table = spec.table
    section = table_report(table, counts, [spec.kind_column])
    llm = {"captions": 0, "cache_hits": 0, "generation_calls": 0, "shared_prompts": 0}
    by_type = {t: {"prompts": 0, "accepted": 0, "rejected": 0} for t in spec.kinds}
    for key, n in counts.items():
        if key[0] != "llm" or key[1] != table:
            continue
        if len(key) == 3:
            llm[key[2]] = llm.get(key[2], 0) + n
        elif key[2] in ("prompts", "rejected"):
            by_type.setdefault(key[3], {"prompts": 0, "accepted": 0, "rejected": 0})[key[2]] += n
    for kind, n in section["groups"]["rows"]:
        if kind in by_type:  # the table may hold rows of rule-based kinds too (hard_positives)
            by_type[kind]["accepted"] += n
    prompts = sum(t["prompts"] for t in by_type.values())
    accepted = sum(t["accepted"] for t in by_type.values())
    rejected = sum(t["rejected"] for t in by_type.values())
    section.update({
        **llm,
        "prompts": prompts,
        "accepted": accepted,
        "rejected_generations": rejected,
        f"{spec.kind_column}s": by_type,
        "prompts_balanced": prompts == accepted + rejected,
        "model": model_name(opts), "llm_engine": opts.llm_engine, "chat_format": opts.chat_format,
        # the negatives' prompts are one set of their own, whatever --prompt_set says
        "prompt_set": load_prompt(spec.kinds[0], opts.prompt_set).prompt_set if spec.kinds else opts.prompt_set,
        "prompt_sha256": {t: load_prompt(t, opts.prompt_set).sha256 for t in spec.kinds},
        "sampling": {"temperature": opts.temperature, "top_p": opts.top_p, "llm_retries": opts.llm_retries,
                     "retry_temperature": opts.retry_temperature,
                     "max_new_tokens": {t: load_prompt(t, opts.prompt_set).max_new_tokens for t in spec.kinds}},
        "positive_checks": opts.positive_checks,
    })
    section["balanced"] = section["balanced"] and section["prompts_balanced"]
    return section
