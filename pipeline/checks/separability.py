"""How well a text-only model tells the training set's texts apart: the shortcut as a figure (issue 33).

Each train row holds a caption c, its hard positive p and its hard negative n. If a model that never sees the
image can pick p out of (p, n), training on the table can teach that shortcut instead of the image. The model
here is fixed and seeded, so the figure is comparable across runs: a bag-of-words multinomial naive Bayes with
add-one smoothing over lowercase word tokens, cross-validated over 5 folds assigned by image (a stable hash of
(seed, image_id)), each row scored by the model trained on the other 4 folds. Three pairwise choices per row:

  P vs N  classes "positive texts" against "negative texts": correct when p scores as more positive than n
  C vs P  classes caption against positive: correct when p scores as more positive than c
  C vs N  classes caption against negative: correct when n scores as more negative than c

A tie counts half; decisions are counted in halves so that every figure is an integer count, and the same rows
in any order or sharding give the same figures. Chance is 50%. Pure Python, no Beam: the train_set stage wraps
WordCounts in a CombineFn and scores each row against the SeparabilityModel as a side input;
benchmarks/separability.py uses both directly on the Parquet shards.
"""
from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from typing import Callable, Iterable, NamedTuple

FOLDS = 5
# Lowercase words: letters and digits with inner apostrophes ("man's"); punctuation is no word.
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
TOKENIZER = r"lowercase, then words matching [^\W_]+(?:['’][^\W_]+)*"
MODEL = ("multinomial naive Bayes, add-one smoothing over the training folds' vocabulary (words they never saw "
         "are left out), equal priors (each row gives one text to every class); a pair is decided by the two "
         "texts' log-likelihood ratios, a tie counting half")
CLASSES = ("caption", "positive", "negative")
FIELDS = {"caption": "caption", "positive": "hard_positive", "negative": "hard_negative"}
OUTCOMES = ("correct", "tie", "wrong")
HALVES = {"correct": 2, "tie": 1, "wrong": 0}


class Comparison(NamedTuple):
    """A pairwise choice: correct when the target class's text scores as more `target` than the other's."""
    label: str
    target: str
    other: str


COMPARISONS = {
    "p_vs_n": Comparison("P vs N", "positive", "negative"),
    "c_vs_p": Comparison("C vs P", "positive", "caption"),
    "c_vs_n": Comparison("C vs N", "negative", "caption"),
}


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def text_bags(row: dict) -> dict[str, Counter]:
    """Each class's text of the row as a bag of words."""
    return {cls: Counter(words(row[field] or "")) for cls, field in FIELDS.items()}


def changed_bags(row: dict) -> dict[str, Counter]:
    """The positive's and the negative's words that the caption does not have (as a multiset): the classifier
    restricted to what was changed. No caption class, so P vs N is the one comparison it answers."""
    bags = text_bags(row)
    return {"positive": bags["positive"] - bags["caption"], "negative": bags["negative"] - bags["caption"]}


def fold_of(seed: int, row: dict) -> int:
    """The row's fold: a hash of (seed, image), so that the captions of one photo, which share words, are never
    both trained on and scored; the caption (then the example) stands in for a missing image id."""
    for field in ("image_id", "caption_id", "example_id"):
        if row.get(field) is not None:
            key = f"{seed}\x1f{field}\x1f{row[field]}"
            return int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "big") % FOLDS
    raise ValueError("a row with no image_id, caption_id or example_id has no fold")


class WordCounts:
    """Mergeable word counts per (fold, class, word): the CombineFn's accumulator.

    Exact sparse counts rather than hashed buckets: a word seen only in one class of one fold costs one entry, so
    memory grows with the vocabulary (at most FOLDS x classes x words), never with the rows, and no two words
    share a count that would blur the figure. Integer counts merge in any order to the same totals.
    """

    def __init__(self, seed: int, bags: Callable[[dict], dict[str, Counter]] = text_bags):
        self.seed, self.bags = seed, bags
        self.counts: Counter = Counter()

    def add(self, row: dict) -> WordCounts:
        fold = fold_of(self.seed, row)
        for cls, bag in self.bags(row).items():
            for word, n in bag.items():
                self.counts[fold, cls, word] += n
        return self

    def merge(self, other: WordCounts) -> WordCounts:
        self.counts.update(other.counts)
        return self

    def model(self) -> SeparabilityModel:
        return SeparabilityModel(self.seed, self.counts, self.bags)


