"""Cleaning and validating LLM rewrites: pure functions, no model, no Beam.

clean() strips what chat models wrap around the answer ("Sure! Here is the changed sentence:", quotes,
"Output:" echoes, trailing explanations). validate() then decides whether the cleaned text is a hard
positive of its kind:
- replace (and its verb/preposition variants): differs from the caption in exactly one short span of whole
  words (one word for up to three, or up to three for one), is not the caption, does not only re-inflect a
  word, and is not a change the hard-negative rules would make (another number, colour, person word or a
  contrasting preposition; with a WordNet lexicon, an antonym or co-hyponym of the replaced word);
- swap: the caption's content words (articles, case, punctuation and singular/plural aside) in another
  order, and that order is the caption's two sides of an "and" exchanged, nothing else moved.
"""
from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from typing import Callable

from pipeline.perturb.candidates import same_text
from pipeline.perturb.lexicon import COLOURS as LEXICON_COLOURS

MAX_SPAN_WORDS = 3  # "one short span": a synonym of one word may take up to three ("couch" -> "sofa bed")
ARTICLES = frozenset({"a", "an", "the"})
NUMBERS = frozenset("one two three four five six seven eight nine ten eleven twelve dozen several many few "
                    "single double couple pair".split())
COLOURS = frozenset(LEXICON_COLOURS) | {"grey"}
PEOPLE = frozenset("man men woman women boy boys girl girls baby babies child children kid kids".split())


def _contrasting_words() -> dict[str, set[str]]:
    """Word pairs from the replace negatives' preposition table (perturb/neg_replace.py), both ways: a rewrite
    that makes one of these changes is a hard negative, not a hard positive."""
    from pipeline.perturb.neg_replace import PREPOSITIONS

    glue = {"of", "to", "from"}
    pairs: dict[str, set[str]] = {}
    for key, contrasts in PREPOSITIONS.items():
        for contrast in contrasts:
            for a in set(key) - glue:
                for b in set(contrast.split()) - glue - {a}:
                    pairs.setdefault(a, set()).add(b)
                    pairs.setdefault(b, set()).add(a)
    return pairs


_CONTRASTS = _contrasting_words()
_IRREGULAR = {"men": "man", "women": "woman", "children": "child", "people": "person", "feet": "foot",
              "teeth": "tooth", "mice": "mouse", "geese": "goose", "knives": "knife", "leaves": "leaf",
              "wolves": "wolf", "shelves": "shelf", "halves": "half", "loaves": "loaf", "calves": "calf",
              "oxen": "ox", "dice": "die", "antelope": "antelope", "sheep": "sheep", "fish": "fish"}
_WORD = re.compile(r"\w+(?:'\w+)?")
_LEAD_CHATTER = re.compile(
    r"^(?:sure|certainly|of course|okay|ok|absolutely|here(?:'s| is| are)?|great|no problem|happy to help)\b", re.I)
_LEAD_EXCLAMATION = re.compile(
    r"^(?:sure|certainly|of course|okay|ok|absolutely|great|no problem)\s*[!,.]\s+", re.I)
_LABEL = re.compile(r"^(?:[\w' ]{0,40}?(?:sentence|output|answer|rewrite|rewritten|version|caption|result)"
                    r"[\w' ]{0,20}?|output|answer|input)\s*:\s*", re.I)
_TRAILING = re.compile(
    r"(?:\s+\((?:[^()]*\b(?:replac|swap|chang|synonym|word|original|meaning)[^()]*)\)"
    r"|(?<=[.!?\"'])\s+(?:I |I've |I have |Note|Explanation|This |The word|The words|Here|In this|Replaced|"
    r"Swapped|Changed|Original|\(|-|–)).*$", re.S)
_QUOTES = "\"'“”‘’`«»"
# Found in SmolLM2's answers: a sentence about the sentence ('The sentence was rephrased to "..." to avoid ...').
_META = re.compile(r"^(?:the|this|your|my)\s+(?:new\s+|changed\s+|original\s+|rewritten\s+|modified\s+)?"
                   r"sentence\s+(?:is|was|would be|reads|becomes|has been)\b", re.I)
