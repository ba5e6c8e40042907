"""What every hard-negative generator returns, and the text surgery they share.

Generators take a parsed caption (a spaCy Doc) and return Candidates. They never return the caption itself
and never return a text that differs from it only in case or spacing (`same_text`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.perturb.text import indefinite_article, match_case


@dataclass(frozen=True)
class Candidate:
    negative_type: str
    text: str
    changed_span: str       # the caption's text that changed (minimal differing word span)
    new_span: str           # what stands in its place in the negative
    span_start: int         # character offsets of changed_span in the caption
    span_end: int


def coarse_pos(tag: str) -> str:
    """Universal POS from the Penn tag: the pipelines skip spaCy's attribute_ruler (a third of parse time)."""
    if tag in ("NN", "NNS"):
        return "NOUN"
    if tag in ("NNP", "NNPS"):
        return "PROPN"
    if tag.startswith("JJ"):
        return "ADJ"
    if tag.startswith("VB") or tag == "MD":
        return "VERB"
    if tag.startswith("RB"):
        return "ADV"
    return {"IN": "ADP", "RP": "PART", "DT": "DET", "CD": "NUM", "CC": "CCONJ"}.get(tag, "X")


def same_text(a: str, b: str) -> bool:
    """Equal up to case and whitespace: such an output is not a new caption."""
    return a.casefold().split() == b.casefold().split()


def make_candidate(negative_type: str, caption: str, text: str) -> Candidate | None:
    """The candidate for `text`, with its changed span; None where it is not a change of the caption."""
    if same_text(caption, text):
        return None
    start, end_a, end_b = diff_span(caption, text)
    return Candidate(negative_type, text, caption[start:end_a], text[start:end_b], start, end_a)


def diff_span(a: str, b: str) -> tuple[int, int, int]:
    """(start, end in a, end in b) of the minimal differing region, widened to whole words."""
    prefix = 0
    limit = min(len(a), len(b))
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
        suffix += 1
    start = prefix
    while start > 0 and (a[start - 1].isalnum() or b[start - 1].isalnum()):
        start -= 1
    end_a, end_b = len(a) - suffix, len(b) - suffix
    while end_a < len(a) and end_b < len(b) and (a[end_a].isalnum() or b[end_b].isalnum()):
        end_a, end_b = end_a + 1, end_b + 1
    return start, end_a, end_b


def record_rng(seed: int, example_id: str, generator: str) -> random.Random:
    """The only source of randomness: one RNG per (seed, record, generator), never a shared one."""
    return random.Random(f"{seed}\x1f{example_id}\x1f{generator}")


def join_tokens(texts: list[str], spaces: list[str]) -> str:
    return "".join(t + s for t, s in zip(texts, spaces, strict=True)).strip()


def replace_tokens(texts: list[str], spaces: list[str], start: int, end: int,
                   new_words: str) -> tuple[list[str], list[str]]:
    """Copies of the token texts and spaces with [start:end] replaced by `new_words`, cased like what it
    replaces and a preceding a/an fixed to agree with the new first word."""
    texts, spaces = list(texts), list(spaces)
    new = match_case(texts[start], new_words)
    end_space = spaces[end - 1]
    texts[start:end] = [new]
    spaces[start:end] = [end_space]
    if start > 0 and texts[start - 1].lower() in ("a", "an"):
        texts[start - 1] = match_case(texts[start - 1], indefinite_article(new))
    return texts, spaces
