"""REPLACE hard positives: swap the relation/attribute that the hard negative changed for a fixed synonym.

VL-CheckList gives a caption c and a hard negative c_n that differ in one attribute or relation. The hard
positive c_p is c with that attribute/relation replaced through a per-category table (paper, Appendix A),
kept at word boundaries, with the casing of c and an agreeing indefinite article.
"""
from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pipeline.perturb.outcomes import Discard
from pipeline.perturb.text import Token, indefinite_article, match_case, tokenize, words

DEFAULT_TABLE = Path(__file__).with_name("data") / "replace_table.json"
GENERATOR = "replace_table_v2"  # v2: c, c_n and c_p single-spaced alike (the stage; no spacing cue)
EXACT_DIFF_TOKENS = 1_000  # far above any caption the bounds let through by default (300 words)


@dataclass(frozen=True)
class Pair:
    source: str  # as in the table: lower case, words separated by one space
    target: str

    @cached_property
    def source_words(self) -> tuple[str, ...]:
        return tuple(self.source.split())


@dataclass(frozen=True)
class Replacement:
    hard_positive: str
    pair: Pair
    span_start: int  # character offsets in the caption of the text that was rewritten
    span_end: int
    original_span: str
    positive_span: str
    negative_span: str  # what the hard negative has where the caption changed


TABLE_LIMIT = 64 << 20  # the paper's table is 30 KB


class ReplaceTable:
    """The replacement table data file, validated on load."""

    def __init__(self, raw: dict, sha256: str):
        self.sha256 = sha256
        self.version = raw["version"]
        self.pairs: dict[tuple[str, str], list[Pair]] = {}
        for subset, categories in raw["categories"].items():
            for category, entries in categories.items():
                pairs = [Pair(*(" ".join(w.casefold().split()) for w in entry)) for entry in entries]
                sources = [p.source for p in pairs]
                if len(set(sources)) != len(sources):
                    raise ValueError(f"replace table: duplicate source word in {subset}/{category}")
                for p in pairs:
                    if not p.source or not p.target or p.source == p.target:
                        raise ValueError(f"replace table: bad pair {p} in {subset}/{category}")
                self.pairs[(subset, category)] = pairs
        self.strict_subsets = frozenset(raw["strict_subsets"])
        self.phrase_words = frozenset(w.casefold() for w in raw["phrase_words"])
        self.fixed_phrases = {
            key.casefold(): [tuple(words(c)) for c in continuations]
            for key, continuations in raw["fixed_phrases"].items()
        }

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TABLE) -> "ReplaceTable":
        """The table at path: a regular file, not the kernel's, of at most TABLE_LIMIT bytes (ValueError, one line,
        for a FIFO, /dev/zero or /proc/self/environ named as one)."""
        from pipeline.folder_lock import kernel_file
        from pipeline.tables.folders import read_bounded

        if kernel_file(path):
            raise ValueError("a file of the kernel's, not a table")
        try:
            data = read_bounded(path, TABLE_LIMIT, "more than a replace table")
        except ValueError as e:
            raise ValueError(str(e).replace("not a file hardpos wrote", "not a table file")) from None
        try:
            raw = json.loads(data)
        except RecursionError:
            raise ValueError("nested too deeply to be a replace table") from None
        try:
            return cls(raw, hashlib.sha256(data).hexdigest())
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a replace table ({type(e).__name__}: {e})") from None

    def categories(self) -> list[tuple[str, str]]:
        return list(self.pairs)

    def pairs_for(self, subset: str, category: str) -> list[Pair]:
        try:
            return self.pairs[(subset, category)]
        except KeyError:
            raise KeyError(f"replace table has no category {subset}/{category}") from None


