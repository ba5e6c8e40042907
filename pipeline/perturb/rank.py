"""Choosing the negative to emit among a caption's valid candidates (propose many, emit one).

A ranker scores each candidate by the drop in sentence log-probability from the caption to the candidate,
under a language model of caption text, and the candidate with the smallest drop is emitted: the most
plausible change, which keeps the negative fluent (a text-only model cannot reject it for being odd,
SugarCrepe's point about hackable negatives). Rankers:
- ngram: the trigram model of the input captions (corpus.py), counted in the stage's first pass; cheap on CPU;
- lm: a causal language model (llm/scoring.py), loaded once per worker;
- none: a uniform draw, as the generators did before ranking.
Ties, and the draw of `none`, use the record's own RNG, so the choice never depends on batch or worker.
"""
from __future__ import annotations

import random
from typing import Protocol

RANKERS = ("ngram", "lm", "none")
SCORE_DECIMALS = 3  # drops are compared rounded, so float noise in an LM cannot reorder near-ties


class Scorer(Protocol):
    name: str

    def drop_groups(self, groups: list[tuple[str, list]]) -> list[list[float]]:
        """For each (caption, candidates) group, each candidate's log-probability drop from the caption."""


def drops(logprobs: list[float]) -> list[float]:
    """[caption, candidate...] log-probabilities -> each candidate's drop (positive: less likely)."""
    return [round(logprobs[0] - lp, SCORE_DECIMALS) for lp in logprobs[1:]]


class NgramScorer:
    """Drops under the trigram model of the input captions, from the trigrams each change touches."""

    name = "ngram"

    def __init__(self, corpus):
        self.corpus = corpus

    def drop_groups(self, groups: list[tuple[str, list]]) -> list[list[float]]:
        found = self.corpus.drops_many([(caption, [(c.span_start, c.span_end, c.new_span) for c in candidates])
                                        for caption, candidates in groups])
        return [[round(d, SCORE_DECIMALS) for d in group] for group in found]


def choose(items: list, scores: list[float] | None, rng: random.Random, n: int) -> list[tuple[object, float | None]]:
    """Up to n (item, score) pairs: the n smallest drops (ties in the RNG's order), or n drawn at random."""
    order = list(range(len(items)))
    rng.shuffle(order)
    if scores is not None:
        order.sort(key=lambda k: scores[k])  # stable: ties keep the RNG's order
    return [(items[k], scores[k] if scores is not None else None) for k in order[:n]]
