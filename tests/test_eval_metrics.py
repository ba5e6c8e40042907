"""The evaluation figures (pipeline/train/metrics.py) against hand-computed cases and the paper's definitions."""
import numpy as np
import pytest

from pipeline.train import metrics

# (s_c, s_n, s_p) and what each row is, worked out by hand.
ROWS = [
    (0.9, 0.5, 0.7),  # c > n, p > n: original and augmented correct
    (0.9, 0.5, 0.3),  # c > n > p: original correct, augmented wrong, brittle
    (0.3, 0.5, 0.9),  # p > n > c: brittle the other way
    (0.3, 0.5, 0.4),  # n above both: wrong, not brittle
    (0.5, 0.5, 0.7),  # tie c = n: not correct, not brittle (p > n = c is no strict chain)
    (0.8, 0.6, 0.6),  # tie p = n: original correct, augmented not, not brittle
    (0.4, 0.4, 0.4),  # all equal: every tie, nothing correct
    (0.7, 0.2, 0.7),  # tie c = p only: original and augmented correct
]
S_C, S_N, S_P = (np.array(column) for column in zip(*ROWS, strict=True))


def test_outcomes_per_row_follow_the_papers_definitions():
    o = metrics.outcomes(S_C, S_N, S_P)
    assert o["original"].tolist() == [True, True, False, False, False, True, False, True]
    assert o["augmented"].tolist() == [True, False, False, False, False, False, False, True]
    assert o["brittle"].tolist() == [False, True, True, False, False, False, False, False]
    assert o["tie_c_n"].tolist() == [False, False, False, False, True, False, True, False]
    assert o["tie_p_n"].tolist() == [False, False, False, False, False, True, True, False]
    assert o["tied"].tolist() == [False, False, False, False, True, True, True, False]
    assert o["tie_c_p"].tolist() == [False, False, False, False, False, False, True, True]


def test_summarize_counts_fractions_means_and_ties():
    s = metrics.summarize(S_C, S_N, S_P, n_resamples=0)
    assert s["n"] == 8
    assert (s["original_correct"], s["original_accuracy"]) == (4, 0.5)
    assert (s["augmented_correct"], s["augmented_accuracy"]) == (2, 0.25)
    assert (s["brittle"], s["brittleness"]) == (2, 0.25)
    assert s["ties"] == {"c_n": 2, "p_n": 2, "c_p": 2, "tied": 3}
    assert s["mean_s_c"] == pytest.approx(4.8 / 8)
    assert s["mean_s_n"] == pytest.approx(3.7 / 8)
    assert s["mean_s_p"] == pytest.approx(4.7 / 8)
    assert s["original_ci95"] is None and s["augmented_ci95"] is None and s["brittleness_ci95"] is None


def test_a_tie_never_counts_as_correct():
    # The same rows with the ties broken by a hair in the model's favour: the figures go up.
    eps = 1e-6
    tied = metrics.summarize([0.5, 0.8], [0.5, 0.6], [0.7, 0.6], n_resamples=0)
    broken = metrics.summarize([0.5 + eps, 0.8], [0.5, 0.6], [0.7, 0.6 + eps], n_resamples=0)
    assert (tied["original_correct"], tied["augmented_correct"]) == (1, 0)
    assert (broken["original_correct"], broken["augmented_correct"]) == (2, 2)
    assert tied["ties"]["tied"] == 2 and broken["ties"]["tied"] == 0


def test_identities_between_the_three_figures_on_untied_scores():
    rng = np.random.default_rng(3)
    c, n, p = rng.normal(size=(3, 500))
    s = metrics.summarize(c, n, p, n_resamples=0)
    assert s["ties"]["tied"] == 0
    # Original - Augmented = rows with c > n > p, the half of brittleness the augmented test exposes.
    assert s["original_correct"] - s["augmented_correct"] == int(((c > n) & (n > p)).sum())
    assert s["brittle"] >= s["original_correct"] - s["augmented_correct"]
    # Exchanging c and c_p leaves augmented accuracy and brittleness unchanged.
    swapped = metrics.summarize(p, n, c, n_resamples=0)
    assert swapped["augmented_correct"] == s["augmented_correct"] and swapped["brittle"] == s["brittle"]
    assert s["augmented_accuracy"] <= s["original_accuracy"]


