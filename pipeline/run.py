"""`python -m pipeline.run --stage=STAGE [stage flags] [Beam flags]`: build one stage's tables."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys

if __name__ == "__main__":  # before the imports below, which take seconds: a run stopped there has nothing to undo
    def _stop_at_once(signum, frame):
        print(f"error: interrupted by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
        os._exit(130)

    for _signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signal, _stop_at_once)

# setup.py's pipeline extra (import name: distribution), which a machine set up only to train or evaluate lacks: one
# line naming the extra there, not the traceback of the first import below (python -m pipeline.run and the hardpos
# script alike).
PIPELINE_EXTRA = {"apache_beam": "apache-beam", "spacy": "spacy", "nltk": "nltk", "datasets": "datasets",
                  "huggingface_hub": "huggingface_hub", "yaml": "PyYAML", "httpx": "httpx"}
if _missing := [dist for module, dist in PIPELINE_EXTRA.items() if importlib.util.find_spec(module) is None]:
    print(f"error: the pipeline needs {', '.join(_missing)}, not installed here: pip install -e '.[pipeline]'",
          file=sys.stderr)
    sys.exit(2)

import contextlib
import ctypes
import errno
import functools
import gc
import json
import logging
import re
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineState

from pipeline.io.commit import (
    SIGNALS,
    CommitFinished,
    FolderLock,
    commit,
    committing,
    new_staging,
    recover,
    refuse_links,
    remove_staging,
    replace_file,
)
from pipeline.io import parses, spill
from pipeline.io.progress import ProgressPrinter, poll_metrics
from pipeline.io.report import (
    REPORT_FILE,
    SumCounts,
    format_markdown,
    format_summary,
    merge_reports,
    read_json,
    write_json,
)
from pipeline.options import (
    BEAM_DASK_RUNNER,
    STAGES as STAGE_NAMES,
    LOCAL_RUNNER,
    HardposOptions,
    UsageError,
    beam_help_text,
    check_runner,
    did_you_mean,
    help_text,
    normalise_argv,
    pin_local_runner,
    runner_path,
    unknown_flag_message,
    unknown_flags,
)
from pipeline.provenance import build_info
from pipeline.sources import corpus, vl_checklist
from pipeline.sources.files import INPUT_PROBLEM, InputFileError, input_record, new_launch
from pipeline.stages import (
    all_stages,
    eval_sets,
    hard_positives,
    images,
    order_eval,
    publish,
    train_negatives,
    train_set,
)
from pipeline.tables.folders import MANIFEST, published_folder_holding, report_problem
from pipeline.urls import has_scheme

STAGES = {"eval_sets": eval_sets, "train_negatives": train_negatives, "order_eval": order_eval,
          "hard_positives": hard_positives, "train_set": train_set, "all": all_stages,
          "images": images, "publish": publish}
# Stages that are not Beam graphs (file arrangement, img2dataset) expose run_stage(options, opts) -> report,
# where the report carries "report_path" (where it was written).
INPUT_PROBLEMS = "input_problems"  # report.json: inputs that were not what the run planned (it failed)


def parse(argv: list[str]) -> tuple[PipelineOptions, HardposOptions]:
    """Options for a run, or UsageError / InputFileError naming the first bad flag or path."""
    argv = normalise_argv(argv)
    new_launch()  # the replay file's sha256 is pinned anew for this launch
    undecodable = next((a for a in argv if any("\ud800" <= c <= "\udfff" for c in a)), None)
    if undecodable is not None:  # Beam encodes every option as UTF-8 for its workers: a traceback otherwise
        shown = undecodable.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        flag = shown.split("=", 1)[0] if shown.startswith("--") else "a flag's value"
        raise UsageError(f"{flag}: {shown[:160]} holds bytes that are not UTF-8; rename the file or folder (a "
                         f"--captions pattern may match it instead)")
    unknown = unknown_flags(argv)
    if unknown:
        raise UsageError(unknown_flag_message(unknown[0]))
    options = PipelineOptions(argv)
    opts = options.view_as(HardposOptions)
    check_runner(options.view_as(StandardOptions).runner)
    _check_url_schemes(opts)
    _check_dask_address(options)
    _check_running_mode(options)
    _absolute_local_paths(opts)
    _fixed_runner(options)
    pin_local_runner(options)
    _resolve_defaults(opts)
    if not opts.stage:
        raise UsageError(f"--stage is required: one of {', '.join(STAGES)}")
    if not opts.output_dir:
        raise UsageError("--output_dir is required")
    if opts.spill_dir and opts.spill_dir != "off":
        if has_scheme(opts.spill_dir):
            raise UsageError(f"--spill_dir={opts.spill_dir}: a folder on this machine's file system (or one its "
                             "workers share), not a URL")
        if runner_path(options.view_as(StandardOptions).runner) not in (LOCAL_RUNNER, FIXED_DASK):
            raise UsageError(f"--spill_dir is for the local runner and Dask; --runner="
                             f"{options.view_as(StandardOptions).runner} shuffles without it")
        problem = folder_problem(opts.spill_dir)
        if problem:
            raise UsageError(f"--spill_dir={opts.spill_dir}: {problem}")
        release = published_folder_holding(opts.spill_dir)
        if release is not None:  # a spill folder left there by a killed run would stop the release's next publish
            raise UsageError(f"--spill_dir={opts.spill_dir} is in the published folder {release}, which no run writes "
                             f"into; choose a folder of its own")
    if opts.stage != "publish" and not has_scheme(opts.output_dir):
        # a release folder holding a run too (load_table could not tell which table is meant), or a run committed
        # into a release's data/ (its shards replaced under the manifest)
        release = published_folder_holding(opts.output_dir)
        if release is not None:
            where = "is" if release == Path(os.path.abspath(opts.output_dir)) else f"is inside {release},"
            raise UsageError(f"--output_dir={opts.output_dir} {where} a published folder (publish's {MANIFEST} or "
                             f"card); write the run into a folder of its own")
    STAGES[opts.stage].check_inputs(opts)
    return options, opts


def folder_problem(folder: str) -> str | None:
    """Why a local folder can neither be used nor made (checked before any work): a file in its place or above it,
    a name longer than the file system takes, no right to write where it would be made; None otherwise."""
    path = os.path.abspath(folder)
    if len(os.fsencode(path)) >= os.pathconf("/", "PC_PATH_MAX"):
        return f"its path is longer than {os.pathconf('/', 'PC_PATH_MAX'):,} bytes"
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return "not a folder" if existing == path else f"{existing} is not a folder"
    longest = os.pathconf(existing, "PC_NAME_MAX")
    below = os.path.relpath(path, existing).split(os.sep) if existing != path else []
    too_long = next((name for name in below if len(os.fsencode(name)) > longest), None)
    if too_long:
        return f"the name {too_long[:40]}... is longer than {longest} bytes, what the file system takes"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write in {existing}"
    return None


def _resolve_defaults(opts: HardposOptions) -> None:
    """Defaults that depend on other flags: the positive types a stage makes follow from whether an LLM engine was
    named (stages/hard_positives.py); an LLM type with no engine named runs the embedded model."""
    if opts.positive_types is None and opts.stage in ("hard_positives", "all"):
        opts.positive_types = hard_positives.default_types(opts)
    if opts.llm_engine is None:
        opts.llm_engine = "transformers"


# Flags that name a file or folder (models too, but only when a local path by that name exists: otherwise a Hub id).
_PATH_FLAGS = ("output_dir", "spill_dir", "vl_checklist_root", "aro_vga", "replace_table", "coco_captions", "llm_replay",
               "cache_dir", "hard_positives_dir", "train_negatives_dir", "image_root", "images_dir", "publish_dir")
_MAYBE_PATH_FLAGS = ("model", "ranker_model")


# [protocol://]host[:port]: a host name, IPv4, or [IPv6]; nothing else (no user, password, path or query)
_DASK_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def _check_dask_address(options: PipelineOptions) -> None:
    """A Dask scheduler's address is [protocol://]host[:port]: anything else (a user or password, a path, a query) is
    refused without being shown (Dask's own error quotes it without its scheme, where no redaction finds it)."""
    found = options.get_all_options(retain_unknown_options=True)
    address = found.get("address") or found.get("dask_client_address")  # DaskOptions' dest, or not yet known
    if isinstance(address, str) and not _DASK_ADDRESS.fullmatch(address):
        raise UsageError("--dask_client_address is not a Dask scheduler's address, [PROTOCOL://]HOST:PORT (not shown "
                         "here: a user, password or query in it may be a secret)")
    scheduler_file = found.get("scheduler_file") or found.get("dask_scheduler_file")
    if isinstance(scheduler_file, str):
        _check_scheduler_file(scheduler_file)


def _check_running_mode(options: PipelineOptions) -> None:
    """Several workers as threads of one process are refused (multi_threading, and in_memory, which runs bundles on
    a thread pool of --direct_num_workers): the stages' DoFns share NLTK's WordNet reader, which is not safe across
    threads (such runs failed with WordNetError and AttributeError tracebacks)."""
    from apache_beam.options.pipeline_options import DirectOptions

    direct = options.view_as(DirectOptions)
    n = direct.direct_num_workers
    workers = 1 if n is None else (os.cpu_count() or 1) if n == 0 else n  # 0: one per core, as Beam reads it
    mode = direct.direct_running_mode or "in_memory"
    if mode != "multi_processing" and workers != 1:  # in_memory runs its bundles on a pool of that many threads too
        raise UsageError(f"--direct_running_mode={mode} with more than one worker: its workers are threads, and the "
                         f"stages share NLTK's WordNet reader, which is not safe across threads; use "
                         f"--direct_running_mode=multi_processing")


def _check_scheduler_file(path: str) -> None:
    """--dask_scheduler_file is a regular file (Dask's open of a FIFO blocked past every timeout), of a scheduler
    that has started (Dask would wait for the file), whose address passes as --dask_client_address's does."""
    from pipeline.folder_lock import kernel_file
    from pipeline.tables.folders import read_bounded

    try:
        if kernel_file(path):
            raise ValueError("a file of the kernel's")
        address = json.loads(read_bounded(path, 1 << 20, "more than a Dask scheduler file").decode("utf-8"))["address"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0] if str(e) else \
            type(e).__name__
        why = why.replace(", not a file hardpos wrote", "")
        raise UsageError(f"--dask_scheduler_file={path}: not a running Dask scheduler's file ({why[:200]})") from None
    if not isinstance(address, str) or not _DASK_ADDRESS.fullmatch(address):
        raise UsageError(f"--dask_scheduler_file={path}: its address is not a Dask scheduler's, [PROTOCOL://]HOST:PORT "
                         f"(not shown here: a user, password or query in it may be a secret)")


def _check_url_schemes(opts: HardposOptions) -> None:
    """UsageError (one line, the URL redacted) for a path flag naming a URL that no Beam file system reads (http://,
    an unknown scheme, gs:// without the gcp extra): Beam's ValueError, raised later, was a traceback. Not
    --image_root, whose http(s) URLs img2dataset fetches (the images stage checks its schemes)."""
    from pipeline.sources.corpus import split_patterns
    from pipeline.urls import shown_whole

    named = [(flag, getattr(opts, flag, None)) for flag in _PATH_FLAGS if flag != "image_root"]  # fetched, not read
    named += [(flag, p) for flag in ("captions", "reference_captions") for p in split_patterns(getattr(opts, flag, None)
                                                                                               or [])]
    for flag, value in named:
        if isinstance(value, str) and has_scheme(value):
            try:
                FileSystems.get_filesystem(value)
            except ValueError:
                raise UsageError(f"--{flag}={shown_whole(value)}: no file system reads this URL here (local paths, "
                                 f"gs:// with the gcp extra, and the others Beam has installed)") from None


def _absolute_local_paths(opts: HardposOptions) -> None:
    """Relative local paths made absolute against the launcher's folder: a worker of a distributed runner (Dask,
    Flink) runs in its own folder, where `samples/...` names nothing. URLs (gs://, http://) stay as given."""
    from pipeline.sources.corpus import split_patterns

    for flag in ("captions", "reference_captions"):  # lists of patterns
        values = getattr(opts, flag, None)
        if values:
            setattr(opts, flag, [p if has_scheme(p) or os.path.isabs(p) else os.path.abspath(p)
                                 for p in split_patterns(values)])
    for flag in _PATH_FLAGS + _MAYBE_PATH_FLAGS:
        value = getattr(opts, flag, None)
        if not value or has_scheme(value) or os.path.isabs(value) or (flag, value) == ("spill_dir", "off"):
            continue
        if flag in _PATH_FLAGS or os.path.exists(value):
            setattr(opts, flag, os.path.abspath(value))


# Beam's own DaskRunner mixes the outputs of a multi-output ParDo, among other bugs (benchmarks/dask_repro.py):
# asked for by name, it is replaced by its fixed subclass.
FIXED_DASK = "pipeline.runners.dask_runner.DaskRunner"


def _fixed_runner(options: PipelineOptions) -> None:
    standard = options.view_as(StandardOptions)
    if runner_path(standard.runner) == BEAM_DASK_RUNNER:
        print(f"note: --runner={standard.runner} runs as {FIXED_DASK} (Beam's runner with its bugs fixed; "
              "see pipeline/runners/dask_runner.py)", file=sys.stderr)
        standard.runner = FIXED_DASK


def _write_report(counts: dict, staging: str, target: str, stage: str, opts: HardposOptions,
                  stage_inputs: dict, made_from: dict) -> None:
    tables = STAGES[stage].report_tables(counts, opts)
    for section in tables.values():
        section["made_from"] = made_from
    report = {
        "stage": stage,
        "hardpos": build_info(),
        "output_dir": target,
        "inputs": stage_inputs,
        "tables": tables,
    }
    problems = sorted(key[1] for key in counts if key[0] == INPUT_PROBLEM)
    if problems:  # inputs that were not what the run planned: the run fails naming them (_run_stage)
        report[INPUT_PROBLEMS] = problems
    write_json(FileSystems.join(staging, REPORT_FILE), report)


# Flags naming an input file whose bytes shape a stage's rows: report.json records the sha256 of each. VL-CheckList's
# root is a folder: the files its source reads are recorded one by one.
_INPUT_FILE_FLAGS = ("aro_vga", "replace_table", "coco_captions", "llm_replay")


def _input_files(opts: HardposOptions) -> dict[str, str]:
    files = {flag: getattr(opts, flag) for flag in _INPUT_FILE_FLAGS if getattr(opts, flag)}
    if opts.vl_checklist_root:
        files.update({f"vl_checklist_root/{relative}": FileSystems.join(opts.vl_checklist_root, relative)
                      for relative in vl_checklist.FILES.values()})
    return files


def failed_requests(report: dict, max_fraction: float) -> str | None:
    """Why the run must not count as done because too many of its LLM requests failed, or None."""
    for name, section in report["tables"].items():
        if "prompts" not in section:
            continue
        # Over all the table's prompts, cached answers included: a resumed run whose only new requests are the
        # ones that failed before must not fail for that.
        prompts = section["prompts"]
        failed = section.get("reject_reasons", {}).get("request_failed", 0)
        if prompts and failed / prompts > max_fraction:
            return (f"{failed:,} of the {prompts:,} LLM prompts of {name} failed as requests (request_failed), "
                    f"more than --max_failed_fraction={max_fraction}")
    return None


def empty_tables(report: dict) -> list[str]:
    """A line for each table of the report with no rows: an empty table is a failure unless --allow_empty."""
    return [f"table {name} has 0 rows ({t.get('read', 0):,} records read: {t.get('discarded', 0):,} discarded, "
            f"{t.get('rejected', 0):,} rejected; the reasons are in the summary above; --allow_empty commits it)"
            for name, t in report["tables"].items() if t.get("rows") == 0]


class RunFailed(Exception):
    """The pipeline ran, but its result must not replace the earlier one; the message is one line, `report` the
    stage's report when there is one (its summary says what went wrong)."""

    def __init__(self, message: str, report: dict | None = None, code: int = 1):
        super().__init__(message)
        self.report, self.code = report, code


def run(options: PipelineOptions, opts: HardposOptions) -> dict:
    """Runs the stage to the end and returns its report (report_path: the folder's report.json).

    Beam stages write into a staging folder in --output_dir and commit (pipeline/io/commit.py) only when the
    pipeline is done and its counts hold; RunFailed otherwise, with the earlier result left as it was. A chain
    (--stage=all) runs its stages one after another into one staging folder and commits their tables together.
    """
    stage = STAGES[opts.stage]
    if hasattr(stage, "run_stage"):
        return stage.run_stage(options, opts)
    target = opts.output_dir
    _check_not_a_tools_folder(target)  # before the run's lock names the run instead
    # one listing of the corpus for the whole run (every stage of a chain): what made_from fingerprints is what the
    # workers read, and they check it
    with FolderLock(target, opts.stage), corpus.one_plan():
        staging = None
        try:
            _check_folder_report(target)
            for line in recover(target):
                print(line, file=sys.stderr)
            refuse_links(target, stage.tables(opts))
            with SIGNALS.deferred():
                staging = new_staging(target, opts.stage)
            report = _stage_and_commit(options, opts, staging)
        except BaseException as e:
            # A run stopped before its commit leaves nothing; one stopped during it is finished by the next run
            # (pipeline/io/commit.py).
            if staging is not None and not committing(staging):
                remove_staging(staging)
            if not isinstance(e, Exception):
                raise
            changed = input_changed(e)
            problem = changed or file_system_error(e)
            if problem is None or SIGNALS.received:
                raise
            cut_short = staging is not None and committing(staging)
            left = (f"the commit was cut short: the next run into {target} finishes it" if cut_short
                    else f"nothing was written to {target}, its earlier contents stay")
            raise RunFailed(f"{problem}; {left}", code=2 if changed else 1) from None
    report["report_path"] = FileSystems.join(target, REPORT_FILE)
    return report


def _check_not_a_tools_folder(target: str) -> None:
    """--output_dir is no tool's output folder (a run's report.md would replace the evaluator's, its tables would
    sit beside the figures), nor in a folder a run removes whole (a staging or spill folder), nor in the images
    stage's folder."""
    from pipeline.folder_lock import tool_folder
    from pipeline.tables.folders import images_folder_holding, removed_folder_problem

    problem = None if has_scheme(target) else removed_folder_problem("--output_dir", target)
    if problem:  # a run committed there would be removed with it
        raise UsageError(problem)
    whose = None if has_scheme(target) else tool_folder(target)
    if whose:
        raise UsageError(f"--output_dir={target} is {whose} output folder (its lock file says so), whose report.md "
                         f"a run would replace; choose another folder")
    images = None if has_scheme(target) else images_folder_holding(target)
    if images is not None:  # its report.json is the images stage's, which a run's report would replace
        raise UsageError(f"--output_dir={target} is in {images}, the images stage's folder; write into a folder of "
                         f"its own")


def _check_folder_report(target: str) -> None:
    """The folder's report.json, which the commit merges this run's sections into, is one hardpos wrote: one that
    is `[]` or has sections that are not objects would end a commit half done, in a traceback."""
    path = FileSystems.join(target, REPORT_FILE)
    if not FileSystems.exists(path):
        return
    try:
        problem = report_problem(read_json(path))
    except ValueError as e:  # not JSON, not UTF-8
        problem = f"unreadable: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    if problem:
        raise UsageError(f"--output_dir: {path} is not a hardpos report ({problem}); a stage merges its tables into "
                         f"it: move it away")


def _stage_and_commit(options: PipelineOptions, opts: HardposOptions, staging: str) -> dict:
    """The stage's pipeline (a chain's, one after another) into staging, then one commit; the stage's report."""
    target, name = opts.output_dir, opts.stage
    links = [sub for sub, _ in STAGES[name].CHAIN] if hasattr(STAGES[name], "CHAIN") else [name]
    reports = []
    # A chain's printer counts every pipeline's rows (its pipelines' own printers do nothing inside it).
    with ProgressPrinter(opts.progress_seconds) if len(links) > 1 else contextlib.nullcontext():
        for sub in links:
            reports.append(_run_link(options, opts, staging, name, sub, reports) if len(links) > 1
                           else _run_stage(options, opts, staging))
    if len(links) > 1:
        parses.remove(parses.folder_of(staging))  # the chain's own, never a result
    commit(staging, target, reports)
    if len(links) == 1:
        return reports[0]
    return {"stage": name, "output_dir": target, "tables": {t: s for r in reports for t, s in r["tables"].items()},
            "inputs": {k: v for r in reports for k, v in r["inputs"].items()}}


def _run_stage(options: PipelineOptions, opts: HardposOptions, staging: str, read_from: str | None = None) -> dict:
    """One stage's pipeline into staging; its report, once its counts hold (RunFailed otherwise)."""
    target = opts.output_dir
    inputs = {name: getattr(opts, name) for name in ("vl_checklist_root", "aro_vga", "replace_table",
                                                     "coco_captions", "captions", "reference_captions", "model",
                                                     "cache_dir",
                                                     "hard_positives_dir", "train_negatives_dir")
              if getattr(opts, name)}
    report = _run_into(staging, target, options, opts, inputs, input_record(_input_files(opts), opts), read_from)
    # An input shard that was not the file its report recorded explains the rows missing from the counts.
    # An input that was not what the run planned (a corpus file changed meanwhile) is the input's fault, as a
    # missing file is: exit 2.
    code = 2 if report.get(INPUT_PROBLEMS) else 1
    problem = report.get(INPUT_PROBLEMS, []) + \
        [line for t in report["tables"].values() for line in t.get("changed_inputs", [])]
    problem = problem or ([] if report_balanced(report) else
                          ["counts do not add up (read != rows + discarded + rejected)"])
    failed = failed_requests(report, opts.max_failed_fraction)
    if failed:
        problem.append(failed)
    if not problem and not opts.allow_empty:
        problem = empty_tables(report)
    if problem:
        raise RunFailed(f"{'; '.join(problem)}; nothing was written to {target}, its earlier contents stay", report,
                        code)
    return report


def _run_link(options: PipelineOptions, opts: HardposOptions, staging: str, name: str, sub: str,
              staged: list[dict]) -> dict:
    """One stage of the chain `name`, into the chain's staging folder, after the stages that `staged` reports; the
    launcher's freed heap handed back after it."""
    opts.stage = sub
    # Only train_set reads tables: the ones the chain staged before it (a stage before it would list them as
    # inputs). Its report names --output_dir, where they are committed with it. It reads them by the staging
    # folder's report.json, as it reads committed ones by the folder's: their shards' sha256, what made them.
    opts.hard_positives_dir = opts.train_negatives_dir = opts.output_dir if sub == "train_set" else None
    if sub == "train_set":
        write_json(FileSystems.join(staging, REPORT_FILE), functools.reduce(merge_reports, staged, None))
    started = time.monotonic()
    shared = parses.folder_of(staging) if name == "all" and all_stages.shares_parses(opts) else None
    if shared and sub == "train_negatives":
        parses.make_table(shared)  # its key lives in this process only, for the chain's two stages
    table = parses.made(shared) if shared else None
    keep = parses.keeping(table if sub == "train_negatives" else None)
    read = parses.reading(table if sub == "hard_positives" and table and parses.listed(shared) else None)
    try:
        with keep, read:
            report = _run_stage(options, opts, staging, staging if sub == "train_set" else None)
    finally:
        opts.stage = name
        opts.hard_positives_dir = opts.train_negatives_dir = None
    # benchmarks/full_size.py reads these lines to give each stage its time and memory
    print(f"--stage={name}: {sub} staged in {time.monotonic() - started:.1f} s (at {time.time():.1f})",
          file=sys.stderr, flush=True)
    _release_memory()
    return report


def _release_memory() -> None:
    """Hands the heap a finished pipeline left free back to the system, so that the next stage of a chain does
    not start on top of it: a local runner's launcher held every shuffle of the stage (glibc only: elsewhere the
    freed memory is merely reused)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def report_balanced(report: dict) -> bool:
    return all(t["balanced"] for t in report["tables"].values())


def _run_into(staging: str, target: str, options: PipelineOptions, opts: HardposOptions, inputs: dict,
              made_from: dict, read_from: str | None = None) -> dict:
    """The pipeline with --output_dir pointed at the staging folder (so every worker writes there, whatever the
    runner); the stage report it wrote. train_set reads the other tables from read_from when given (a chain's
    staging folder), else from their flags, by default --output_dir: the committed ones."""
    stage = STAGES[opts.stage]
    given = opts.hard_positives_dir, opts.train_negatives_dir
    for flag in ("hard_positives_dir", "train_negatives_dir"):
        if read_from or not getattr(opts, flag):
            setattr(opts, flag, read_from or target)
    opts.output_dir = staging
    folder = _spill_folder(opts, options)
    pipeline = None
    try:
        pipeline = beam.Pipeline(options=options)
        with spill.spilling(folder):
            counts = stage.build(pipeline, opts)
            problems = corpus.input_problems(pipeline)
            if problems:
                counts = (counts, *problems) | "WithInputProblems" >> beam.Flatten()
            (counts
             | "SumCounts" >> beam.CombineGlobally(SumCounts())
             | "WriteReport" >> beam.Map(_write_report, staging, target, opts.stage, opts, inputs, made_from))
        # The local runners run to the end inside run(), while the printer's thread reports; remote runners
        # (Dataflow) return at once, and their live counters are polled instead.
        with ProgressPrinter(opts.progress_seconds):
            ProgressPrinter.focus(opts.stage, _expected_units(stage, opts, options))
            result = pipeline.run()
            if opts.progress_seconds > 0 and not PipelineState.is_terminal(result.state):
                poll_metrics(result, opts.progress_seconds)
        state = result.wait_until_finish()
    finally:
        opts.output_dir = target
        if read_from:
            opts.hard_positives_dir, opts.train_negatives_dir = given
        if folder:
            spill.remove_folder(folder)
        if pipeline is not None:  # Beam removes its temporary folder in run() only: not when the build failed
            shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)
    if state != PipelineState.DONE:
        raise RunFailed(f"the pipeline ended in state {state}; nothing was written to {target}")
    return read_json(FileSystems.join(staging, REPORT_FILE))


def _spill_folder(opts: HardposOptions, options: PipelineOptions) -> str | None:
    """Where this pipeline's big intermediate data goes (pipeline/io/spill.py): a folder of its own, in --spill_dir or
    a temporary one, for the local runner by default and for Dask when --spill_dir names a folder its workers
    share (a Dask cluster keeps its own shuffles in its workers); None otherwise."""
    if opts.spill_dir == "off":
        return None
    runner = runner_path(options.view_as(StandardOptions).runner)
    if runner != LOCAL_RUNNER and not (runner == FIXED_DASK and opts.spill_dir):
        return None
    try:
        if opts.spill_dir:
            os.makedirs(opts.spill_dir, exist_ok=True)
        return spill.make_folder(opts.spill_dir, opts.stage)
    except OSError as e:
        where = f"--spill_dir={opts.spill_dir}" if opts.spill_dir else f"the temporary folder {tempfile.gettempdir()}"
        raise UsageError(f"{where}: cannot make a spill folder there ({e.strerror or e})") from None


def _expected_units(stage, opts: HardposOptions, options: PipelineOptions) -> dict[str, tuple] | None:
    """{table: (units it will account for, their name[, its prompts])} where the stage can tell before it runs, for
    the progress line's done / total and ETA; None on a runner whose workers do not tick to this machine (its
    counters are polled)."""
    if opts.progress_seconds <= 0 or not hasattr(stage, "expected_units") or \
            runner_path(options.view_as(StandardOptions).runner) != LOCAL_RUNNER:
        return None
    try:
        return stage.expected_units(opts)
    except (OSError, ValueError, InputFileError):  # progress only: the stage reports a bad input itself
        return None


# Errors of the file system a user can cause and mend (a full disk, a quota, a read-only or forbidden folder).
_FILE_SYSTEM_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
# Beam re-raises a DoFn's OSError as RuntimeError("OSError: [Errno 28] No space left on device [while running ...]")
_ERRNO_IN_TEXT = re.compile(r"\[Errno (\d+)\] ([^\n]*)")


def input_changed(exc: BaseException | None) -> str | None:
    """The line of a worker's error saying an input file changed since the launcher read it (the replay file:
    llm/engines.REPLAY_CHANGED; a chain's parse table, io/parses.py), however Beam wrapped it; None when exc is no
    such error."""
    from pipeline.llm.engines import REPLAY_CHANGED

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        line = next((text for text in str(exc).splitlines() if REPLAY_CHANGED in text), None)
        if line is not None:
            return line.split(" [while running")[0].split("ReplayError: ")[-1].split("ParseTableMismatch: ")[-1].strip()
        exc = exc.__cause__ or exc.__context__
    return None


def file_system_error(exc: BaseException | None) -> str | None:
    """One line naming the file-system error that exc is or was caused by, or None when it is none of those."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FILE_SYSTEM_ERRNOS:
            return exc.strerror + (f": {exc.filename}" if exc.filename else "")
        found = _ERRNO_IN_TEXT.search(str(exc))
        if found and int(found[1]) in _FILE_SYSTEM_ERRNOS:
            return found[2].strip()
        exc = exc.__cause__ or exc.__context__
    return None