def _changed_block(caption: list[Token], negative: list[Token]) -> tuple[int, int, int, int]:
    """Token ranges (i1, i2) in the caption and (j1, j2) in the negative of the one block that differs.

    A full diff (difflib) is cubic on long captions that differ in many places (2,400 words took 52 s), so first a
    linear test: strip the longest common prefix and suffix; if what is left shares a word, the texts differ in
    several places. Only texts that differ in one place reach difflib, which is then quick, and which places the
    block as it always did (among repeated words); past EXACT_DIFF_TOKENS the trimmed block is the answer.
    """
    a, b = [t.norm for t in caption], [t.norm for t in negative]
    if a == b:
        raise Discard("negative_equals_caption")
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    i2, j2 = len(a) - suffix, len(b) - suffix
    shared = set(a[prefix:i2]) & set(b[prefix:j2])
    if shared:
        raise Discard("negative_changes_several_spans", f"{sorted(shared)[0]!r} unchanged between changes")
    if max(len(a), len(b)) > EXACT_DIFF_TOKENS:
        return prefix, i2, prefix, j2
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    blocks = [op[1:] for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(blocks) > 1:
        raise Discard("negative_changes_several_spans", f"{len(blocks)} spans")
    return blocks[0]


def _occurrences(norms: list[str], pair: Pair) -> list[int]:
    n = len(pair.source_words)
    return [i for i in range(len(norms) - n + 1) if tuple(norms[i:i + n]) == pair.source_words]


def replace_hard_positive(
    caption: str, hard_negative: str, subset: str, category: str, table: ReplaceTable
) -> Replacement:
    """The hard positive for one VL-CheckList record, or Discard(reason) when there is no faithful one."""
    pairs = table.pairs_for(subset, category)
    if not pairs:
        raise Discard("category_has_no_replacements", f"{subset}/{category}")
    c_tokens, n_tokens = tokenize(caption), tokenize(hard_negative)
    i1, i2, j1, j2 = _changed_block(c_tokens, n_tokens)
    if i1 == i2:
        raise Discard("negative_only_adds_words", " ".join(t.text for t in n_tokens[j1:j2]))

    # The key must overlap what the negative changed: "white clouds in blue sky" vs "... green sky"
    # replaces "blue", never the first "white".
    norms, hits = [t.norm for t in c_tokens], []
    for pair in sorted(pairs, key=lambda p: -len(p.source_words)):  # "on top of" before a key inside it
        n = len(pair.source_words)
        hits += [(pair, k) for k in _occurrences(norms, pair) if k < i2 and k + n > i1]
    if not hits:
        changed = " ".join(t.text for t in c_tokens[i1:i2])
        raise Discard("changed_words_not_in_table", changed)
    # A key nested in a longer hit ("on" inside "on top of") is the same phrase; distinct phrases are ambiguous.
    pair, k = hits[0]
    end = k + len(pair.source_words)
    for other, k2 in hits[1:]:
        if not (k <= k2 and k2 + len(other.source_words) <= end):
            raise Discard("several_table_words_changed", f"{pair.source!r} and {other.source!r}")

    if subset in table.strict_subsets:
        leftover = [t.text for t in c_tokens[i1:k] + c_tokens[end:i2] if t.norm not in table.phrase_words]
        if leftover:
            raise Discard("changed_span_has_other_words", f"{pair.source!r} with {' '.join(leftover)!r}")
    following = tuple(norms[end:])
    for continuation in table.fixed_phrases.get(pair.source, []):
        if following[: len(continuation)] == continuation:
            raise Discard("key_starts_other_phrase", f"{pair.source} {' '.join(continuation)}")

    start_tok, end_tok = c_tokens[k], c_tokens[end - 1]
    span_start, span_end = start_tok.start, end_tok.end
    original = caption[span_start:span_end]
    positive = match_case(original, pair.target)
    # "a standing man" -> "an upright man": move the article along when the new word needs the other one.
    if k > 0 and c_tokens[k - 1].norm in ("a", "an"):
        article = c_tokens[k - 1]
        if article.norm == indefinite_article(start_tok.text) != indefinite_article(pair.target):
            span_start = article.start
            original = caption[span_start:span_end]
            between = caption[article.end:start_tok.start]
            positive = match_case(article.text, indefinite_article(pair.target)) + between + positive
    hard_positive = caption[:span_start] + positive + caption[span_end:]

    if words(hard_positive) == words(hard_negative):
        raise Discard("positive_equals_negative", hard_negative)
    negative_span = hard_negative[n_tokens[j1].start:n_tokens[j2 - 1].end] if j1 < j2 else ""
    return Replacement(hard_positive, pair, span_start, span_end, original, positive, negative_span)
