"""Properties every negative must have, read from the caption and the negative text alone. The generators
drop a candidate that breaks one (a last filter behind their rules), and checks/negatives counts them on the
rows written, so the two agree on the definitions."""
from __future__ import annotations

from collections import Counter

from pipeline.perturb.rule_data import swap_rules
from pipeline.perturb.text import indefinite_article, tokenize, words


def a_an_errors(caption: str, negative: str) -> list[str]:
    """"a"/"an" pairs of the negative that disagree with the next word, beyond those already in the caption."""
    def wrong(text):
        toks = [t.text for t in tokenize(text) if any(ch.isalnum() for ch in t.text)]
        return Counter(f"{w} {n}" for w, n in zip(toks, toks[1:], strict=False)
                       if w.lower() in ("a", "an") and indefinite_article(n) != w.lower())
    return list((wrong(negative) - wrong(caption)).elements())


def conjunct_swaps(caption: str, negative: str) -> list[str]:
    """"X and Y" of the caption that read "Y and X" in the negative (where the caption does not have it too):
    the two words right around one "and" exchanged keep the meaning."""
    c, n = words(caption), words(negative)
    found = []
    for k in range(1, len(c) - 1):
        if c[k] == "and" and c[k - 1] != c[k + 1]:
            flipped = [c[k + 1], "and", c[k - 1]]
            if any(n[j:j + 3] == flipped for j in range(len(n) - 2)) and \
                    not any(c[j:j + 3] == flipped for j in range(len(c) - 2)):
                found.append(" ".join(c[k - 1:k + 2]))
    return found


def moved_word(caption: str, negative: str) -> str | None:
    """The word that moved, where the negative is the caption with one word taken out and put back elsewhere
    (swap's colour moves: "a white cat on a chair" -> "a cat on a white chair"); a/an count as one word."""
    def norm(text):
        return ["a" if w == "an" else w for w in words(text)]
    c, n = norm(caption), norm(negative)
    if len(c) != len(n) or c == n:
        return None
    first = next(k for k in range(len(c)) if c[k] != n[k])
    last = next(k for k in range(len(c) - 1, -1, -1) if c[k] != n[k])
    if c[first + 1:last + 1] == n[first:last] and c[first] == n[last]:
        return c[first]  # moved right
    if c[first:last] == n[first + 1:last + 1] and c[last] == n[first]:
        return c[last]  # moved left
    return None


def quantity_heads_moved(caption: str, negative: str) -> list[str]:
    """Heads of quantity or container phrases ("a group of", "a plate of") of the caption that no longer head
    the same phrase in the negative ("a group of zebras ... a stream" -> "a stream of zebras ... a group")."""
    heads = swap_rules().quantity_heads

    def phrases(text):
        w = words(text)
        return Counter(w[k] for k in range(len(w) - 1) if w[k] in heads and w[k + 1] == "of")
    return list((phrases(caption) - phrases(negative)).elements())


def surface_problems(caption: str, negative: str) -> list[str]:
    """The guards of a negative that reorders the caption's words (swap, negclip): a/an agreement, conjunct
    swaps, moved quantity heads. (A replacement fixes the article before the word it puts in itself.)"""
    problems = [f"a_an: {e!r}" for e in a_an_errors(caption, negative)]
    problems += [f"conjunct_swap: {s!r}" for s in conjunct_swaps(caption, negative)]
    problems += [f"quantity_head_moved: {h!r}" for h in quantity_heads_moved(caption, negative)]
    return problems