def _interrupted(e: BaseException, opts: HardposOptions | None, finished: bool) -> str:
    """The line an interrupted run ends with."""
    said = f"interrupted by {SIGNALS.received}"
    if opts is None or hasattr(STAGES[opts.stage], "run_stage"):
        return said
    if finished:
        return f"{said} after its commit: {opts.output_dir} holds this run's result"
    if isinstance(e, CommitFinished):
        return f"{said} during a commit into {opts.output_dir}, which was finished first"
    return f"{said}; nothing was committed to {opts.output_dir}, its earlier contents stay"


def _help(argv: list[str]) -> str | None:
    """The text --help, -h or --help_beam asks for (with --stage=X, only the flags stage X reads), or None."""
    if "--help_beam" in argv:
        return beam_help_text()
    if not {"-h", "--help"} & set(argv):
        return None
    stage = next((a.split("=", 1)[1] for a in argv if a.startswith("--stage=")), None)
    if stage is None and "--stage" in argv and argv.index("--stage") + 1 < len(argv):
        stage = argv[argv.index("--stage") + 1]
    if stage is not None and stage not in STAGE_NAMES:
        raise UsageError(f"--stage: invalid choice: {stage!r}{did_you_mean(stage, STAGE_NAMES)}; choose from "
                         f"{', '.join(STAGE_NAMES)}")
    return help_text(stage)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        text = _help(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if text is not None:
        print(text)
        return 0
    opts, finished = None, False
    with SIGNALS.installed():
        try:
            try:
                options, opts = parse(argv)
            except (UsageError, InputFileError) as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            started = time.monotonic()
            try:
                report = run(options, opts)
            except (UsageError, InputFileError) as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            except RunFailed as e:
                if e.report:
                    print(format_summary(e.report))
                print(f"error: {e}", file=sys.stderr)
                return e.code
            finished = True
            return _print_result(report, opts, started)
        except BaseException as e:  # a signal's KeyboardInterrupt, or whatever Beam made of it
            if SIGNALS.received is None:
                raise
            print(f"error: {_interrupted(e, opts, finished)}", file=sys.stderr)
            return 130


def _print_result(report: dict, opts: HardposOptions, started: float) -> int:
    if hasattr(STAGES[opts.stage], "run_stage"):  # a Beam stage's commit writes report.md with report.json
        replace_file(report["report_path"].removesuffix(".json") + ".md", format_markdown(report).encode("utf-8"))
    print(format_summary(report))
    print(f"done in {time.monotonic() - started:.1f}s; report: {report['report_path']}")
    if not report_balanced(report):
        print(f"error: counts do not add up (read != rows + discarded + rejected); see {report['report_path']}",
              file=sys.stderr)
        return 1
    return 0


def _quiet_when_said(record: logging.LogRecord) -> bool:
    """Beam logs a DoFn's exception with its traceback before raising it: after a signal, for a file-system error
    or an input changed mid-run, main's one line says it all."""
    return not SIGNALS.received and not (record.exc_info and (file_system_error(record.exc_info[1])
                                                               or input_changed(record.exc_info[1])))


def cli() -> int:
    """The command (`python -m pipeline.run`, and the `hardpos` script setup.py installs): main with its output
    redacted and Beam's logging set up."""
    from pipeline.urls import redact_output

    redact_output()  # before anything prints: no secret of a flag reaches the terminal
    logging.basicConfig(level=logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_quiet_when_said)
    return main()


if __name__ == "__main__":
    sys.exit(cli())