def test_empty_group_has_counts_but_no_fractions():
    s = metrics.summarize([], [], [], n_resamples=100)
    assert s["n"] == 0 and s["original_correct"] == 0
    assert s["original_accuracy"] is None and s["brittleness"] is None and s["mean_s_c"] is None
    assert s["original_ci95"] is None


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="length"):
        metrics.summarize([0.1, 0.2], [0.1], [0.1, 0.3])
    with pytest.raises(ValueError, match="non-finite"):
        metrics.summarize([0.1, float("nan")], [0.1, 0.2], [0.1, 0.3])
    with pytest.raises(ValueError, match="keys"):
        metrics.summarize_groups(["a"], [0.1, 0.2], [0.1, 0.2], [0.1, 0.2])


def test_bootstrap_is_deterministic_and_contains_the_estimate():
    for k, n in ((1, 10), (37, 100), (300, 1000), (999, 1000)):
        hits = np.arange(n) < k
        interval = metrics.bootstrap_interval(hits, 1000, seed=7)
        assert interval == metrics.bootstrap_interval(hits, 1000, seed=7)
        assert 0 <= interval[0] <= k / n <= interval[1] <= 1
    hits = np.arange(200) < 90
    assert metrics.bootstrap_interval(hits, 1000, seed=1) != metrics.bootstrap_interval(hits, 1000, seed=2)
    assert metrics.bootstrap_interval(np.ones(5, bool)) == [1.0, 1.0]
    assert metrics.bootstrap_interval(np.zeros(5, bool)) == [0.0, 0.0]
    assert metrics.bootstrap_interval(np.zeros(0, bool)) is None
    assert metrics.bootstrap_interval(hits, n_resamples=0) is None


def test_bootstrap_matches_resampling_rows_and_narrows_with_more_rows():
    # The binomial shortcut against the textbook bootstrap (resample row indices, average the hits).
    hits = np.arange(200) < 70
    rng = np.random.default_rng(0)
    textbook = np.quantile(hits[rng.integers(0, 200, size=(4000, 200))].mean(axis=1), [0.025, 0.975])
    ours = metrics.bootstrap_interval(hits, 4000, seed=0)
    assert ours == pytest.approx(textbook.tolist(), abs=0.015)
    # The normal approximation's half-width for p = 0.35, n = 200 is 1.96 * sqrt(p(1-p)/n) = 0.066.
    assert (ours[1] - ours[0]) / 2 == pytest.approx(0.066, abs=0.01)
    wide = metrics.bootstrap_interval(np.arange(20) < 7, 1000, seed=0)
    assert wide[1] - wide[0] > 2 * (ours[1] - ours[0])


def test_summarize_groups_matches_summarizing_each_group_alone():
    keys = ["rel", "att", "rel", None, "att", "rel", "att", ("pair", "a", "b")]
    groups = metrics.summarize_groups(keys, S_C, S_N, S_P, n_resamples=200, seed=4)
    assert list(groups) == ["rel", "att", ("pair", "a", "b")]  # first appearance; None is no group
    for key, rows in (("rel", [0, 2, 5]), ("att", [1, 4, 6]), (("pair", "a", "b"), [7])):
        assert groups[key] == metrics.summarize(S_C[rows], S_N[rows], S_P[rows], n_resamples=200, seed=4)
    assert groups["rel"]["original_correct"] == 2 and groups["rel"]["brittle"] == 1   # rows 0, 2, 5
    assert groups["att"]["original_correct"] == 1 and groups["att"]["ties"]["tied"] == 2  # rows 1, 4, 6
    assert sum(g["n"] for g in groups.values()) == 7
    assert {k: v.tolist() for k, v in metrics.group_indices(["x", "y", "x"]).items()} == {"x": [0, 2], "y": [1]}
