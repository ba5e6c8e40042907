"""--stage=all: train_negatives, hard_positives and train_set, one pipeline after another into one staging folder
in --output_dir, committed together once all three are done (pipeline/run.py runs the chain); train_set reads
the two tables just staged. A chain that fails or is stopped part way leaves the folder's earlier tables as they
were: never train rows of one run beside the negatives of another.

Three pipelines, not one graph: a local runner (the DirectRunner's FnApiRunner) keeps every PCollection that
crosses a shuffle in the launcher's memory until its consumer has run, so one graph held the three stages' data
at once. At 591,753 captions with two worker processes the one graph peaked at 12.3-12.7 GiB and lost elements
in Beam's runner; the chain peaks at 7.3-7.4 GiB and balanced in every run (benchmarks/full_size.py, README "Full
size"). On Dataflow the chain is three jobs with the same options.

Each caption is parsed once: train_negatives keeps its parses in the staging folder and hard_positives' rules read
them (pipeline/io/parses.py), where both need the same parse.
"""
from __future__ import annotations

from pipeline.options import HardposOptions, UsageError
from pipeline.stages import hard_positives, train_negatives, train_set

CHAIN = (("train_negatives", train_negatives), ("hard_positives", hard_positives), ("train_set", train_set))


def tables(opts: HardposOptions) -> list[str]:
    return [t for _, stage in CHAIN for t in stage.tables(opts)]


def shares_parses(opts: HardposOptions) -> bool:
    """Whether train_negatives keeps its parses for hard_positives: its rules parse the captions (train_negatives
    keeps them only where its own parse has the tagger and parser those rules need)."""
    from pipeline.stages.rule_positives import rule_types

    return bool(train_negatives.rule_types(opts)) and bool(rule_types(hard_positives.positive_types(opts)))


def check_inputs(opts: HardposOptions) -> None:
    """Before any work: the inputs of the first two stages (train_set's are their tables, made on the way)."""
    for flag in ("hard_positives_dir", "train_negatives_dir"):
        if getattr(opts, flag):
            raise UsageError(f"--stage=all makes the tables train_set reads, in --output_dir: drop --{flag}")
    train_negatives.check_inputs(opts)
    hard_positives.check_inputs(opts)
