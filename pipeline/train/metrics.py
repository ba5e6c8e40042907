"""The paper's evaluation figures from per-row image-text scores (numpy only, no torch).

For one row, s_c = s(c|i), s_n = s(c_n|i), s_p = s(c_p|i). Every comparison is strict:

- original:   s_c > s_n                                  (Original Test Accuracy)
- augmented:  s_c > s_n and s_p > s_n                    (Augmented Test Accuracy)
- brittle:    s_c > s_n > s_p  or  s_p > s_n > s_c       (Brittleness: the model tells c from c_n only by
                                                          also rejecting c_p, or accepts c_n over c only while
                                                          preferring c_p)
Ties are counted, never scored as correct or brittle:
- tie_c_n:  s_c == s_n   (the original test is undecided; the row counts as not correct, not brittle)
- tie_p_n:  s_p == s_n   (the augmented test is undecided; not correct for augmented, not brittle)
- tied:     tie_c_n or tie_p_n: the rows where one of the three figures rests on a tie
- tie_c_p:  s_c == s_p   (for information only: no figure compares c with c_p directly)
Equality is exact, on the scores as given (the evaluator's float32 cosines).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

CONFIDENCE = 0.95


def _scores(s_c, s_n, s_p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arrays = tuple(np.asarray(s, dtype=np.float64).reshape(-1) for s in (s_c, s_n, s_p))
    if not len(arrays[0]) == len(arrays[1]) == len(arrays[2]):
        raise ValueError(f"s_c, s_n, s_p differ in length: {[len(a) for a in arrays]}")
    for name, a in zip(("s_c", "s_n", "s_p"), arrays, strict=True):
        if not np.isfinite(a).all():
            raise ValueError(f"{name} has a non-finite score (NaN or inf)")
    return arrays


def outcomes(s_c, s_n, s_p) -> dict[str, np.ndarray]:
    """Per-row booleans: original, augmented, brittle, tie_c_n, tie_p_n, tied, tie_c_p (see the module doc)."""
    c, n, p = _scores(s_c, s_n, s_p)
    tie_c_n, tie_p_n = c == n, p == n
    return {
        "original": c > n,
        "augmented": (c > n) & (p > n),
        "brittle": ((c > n) & (n > p)) | ((p > n) & (n > c)),
        "tie_c_n": tie_c_n,
        "tie_p_n": tie_p_n,
        "tied": tie_c_n | tie_p_n,
        "tie_c_p": c == p,
    }


def bootstrap_interval(hits, n_resamples: int = 1000, seed: int = 0,
                       confidence: float = CONFIDENCE) -> list[float] | None:
    """Percentile bootstrap interval of the fraction of true values in `hits`; None when empty or n_resamples=0.

    Resampling n rows with replacement and counting hits is exactly a Binomial(n, k/n) draw, so the counts are
    drawn directly: the same distribution as resampling rows, in O(n_resamples) instead of O(n_resamples * n).
    A fresh generator seeded with `seed` per call: the interval depends only on (k, n, n_resamples, seed).
    """
    hits = np.asarray(hits, dtype=bool).reshape(-1)
    n = len(hits)
    if n == 0 or n_resamples <= 0:
        return None
    k = int(hits.sum())
    fractions = np.random.default_rng(seed).binomial(n, k / n, size=n_resamples) / n
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(fractions, [alpha, 1.0 - alpha])
    return [float(low), float(high)]


def summarize(s_c, s_n, s_p, n_resamples: int = 1000, seed: int = 0) -> dict:
    """Counts, fractions, 95% bootstrap intervals, mean scores and ties of one group of rows.

    Fractions, means and intervals are None for an empty group (never a division by zero)."""
    c, n, p = _scores(s_c, s_n, s_p)
    rows = len(c)
    hits = outcomes(c, n, p)

    def fraction(key):
        return float(hits[key].sum() / rows) if rows else None

    def mean(a):
        return float(a.mean()) if rows else None

    return {
        "n": rows,
        "original_correct": int(hits["original"].sum()),
        "original_accuracy": fraction("original"),
        "original_ci95": bootstrap_interval(hits["original"], n_resamples, seed),
        "augmented_correct": int(hits["augmented"].sum()),
        "augmented_accuracy": fraction("augmented"),
        "augmented_ci95": bootstrap_interval(hits["augmented"], n_resamples, seed),
        "brittle": int(hits["brittle"].sum()),
        "brittleness": fraction("brittle"),
        "brittleness_ci95": bootstrap_interval(hits["brittle"], n_resamples, seed),
        "mean_s_c": mean(c),
        "mean_s_n": mean(n),
        "mean_s_p": mean(p),
        "ties": {name: int(hits[f"tie_{name}"].sum()) for name in ("c_n", "p_n", "c_p")}
        | {"tied": int(hits["tied"].sum())},
    }


def group_indices(keys: Sequence[Hashable]) -> dict[Hashable, np.ndarray]:
    """key -> the row positions holding it, keys in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return {key: np.asarray(rows, dtype=np.int64) for key, rows in groups.items()}


def summarize_groups(keys: Sequence[Hashable], s_c, s_n, s_p, n_resamples: int = 1000,
                     seed: int = 0) -> dict[Hashable, dict]:
    """summarize() per distinct key (keys[i] is row i's group, e.g. its subset, category or replacement pair);
    rows whose key is None belong to no group."""
    c, n, p = _scores(s_c, s_n, s_p)
    if len(keys) != len(c):
        raise ValueError(f"{len(keys)} keys for {len(c)} rows")
    return {key: summarize(c[rows], n[rows], p[rows], n_resamples, seed)
            for key, rows in group_indices(keys).items() if key is not None}