_QUOTED = re.compile(r"[\"“]([^\"“”]+)[\"”]")
# Words that carry no content of the scene: a change among them only is not a synonym ("some park" -> "a park",
# "this kitchen" -> "a kitchen", "so many screen" -> "a screen"). Prepositions are not here: they carry the layout.
FUNCTION_WORDS = frozenset("a an the this that these those some any each every all both either neither no many much "
                           "few so very such and or but nor his her its their our my your is are was were be been "
                           "being am it they he she we".split())


@dataclass(frozen=True)
class Verdict:
    ok: bool
    text: str          # the cleaned generation
    reason: str = ""   # why not, when not ok: a stable machine-readable word
    detail: str = ""


def clean(raw: str, caption: str = "") -> str:
    """The answer inside a chat model's reply: first real line, labels, quotes and explanations removed. Nothing
    the caption itself contains is removed ("... beach [/INST]", "A poster with the caption: ..."): a rewrite
    keeps what belongs to the caption, and validation then compares it with the exact caption."""
    keep = _CaptionText(caption)
    text = raw.replace("\r", "")
    for token in ("[/INST]", "</s>"):
        if not keep.has(token):
            text = text.replace(token, "")
    lines = [line.strip() for line in text.strip().split("\n") if line.strip()]
    while lines and _is_preamble(lines[0]) and len(lines) > 1 and not keep.has(lines[0]):
        lines.pop(0)
    if not lines:
        return ""
    line = lines[0]
    quoted = _QUOTED.search(line) if _META.match(line) and not keep.has(line) else None
    if quoted:  # 'The sentence is "A cat ..."': the quoted sentence is the answer
        line = quoted.group(1).strip()
    # A preamble and the answer on one line: "Sure! Here is the changed sentence: A man ..."
    if _LEAD_CHATTER.match(line) and ":" in line:
        line = keep.cut(line, line.split(":", 1)[1].strip())
    line = keep.cut(line, _LEAD_EXCLAMATION.sub("", line))  # "Certainly! A man ..."
    for _ in range(2):
        line = keep.cut(line, _LABEL.sub("", line, count=1).strip())
    line = keep.cut(line, _TRAILING.sub("", line).strip())
    line = keep.cut(line, _strip_quotes(line))
    line = keep.cut(line, _TRAILING.sub("", line).strip())
    return " ".join(line.split())


class _CaptionText:
    """What the caption contains, compared without case and spacing."""

    def __init__(self, caption: str):
        self.text = _squeeze(caption)

    def has(self, piece: str) -> bool:
        piece = _squeeze(piece)
        return bool(piece) and bool(self.text) and piece in self.text

    def cut(self, before: str, after: str) -> str:
        """`after` (before with something stripped), unless what was stripped is part of the caption."""
        if after == before:
            return before
        at = before.find(after) if after else -1
        if at >= 0:
            dropped = [before[:at], before[at + len(after):]]
        else:  # stripped and rewritten (a quote moved past a full stop): what differs between the two
            start = len(os.path.commonprefix([before, after]))
            end = len(os.path.commonprefix([before[start:][::-1], after[start:][::-1]]))
            dropped = [before[start:len(before) - end]]
        return before if any(self.has(d) for d in dropped) else after


def _squeeze(text: str) -> str:
    return " ".join(text.casefold().split())


def _is_preamble(line: str) -> bool:
    return line.endswith(":") or (_LEAD_CHATTER.match(line) is not None and len(line.split()) <= 12
                                  and line.rstrip()[-1:] in ("!", ":", "."))