class SeparabilityModel:
    """The five fold models: per word and class its count in each fold, so that a fold's training counts are the
    total less the fold's own; log-likelihood ratios are computed for the few words in which two texts differ."""

    def __init__(self, seed: int, counts: Counter, bags: Callable[[dict], dict[str, Counter]]):
        self.seed, self.bags = seed, bags
        self.per_fold: dict[tuple[str, str], list[int]] = {}  # (class, word) -> its count in each fold
        tokens = {cls: [0] * FOLDS for cls in CLASSES}
        for (fold, cls, word), n in counts.items():
            self.per_fold.setdefault((cls, word), [0] * FOLDS)[fold] += n
            tokens[cls][fold] += n
        self.totals = {key: sum(per_fold) for key, per_fold in self.per_fold.items()}
        # tokens of each class in the training folds of each held-out fold
        self.training_tokens = {(fold, cls): sum(per_fold) - per_fold[fold]
                                for cls, per_fold in tokens.items() for fold in range(FOLDS)}
        # Add-one smoothing divides by the vocabulary of the training folds, per held-out fold and comparison.
        self.vocabulary = Counter({(fold, name): 0 for fold in range(FOLDS) for name in COMPARISONS})
        for word in {word for _, word in self.per_fold}:
            for fold in range(FOLDS):
                for name, comparison in COMPARISONS.items():
                    if self._trained(fold, comparison.target, word) or self._trained(fold, comparison.other, word):
                        self.vocabulary[fold, name] += 1

    def _trained(self, fold: int, cls: str, word: str) -> int:
        """The word's count in class `cls` over every fold but `fold`."""
        per_fold = self.per_fold.get((cls, word))
        return self.totals[cls, word] - per_fold[fold] if per_fold else 0

    def log_ratio(self, fold: int, name: str, word: str) -> float:
        """log P(word | target) - log P(word | other) of comparison `name`'s model for held-out fold `fold`; 0 for
        a word its training folds never saw."""
        comparison = COMPARISONS[name]
        target, other = self._trained(fold, comparison.target, word), self._trained(fold, comparison.other, word)
        if not target and not other:
            return 0.0
        vocabulary = self.vocabulary[fold, name]
        return (math.log(target + 1) - math.log(self.training_tokens[fold, comparison.target] + vocabulary)
                - math.log(other + 1) + math.log(self.training_tokens[fold, comparison.other] + vocabulary))

    def outcomes(self, row: dict, names: Iterable[str] = COMPARISONS) -> dict[str, str]:
        """{comparison: correct | tie | wrong} for the row, scored by the model that did not train on its fold."""
        fold = fold_of(self.seed, row)
        bags = self.bags(row)
        found = {}
        for name in names:
            comparison = COMPARISONS[name]
            difference = Counter(bags[comparison.target])
            difference.subtract(bags[comparison.other])
            # Over the words in which the texts differ (shared ones cancel, so texts with the same words tie
            # whatever their order), summed exactly (fsum): the sign does not depend on the order of the words.
            margin = math.fsum(n * self.log_ratio(fold, name, word) for word, n in difference.items() if n)
            found[name] = "correct" if margin > 0 else "tie" if margin == 0 else "wrong"
        return found


def tally(model: SeparabilityModel, rows: Iterable[dict], names: Iterable[str] = COMPARISONS) -> Counter:
    """{(comparison, positive_type, negative_type, outcome): rows}: what summary() reads."""
    names = list(names)
    counts = Counter()
    for row in rows:
        for name, outcome in model.outcomes(row, names).items():
            counts[name, row["positive_type"], row["negative_type"], outcome] += 1
    return counts


def separate(rows: list[dict], seed: int, bags: Callable[[dict], dict[str, Counter]] = text_bags,
             names: Iterable[str] = COMPARISONS) -> dict:
    """The whole computation on rows in memory: count, build the fold models, score every row; summary()."""
    counts = WordCounts(seed, bags=bags)
    for row in rows:
        counts.add(row)
    return summary(tally(counts.model(), rows, names), seed, names)


def _figures(cells: Iterable[tuple[str, int]]) -> dict:
    """Pairs, ties and accuracy of (outcome, rows) cells: correct decisions are counted in halves."""
    outcomes = Counter()
    for outcome, n in cells:
        outcomes[outcome] += n
    pairs = sum(outcomes.values())
    halves = sum(HALVES[o] * n for o, n in outcomes.items())
    return {"pairs": pairs, "correct_halves": halves, "ties": outcomes["tie"],
            "accuracy": round(halves / (2 * pairs), 4) if pairs else None}


def describe(seed: int) -> dict:
    return {"folds": FOLDS, "fold_by": "sha256 of (seed, image_id); caption_id, then example_id, without one",
            "seed": seed, "tokenizer": TOKENIZER, "model": MODEL}


def summary(counts: dict, seed: int, names: Iterable[str] = COMPARISONS) -> dict:
    """{comparison: {pairs, correct_halves, ties, accuracy, by_positive_type, by_negative_type}, classifier}
    from {(comparison, positive_type, negative_type, outcome): rows}; keys sorted, so any order of the counts
    gives the same dict."""
    found = {}
    for name in names:
        cells = sorted((key[1:], n) for key, n in counts.items() if key[0] == name)
        section = {"label": COMPARISONS[name].label, **_figures((key[2], n) for key, n in cells)}
        for by, at in (("by_positive_type", 0), ("by_negative_type", 1)):
            types = sorted({key[at] for key, _ in cells})
            section[by] = {t: _figures((key[2], n) for key, n in cells if key[at] == t) for t in types}
        found[name] = section
    found["classifier"] = describe(seed)
    return found
