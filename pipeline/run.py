"""`python -m pipeline.run --stage=STAGE [stage flags] [Beam flags]`: build one stage's tables."""
from __future__ import annotations

import logging
import sys
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from pipeline.io.outputs import owned_paths
from pipeline.io.progress import ProgressPrinter, poll_metrics
from pipeline.io.report import REPORT_FILE, SumCounts, format_markdown, format_summary, read_json, write_json
from pipeline.options import HardposOptions, UsageError, normalise_argv, unknown_flags
from pipeline.sources.files import InputFileError
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

STAGES = {"eval_sets": eval_sets, "train_negatives": train_negatives, "order_eval": order_eval,
          "hard_positives": hard_positives, "train_set": train_set, "all": all_stages,
          "images": images, "publish": publish}
# Stages that are not Beam graphs (file arrangement, img2dataset) expose run_stage(options, opts) -> report,
# where the report carries "report_path" (where it was written).


def parse(argv: list[str]) -> tuple[PipelineOptions, HardposOptions]:
    """Options for a run, or UsageError / InputFileError naming the first bad flag or path."""
    argv = normalise_argv(argv)
    unknown = unknown_flags(argv)
    if unknown:
        raise UsageError(f"unknown flag {unknown[0]} (see --help)")
    options = PipelineOptions(argv)
    opts = options.view_as(HardposOptions)
    if not opts.stage:
        raise UsageError(f"--stage is required: one of {', '.join(STAGES)}")
    if not opts.output_dir:
        raise UsageError("--output_dir is required")
    STAGES[opts.stage].check_inputs(opts)
    return options, opts


def _clear_owned_outputs(opts: HardposOptions, tables: list[str]) -> None:
    """Remove what an earlier run wrote for these tables, so no stale shard survives a smaller re-run."""
    patterns = [p for t in tables for p in owned_paths(opts.output_dir, t)]
    stale = [m.path for result in FileSystems.match(patterns) for m in result.metadata_list]
    for name in (REPORT_FILE, REPORT_FILE.removesuffix(".json") + ".md"):
        report = FileSystems.join(opts.output_dir, name)
        if FileSystems.exists(report):
            stale.append(report)
    if stale:
        FileSystems.delete(stale)


def _write_report(counts: dict, opts: HardposOptions, stage_inputs: dict) -> None:
    stage = STAGES[opts.stage]
    report = {
        "stage": opts.stage,
        "output_dir": opts.output_dir,
        "inputs": stage_inputs,
        "tables": stage.report_tables(counts, opts),
    }
    write_json(FileSystems.join(opts.output_dir, REPORT_FILE), report)


def run(options: PipelineOptions, opts: HardposOptions) -> dict:
    """Runs the stage to the end and returns its report."""
    stage = STAGES[opts.stage]
    if hasattr(stage, "run_stage"):
        return stage.run_stage(options, opts)
    _clear_owned_outputs(opts, stage.tables(opts))
    inputs = {name: getattr(opts, name) for name in ("vl_checklist_root", "aro_vga", "replace_table", "coco_captions",
                                                     "model", "cache_dir", "hard_positives_dir", "train_negatives_dir")
              if getattr(opts, name)}
    pipeline = beam.Pipeline(options=options)
    (stage.build(pipeline, opts)
     | "SumCounts" >> beam.CombineGlobally(SumCounts())
     | "WriteReport" >> beam.Map(_write_report, opts, inputs))
    # The local runners run to the end inside run(), while the printer's thread reports; remote runners
    # (Dataflow) return at once, and their live counters are polled instead.
    with ProgressPrinter(opts.progress_seconds):
        result = pipeline.run()
        if opts.progress_seconds > 0 and not PipelineState.is_terminal(result.state):
            poll_metrics(result, opts.progress_seconds)
    state = result.wait_until_finish()
    if state != PipelineState.DONE:
        raise RuntimeError(f"the pipeline ended in state {state}")
    report = read_json(FileSystems.join(opts.output_dir, REPORT_FILE))
    report["report_path"] = FileSystems.join(opts.output_dir, REPORT_FILE)
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        options, opts = parse(argv)
    except (UsageError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    report = run(options, opts)
    with FileSystems.create(report["report_path"].removesuffix(".json") + ".md") as f:
        f.write(format_markdown(report).encode("utf-8"))
    print(format_summary(report))
    print(f"done in {time.monotonic() - started:.1f}s; report: {report['report_path']}")
    if not all(t["balanced"] for t in report["tables"].values()):
        print("error: counts do not add up (read != rows + discarded + rejected); see report.json", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