def _strip_quotes(line: str) -> str:
    while len(line) >= 2 and line[0] in _QUOTES and line[-1] in _QUOTES + ".":
        inner = line[1:-1] if line[-1] in _QUOTES else line[1:-2] + "."
        if line[-1] == "." and line[-2] not in _QUOTES:
            break
        line = inner.strip()
    if line and line[0] in _QUOTES and line.count(line[0]) == 1:  # a lone opening quote (truncated output)
        line = line[1:].strip()
    return line


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def singular(word: str) -> str:
    """A crude but symmetric singular: applied to both sides, so "antelope"/"antelopes" compare equal."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _content(text: str) -> list[str]:
    return [singular(w) for w in words(text) if w not in ARTICLES]


def _answer(caption: str, raw: str, finish_reason: str | None) -> Verdict:
    """The cleaned answer, or the Verdict that rejects any generation: empty, cut off, the caption itself."""
    text = clean(raw, caption)
    if not text:
        return Verdict(False, text, "empty", "nothing left after removing the chat wrapping")
    if same_text(caption, text) or words(caption) == words(text):
        return Verdict(False, text, "identical", "the caption itself (case, spacing and punctuation aside)")
    # before "truncated": a leaked example usually runs to the token limit, and the leak is what went wrong
    if _echoes_prompt(text, caption):
        return Verdict(False, text, "prompt_echoed", "the answer repeats the instruction or an example")
    if _META.match(text) and not _META.match(caption):
        return Verdict(False, text, "meta_answer", "a sentence about the sentence, not a rewrite of it")
    if finish_reason == "length":
        return Verdict(False, text, "truncated", "generation stopped at the token limit")
    return Verdict(True, text)


def validate(positive_type: str, caption: str, raw: str, finish_reason: str | None = None,
             is_negative: Callable[[list[str], list[str]], str | None] | None = None) -> Verdict:
    """The verdict on one hard-positive generation. `is_negative(old_words, new_words)` may add a lexicon check
    (a reason when the replacement is one the hard-negative rules would make)."""
    answer = _answer(caption, raw, finish_reason)
    if not answer.ok:
        return answer
    if positive_type == "swap":
        verdict = _validate_swap(caption, answer.text)
        return Verdict(True, keep_ends(caption, verdict.text)) if verdict.ok else verdict
    verdict = _validate_replace(caption, answer.text, is_negative)
    return Verdict(True, rebuilt_replace(caption, verdict.text), detail=verdict.detail) if verdict.ok else verdict


_END = re.compile(r"[\s.!?,;:]*$")


def keep_ends(caption: str, text: str) -> str:
    """text with the caption's final punctuation and whitespace, its first letter's case and, where the two have
    as many words, its spacing between words: a model adds or drops a full stop where the caption has none or
    one, or a double space, cues that tell c_p from c without the photo."""
    text = text[:_END.search(text).start()] + caption[_END.search(caption).start():]
    gaps, pieces = re.findall(r"\s+", caption.strip()), text.split()
    if len(pieces) == len(gaps) + 1:
        text = "".join(p + g for p, g in zip(pieces, [*gaps, ""], strict=True)) + caption[len(caption.rstrip()):]
    text = text[len(text) - len(text.lstrip()):]
    text = caption[:len(caption) - len(caption.lstrip())] + text
    if text.strip() and caption.strip() and caption.strip()[0].isalpha():
        at = len(text) - len(text.lstrip())
        first = caption.strip()[0]
        text = text[:at] + (text[at].upper() if first.isupper() else text[at].lower()) + text[at + 1:]
    return text


def rebuilt_replace(caption: str, text: str) -> str:
    """A one-span rewrite as the caption with only that span replaced: the caption's own spacing, punctuation
    and case everywhere else (a model's added comma or dropped full stop is a surface cue, not a synonym), the
    a/an before the span made to agree with the new word."""
    from pipeline.perturb.text import indefinite_article, match_case

    def spans(s: str) -> list[tuple[int, int, str]]:  # words with offsets, "an" read as "a" (as one_span does)
        return [(m.start(), m.end(), "a" if m.group().lower() == "an" else m.group().lower())
                for m in _WORD.finditer(s)]

    old, new = spans(caption), spans(text)
    changes = [op for op in difflib.SequenceMatcher(a=[w for *_, w in old], b=[w for *_, w in new],
                                                    autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(changes) != 1 or changes[0][1] == changes[0][2] or changes[0][3] == changes[0][4]:
        return text
    _, i1, i2, j1, j2 = changes[0]
    span = text[new[j1][0]:new[j2 - 1][1]]
    if i1 == 0:
        span = match_case(caption[old[0][0]:old[0][1]], span)
    before = caption[:old[i1][0]]
    if i1 > 0 and old[i1 - 1][2] == "a" and old[i1 - 1][1] == len(before.rstrip()):
        start, end = old[i1 - 1][0], old[i1 - 1][1]
        before = before[:start] + match_case(caption[start:end], indefinite_article(span)) + before[end:]
    return before + span + caption[old[i2 - 1][1]:]


def validate_negative(negative_type: str, caption: str, raw: str, finish_reason: str | None = None,
                      lexicon=None) -> Verdict:
    """The verdict on one LLM hard-negative generation (llm_replace_obj/att/rel, llm_swap_obj/att): the one-span
    or same-words rules of the positives, and the meaning must change the way the rule-based negatives'
    must: never a synonym or a mere re-inflection, never the two sides of one "and" exchanged, never a moved
    quantity head, a/an kept; a replace changes a word of its kind (a noun for obj, an adjective, colour or
    number for att, a verb or preposition for rel)."""
    from pipeline.perturb.guards import a_an_errors, quantity_heads_moved

    answer = _answer(caption, raw, finish_reason)
    if not answer.ok:
        return answer
    text = answer.text
    if negative_type.startswith("llm_swap"):
        reordered = _reordered(caption, text)
        if isinstance(reordered, Verdict):
            return reordered
        old, new = reordered
        if swapped_around_and(old, new):
            return Verdict(False, text, "conjunct_swap", "the two sides of one 'and' exchanged: the same scene")
        moved = quantity_heads_moved(caption, text)
        if moved:
            return Verdict(False, text, "quantity_head_moved", ", ".join(moved))
    else:
        span = one_span(caption, text)
        if isinstance(span, Verdict):
            return span
        old, new = ([w for w in ws if w not in ARTICLES] for ws in span)
        detail = f"{' '.join(old)!r} -> {' '.join(new)!r}"
        # Found in SmolLM2's negatives: "its" -> "that it's" fixes grammar and changes no content
        old_content, new_content = ([w for w in ws if w not in FUNCTION_WORDS] for ws in (old, new))
        if not old_content or not new_content:
            return Verdict(False, text, "no_content_word", f"{detail}: no content word changed")
        if lexicon is not None:
            reason = _same_meaning(old_content, new_content, lexicon)
            if reason:
                return Verdict(False, text, reason, detail)
            if len(old_content) == 1 and not _of_kind(negative_type, old_content[0], lexicon):
                return Verdict(False, text, "wrong_kind", f"{detail}: not the {negative_type[12:]} the prompt asks for")
    errors = a_an_errors(caption, text)
    if errors:
        return Verdict(False, text, "a_an", ", ".join(errors))
    return Verdict(True, text, detail="" if negative_type.startswith("llm_swap") else detail)


def _one_lemma(a: str, b: str, lexicon, parts_of_speech=("n", "v", "a")) -> bool:
    """a and b are forms of one word in some part of speech ("sitting"/"sits", "are"/"is")."""
    return any(lexicon.lemma(a, pos) and lexicon.lemma(a, pos) == lexicon.lemma(b, pos) for pos in parts_of_speech)


def _same_meaning(old: list[str], new: list[str], lexicon) -> str | None:
    """same_word when a word comes back re-inflected ("is reaching" -> "reaches", "accent colors" -> "accents");
    synonym when the heads (last words) are near-synonyms in any part of speech both have ("holding" ->
    "grasping" are also two nouns, and not synonyms as nouns; "various assortment" -> "variety")."""
    for a in old:
        for b in new:
            if a != b and _one_lemma(a, b, lexicon):
                return "same_word"
    for pos in ("n", "v", "a"):
        a, b = lexicon.lemma(old[-1], pos), lexicon.lemma(new[-1], pos)
        if a and b and lexicon.near_synonyms(a, b, pos):
            return "synonym"
    return None


def _of_kind(negative_type: str, word: str, lexicon) -> bool:
    if negative_type == "llm_replace_obj":
        return lexicon.lemma(word, "n") is not None
    if negative_type == "llm_replace_att":
        return lexicon.lemma(word, "a") is not None or word in COLOURS or word in NUMBERS or word.isdigit()
    return lexicon.lemma(word, "v") is not None or word in _CONTRASTS


# Lines of the prompts' instructions and examples: a weak model repeats them ("Output: two antelopes and three
# giraffes") instead of answering.
_PROMPT_ECHOES = ("three giraffes and two antelope", "two antelopes and three giraffes", "stained glass clock",
                  "rice and broccoli", "broccoli and rice", "a sink, toilet and shower", "a sink, shower and toilet",
                  "wearing glasses and holding a wine bottle", "holding a wine bottle and wearing glasses",
                  "replace one word", "swap the words", "without changing the meaning", "only output",
                  "only respond", "a person clothed in a shirt", "tall buildings beneath a cloudy sky",
                  # the examples of the negatives' prompts (prompts/negatives/)
                  "making pizzas", "birds besides her", "a blue bike parked", "a red bike parked",
                  "kitchen is clean and ready", "kitchen is dirty and ready", "bowl of fruit on it",
                  "a couple of buckets", "resting on a laptop", "resting on a person", "plate of donuts",
                  "pink shirt holding a blue umbrella", "blue shirt holding a pink umbrella", "brushing her teeth",
                  "original sentence", "new sentence",
                  # SmolLM2 answers SWAP with a paraphrase of its last example ("A man wearing glasses and
                  # holding a glass of wine")
                  "wearing glasses", "glass of wine", "wine bottle")


def _echoes_prompt(text: str, caption: str) -> bool:
    """The answer carries a line of the prompt that brings words the caption does not have."""
    low, own = text.casefold(), set(_content(caption))
    return any(echo in low and not set(_content(echo)) <= own for echo in _PROMPT_ECHOES)


def one_span(caption: str, text: str) -> tuple[list[str], list[str]] | Verdict:
    """(old words, new words) of the one short span where text differs from the caption, or the Verdict that
    rejects it: several spans, words only added or deleted, a span too long, several words for several."""
    # "an" and "a" are one word here: the article follows the new word ("an umbrella" -> "a parasol").
    old_words = ["a" if w == "an" else w for w in words(caption)]
    new_words = ["a" if w == "an" else w for w in words(text)]
    changes = [op for op in difflib.SequenceMatcher(a=old_words, b=new_words, autojunk=False).get_opcodes()
               if op[0] != "equal"]
    if len(changes) > 1:
        return Verdict(False, text, "more_than_one_span", f"{len(changes)} separate changes")
    if not changes:  # found by SmolLM2: "an" -> "a", or only case and punctuation changed
        return Verdict(False, text, "identical", "the same words (case, punctuation or a/an aside)")
    _, i1, i2, j1, j2 = changes[0]
    old, new = old_words[i1:i2], new_words[j1:j2]
    detail = f"{' '.join(old)!r} -> {' '.join(new)!r}"
    if not old:
        return Verdict(False, text, "words_added", detail)
    if not new:
        return Verdict(False, text, "words_deleted", detail)
    if len(old) > MAX_SPAN_WORDS or len(new) > MAX_SPAN_WORDS:
        return Verdict(False, text, "span_too_long", detail)
    if min(len(old), len(new)) > 1:  # one word for a phrase or a phrase for one word, not several words
        return Verdict(False, text, "more_than_one_word", detail)
    if [singular(w) for w in old if w not in ARTICLES] == [singular(w) for w in new if w not in ARTICLES]:
        return Verdict(False, text, "same_word", detail)
    return old, new


def _validate_replace(caption: str, text: str, is_negative) -> Verdict:
    span = one_span(caption, text)
    if isinstance(span, Verdict):
        return span
    old, new = span
    detail = f"{' '.join(old)!r} -> {' '.join(new)!r}"
    if all(w in FUNCTION_WORDS for w in new):
        return Verdict(False, text, "no_content_word", f"{detail}: only function words come in")
    reason = _rule_negative(old, new) or (is_negative(old, new) if is_negative else None)
    if reason:
        return Verdict(False, text, reason, detail)
    return Verdict(True, text, detail=detail)


def table_synonyms(a: str, b: str) -> bool:
    """a and b (words or phrases, any inflection of a noun) are a pair of the rule_replace synonym table
    (perturb/data/positive_synonyms.json): true synonyms, read and kept as such."""
    return frozenset((_table_key(a), _table_key(b))) in _table_pairs()


def _table_key(phrase: str) -> str:
    return " ".join(singular(w.removesuffix("'s")) for w in words(phrase) if w not in ARTICLES)


@cache
def _table_pairs() -> frozenset[frozenset[str]]:
    from pipeline.perturb.rule_data import positive_synonyms

    return frozenset(frozenset((_table_key(e["from"]), _table_key(e["to"]))) for e in positive_synonyms().entries)


def _rule_negative(old: list[str], new: list[str]) -> str | None:
    """A replacement that changes the meaning the way a hard negative does (never a pair of the synonym table:
    "kids" -> "children" changes no person)."""
    if table_synonyms(" ".join(old), " ".join(new)):
        return None
    for kind, vocabulary in (("number_changed", NUMBERS), ("colour_changed", COLOURS), ("person_changed", PEOPLE)):
        if any(w in vocabulary or (kind == "number_changed" and w.isdigit()) for w in old) and \
                any(w in vocabulary or (kind == "number_changed" and w.isdigit()) for w in new):
            return kind
    if any(n in _CONTRASTS.get(o, ()) for o in old for n in new):
        return "contrasting_preposition"
    return None


def _reordered(caption: str, text: str) -> tuple[list[str], list[str]] | Verdict:
    """(caption's content words, text's) when text has the same words in another order, else the Verdict."""
    old, new = _content(caption), _content(text)
    if Counter(old) != Counter(new):
        missing = list((Counter(old) - Counter(new)).elements())
        extra = list((Counter(new) - Counter(old)).elements())
        return Verdict(False, text, "words_changed", f"missing {missing}, added {extra}")
    if old == new:
        return Verdict(False, text, "same_order", "the same words in the same order")
    return old, new


def _validate_swap(caption: str, text: str) -> Verdict:
    reordered = _reordered(caption, text)
    if isinstance(reordered, Verdict):
        return reordered
    old, new = reordered
    if not swapped_around_and(old, new):
        return Verdict(False, text, "not_swapped_around_and", "the order changed in another way")
    return Verdict(True, text)


def swapped_around_and(old: list[str], new: list[str]) -> bool:
    """new = old with the two sides of one "and" exchanged: old = P + A + and + B + S, new = P + B + and + A + S,
    where the common prefix P and suffix S are as long as they can be and A, B are non-empty."""
    prefix = 0
    while prefix < len(old) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < len(old) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    # The common ends may have swallowed part of a conjunct ("a sink, toilet and shower" -> P takes "sink"):
    # try every way to give words back to the middle.
    for p in range(prefix, -1, -1):
        for s in range(suffix, -1, -1):
            middle_old, middle_new = old[p:len(old) - s], new[p:len(new) - s]
            for k, w in enumerate(middle_old):
                if w != "and" or k == 0 or k == len(middle_old) - 1:
                    continue
                a, b = middle_old[:k], middle_old[k + 1:]
                if middle_new == b + ["and"] + a:
                    return True
    return False


def lexicon_check(lexicon) -> Callable[[list[str], list[str]], str | None]:
    """is_negative for validate(), with WordNet: the replacement must keep the meaning the way a synonym does
    (perturb's lexicon.near_synonyms: a shared synset, a hypernym or hyponym, a curated group of
    perturb/data/near_synonyms.json, prepositions included), else "not_a_synonym"; and a replacement the
    replace hard-negative generator would itself offer (a WordNet antonym or co-hyponym, a word of the same
    contrast set or verb group) changes the meaning: "hard_negative_word"."""
    from pipeline.perturb.rule_data import listed_near_synonyms, replacements, verb_contrasts

    def negative_word(a: str, b: str) -> bool:
        for pos in ("n", "v", "a"):
            la, lb = lexicon.lemma(a, pos), lexicon.lemma(b, pos)
            if la and lb and (lb in lexicon.replacements(la, pos) or lb in replacements().object_sets.get(la, ())
                              or lb in verb_contrasts().get(la, ()) or lb in replacements().people.get(la, ())):
                return True
        return False

    def synonym(a: str, b: str) -> bool:
        if listed_near_synonyms(a, b) or lexicon.shares_synset(a.replace(" ", "_"), b.replace(" ", "_")):
            return True
        if table_synonyms(a, b) or table_synonyms(lexicon.lemma(a, "v") or a, lexicon.lemma(b, "v") or b):
            return True
        for pos in ("n", "v", "a", "r"):
            if pos == "n":  # a plural's base form first ("men" is also WordNet's work force)
                la, lb = (lexicon.noun_lemma(w.replace(" ", "_"), True) for w in (a, b))
            else:
                la, lb = lexicon.lemma(a.replace(" ", "_"), pos), lexicon.lemma(b.replace(" ", "_"), pos)
            if la and lb and (la == lb or listed_near_synonyms(la, lb) or lexicon.near_synonyms(la, lb, pos)):
                return True
        return False

    def is_negative(old: list[str], new: list[str]) -> str | None:
        old = [w for w in old if w not in ARTICLES]
        new = [w for w in new if w not in ARTICLES]
        if not old or not new:
            return None
        a, b = " ".join(old), " ".join(new)
        # a re-inflection is not a synonym ("opened" -> "open", "sitting" -> "sits", "are" -> "is"): one lemma
        if len(old) == len(new) == 1 and _one_lemma(a, b, lexicon, ("n", "v", "a", "r")):
            return "same_word"
        if synonym(a, b):
            return None
        if len(old) == 1 and len(new) == 1 and negative_word(a, b):
            return "hard_negative_word"
        return "not_a_synonym"

    return is_negative


class Validator:
    """validate() or validate_negative() for (prompt element, attempt) pairs, by the element's kind; with
    wordnet=True the lexicon checks are added."""

    def __init__(self, wordnet: bool = True):
        self.wordnet = wordnet
        self.is_negative = self.lexicon = None
        if wordnet:
            from pipeline.perturb.lexicon import Lexicon
            from pipeline.perturb.wordnet import load_wordnet

            self.lexicon = Lexicon(load_wordnet())
            self.is_negative = lexicon_check(self.lexicon)

    def __call__(self, element: dict, attempt: dict) -> Verdict:
        if attempt["finish_reason"] == "error":
            return Verdict(False, "", "request_failed", attempt.get("error", ""))
        kind = element["kind"]
        if kind.startswith("llm_"):
            return validate_negative(kind, element["caption"], attempt["text"], attempt["finish_reason"],
                                     self.lexicon)
        return validate(kind, element["caption"], attempt["text"], attempt["finish_reason"], self.is_negative)


@cache
def shared_validator(wordnet: bool) -> Validator:
    """One Validator per process: the handler and the validation step share its WordNet lexicon."""
    return Validator(wordnet)
