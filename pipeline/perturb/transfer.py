"""A caption's hard negative carried over to its hard positive, as text (no parse): the training triple's negative
made from its positive, so that the positive and the negative differ only by the negative's own change and a
text-only model cannot pick the positive by the words the positive changed ("is", "by", a synonym).

- an exchange (neg_exchange.py: "A man chasing a dog" -> "A dog chasing a man"): the two phrases it exchanged,
  exchanged in the positive ("A dog chased by a man" -> "A man chased by a dog"): the same words as the positive;
- an edit (replace: "A man riding a horse" -> "A woman riding a horse"): the same words replaced in the positive
  ("A horse ridden by a man" -> "A horse ridden by a woman"), where they stand there once, beside the words that
  decided them (an object after the same article, an attribute before the same noun, a relation between the same
  words).
None wherever that is not sure: the phrases or words are not in the positive exactly once, or stand elsewhere.
Plain Python over the texts.
"""
from __future__ import annotations

import re

from pipeline.perturb.text import indefinite_article, match_case, tokenize
from pipeline.perturb.units import sentence_cased


def _norm(word: str) -> str:
    w = word.casefold()
    return "a" if w == "an" else w


def _words(text: str) -> list:
    return [t for t in tokenize(text) if t.text[0].isalnum()]


def changed_region(caption: str, negative: str) -> tuple[int, int, int, int] | None:
    """(i, j, k, m): the caption's words [i, j) became the negative's words [k, m) (a/an alike, case aside), the
    words before and after equal; None where nothing changed."""
    a, b = [_norm(t.text) for t in _words(caption)], [_norm(t.text) for t in _words(negative)]
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    if start == len(a) == len(b):
        return None
    end = 0
    while end < min(len(a), len(b)) - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
        end += 1
    return start, len(a) - end, start, len(b) - end


def exchanged_phrases(caption: str, negative: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The two word sequences (A, B) an exchange negative exchanged: caption = ... A M B ..., negative = ... B M A
    ...; None where the negative is not one exchange of the caption."""
    region = changed_region(caption, negative)
    if region is None:
        return None
    i, j, k, m = region
    c = [_norm(t.text) for t in _words(caption)][i:j]
    n = [_norm(t.text) for t in _words(negative)][k:m]
    if len(c) != len(n):
        return None
    for la in range(1, len(c)):
        for lb in range(1, len(c) - la + 1):
            if c[:la] == n[len(n) - la:] and c[len(c) - lb:] == n[:lb] and c[la:len(c) - lb] == n[lb:len(n) - la]:
                return tuple(c[:la]), tuple(c[len(c) - lb:])
    return None


# Words that point back at a phrase: once two phrases are exchanged, they point at the other one.
PRONOUNS = frozenset({"it", "them", "him", "her", "its", "their", "his", "itself", "themselves"})


def _find(tokens: list, phrase: tuple[str, ...]) -> list[int]:
    n = len(phrase)
    words = [_norm(t.text) for t in tokens]
    return [i for i in range(len(words) - n + 1) if tuple(words[i:i + n]) == phrase]


def exchange_in(text: str, a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """`text` with word sequences a and b exchanged, each found in it once (not overlapping): the characters of
    each kept, an a/an before each agreeing with what now follows it, the sentence capital at the start."""
    tokens = _words(text)
    found_a, found_b = _find(tokens, a), _find(tokens, b)
    if len(found_a) != 1 or len(found_b) != 1 or any(_norm(t.text) in PRONOUNS for t in tokens):
        return None  # "lights with a glass in front of them": the pronoun would point at the other phrase
    (sa, ea), (sb, eb) = sorted([(found_a[0], found_a[0] + len(a)), (found_b[0], found_b[0] + len(b))])
    if ea > sb:
        return None
    first_text = text[tokens[sa].start:tokens[ea - 1].end]
    second_text = text[tokens[sb].start:tokens[eb - 1].end]
    if sa == 0 and sentence_cased(tokens[0].text):
        first_text, second_text = _lower_first(first_text), second_text[:1].upper() + second_text[1:]
    pieces = [text[:tokens[sa].start], second_text, text[tokens[ea - 1].end:tokens[sb].start], first_text,
              text[tokens[eb - 1].end:]]
    return _joined(pieces, {1, 3})


def _lower_first(text: str) -> str:
    first = text.split(" ", 1)[0]
    return text if first.isupper() and len(first) > 1 else text[:1].lower() + text[1:]


_ARTICLE_BEFORE = re.compile(r"(?:^|(?<=\W))(an?)(\s+)$", re.IGNORECASE)


def _joined(pieces: list[str], moved: set[int]) -> str:
    """The pieces joined, the "a"/"an" right before each moved or new piece agreeing with its first word."""
    out = ""
    for k, piece in enumerate(pieces):
        if k in moved and piece:
            m = _ARTICLE_BEFORE.search(out)
            if m:
                out = out[:m.start(1)] + match_case(m.group(1), indefinite_article(piece)) + m.group(2)
        out += piece
    return out


# Which neighbours of the changed words decided them, by the replace atom (neg_replace.py): an object by what comes
# before it (its article, its adjective), an attribute by the noun after it, a relation (a verb, a preposition) by
# what it takes after it (a verb's object, a preposition's place: "in an open field" -> "beside an open field").
CONTEXT = {"object": (True, False), "attribute": (False, True), "relation": (False, True)}


def edit_in(caption: str, negative: str, positive: str, atom: str | None) -> str | None:
    """The positive with the words the negative changed in the caption changed the same way, where they stand in
    the positive once, with the same neighbours that decided the change; None otherwise."""
    region = changed_region(caption, negative)
    if region is None or atom not in CONTEXT:
        return None
    i, j, k, m = region
    c_tokens, n_tokens, p_tokens = _words(caption), _words(negative), _words(positive)
    if j == i:
        return None  # a word only added: where it goes in the positive is not known
    old = tuple(_norm(t.text) for t in c_tokens[i:j])
    found = _find(p_tokens, old)
    if len(found) != 1:
        return None
    s = found[0]
    e = s + len(old)
    before, after = CONTEXT[atom]

    def word(tokens, at):
        return _norm(tokens[at].text) if 0 <= at < len(tokens) else None
    if (before and word(c_tokens, i - 1) != word(p_tokens, s - 1)) or \
            (after and word(c_tokens, j) != word(p_tokens, e)):
        return None
    new_text = negative[n_tokens[k].start:n_tokens[m - 1].end] if m > k else ""
    if s == 0 and sentence_cased(c_tokens[0].text if c_tokens else ""):
        new_text = new_text[:1].upper() + new_text[1:]
    elif i == 0 and new_text:
        new_text = _lower_first(new_text)
    start, end = p_tokens[s].start, p_tokens[e - 1].end
    if not new_text:
        return None
    return _joined([positive[:start], new_text, positive[end:]], {1})


def edit_key(positive: str, negative: str) -> str | None:
    """The words the negative takes out of the positive and brings in, "man -> woman" (a/an alike, case aside);
    None where they are the same words."""
    region = changed_region(positive, negative)
    if region is None:
        return None
    i, j, k, m = region
    old = " ".join(_norm(t.text) for t in _words(positive)[i:j])
    new = " ".join(_norm(t.text) for t in _words(negative)[k:m])
    return f"{old} -> {new}"
