"""--stage=all: train_negatives, hard_positives and train_set as one pipeline; train_set joins the other two
stages' rows directly instead of reading their tables back."""
from __future__ import annotations

import apache_beam as beam

from pipeline.options import HardposOptions
from pipeline.stages import hard_positives, train_negatives, train_set

CHAIN = (train_negatives, hard_positives, train_set)


def tables(opts: HardposOptions) -> list[str]:
    return [t for stage in CHAIN for t in stage.tables(opts)]


def check_inputs(opts: HardposOptions) -> None:
    train_negatives.check_inputs(opts)
    hard_positives.check_inputs(opts)


class _Part(beam.PTransform):
    """One stage's graph under its own name, so the stages' step labels do not clash."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def expand(self, pbegin):
        return self.make(pbegin.pipeline)


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    negatives = pipeline | "TrainNegatives" >> _Part(lambda p: train_negatives.build_rows(p, opts))
    positives = pipeline | "HardPositives" >> _Part(lambda p: hard_positives.build_rows(p, opts))
    train = pipeline | "TrainSet" >> _Part(
        lambda p: {"counts": train_set.join(p, opts, positives["rows"], negatives["rows"])})
    return (negatives["counts"], positives["counts"], train["counts"]) | "ChainCounts" >> beam.Flatten()


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    return {name: section for stage in CHAIN for name, section in stage.report_tables(counts, opts).items()}
