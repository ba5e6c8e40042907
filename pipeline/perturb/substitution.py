"""What a rewrite substitutes, as a key that ignores inflection: "sitting" -> "seated", "sits" -> "is seated" and
"sit" -> "seated" are one substitution (sit, seat) -> ... so that a training positive and a REPLACE evaluation pair
can be compared whatever form each caption uses.

Plain Python (no spaCy, WordNet or Beam): the pipeline's rule positives (which substitutions to hold out) and the
evaluator (which REPLACE rows a finetuning set's substitutions reach) use the same keys, and the evaluator runs in
an environment with only torch and pyarrow.
"""
from __future__ import annotations

import difflib
import json
import re
from functools import cache
from pathlib import Path

REPLACE_TABLE = Path(__file__).resolve().parent / "data" / "replace_table.json"
_WORD = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*")
# Forms a suffix rule cannot bring to their base (the verbs and nouns captions use in such forms).
_IRREGULAR = {"sat": "sit", "stood": "stand", "wore": "wear", "worn": "wear", "held": "hold", "rode": "ride",
              "ridden": "ride", "ate": "eat", "eaten": "eat", "lay": "lie", "lain": "lie", "lying": "lie",
              "men": "man", "women": "woman", "children": "child", "people": "person", "geese": "goose",
              "mice": "mouse", "teeth": "tooth", "feet": "foot", "is": "be", "are": "be", "was": "be",
              "were": "be", "been": "be", "being": "be", "am": "be", "has": "have", "had": "have",
              "an": "a", "bigger": "big", "biggest": "big"}
_KEEP = frozenset({"this", "his", "its", "has", "is", "was", "us", "as", "bus", "gas", "glass", "grass", "dress",
                   "across", "news", "always", "perhaps", "bonus", "canvas", "series", "species", "bless"})


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def stem(word: str) -> str:
    """A crude base form, the same for a word's inflections: sitting, sits, sit -> sit; seated, seat -> seat;
    couches -> couch. Not a dictionary lemma: it only has to map both sides of a comparison alike."""
    w = word.lower()
    if w in _IRREGULAR:
        return _IRREGULAR[w]
    if w in _KEEP or len(w) <= 3:
        return w
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[:-len(suffix)]
            if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]  # sitting -> sitt -> sit
            return w.rstrip("e") or w
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("ches", "shes", "sses", "xes", "zes")):
        return w[:-2].rstrip("e")
    if w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    return w.rstrip("e") or w


_LEFT_OUT = frozenset({"a", "be"})


def key(old: str, new: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The substitution old -> new as stems, articles and forms of "be" left out ("a man" -> "a guy" is man ->
    guy, "sits" -> "is seated" is sit -> seat, as "sitting" -> "seated" is)."""
    return (tuple(s for s in map(stem, words(old)) if s not in _LEFT_OUT),
            tuple(s for s in map(stem, words(new)) if s not in _LEFT_OUT))


def either_way(pairs) -> frozenset:
    """Every key of the (old, new) pairs, in both directions."""
    keys = set()
    for old, new in pairs:
        k = key(old, new)
        keys.add(k)
        keys.add((k[1], k[0]))
    return frozenset(keys)


def changed_span(caption: str, rewrite: str) -> tuple[str, str] | None:
    """The words of `caption` that `rewrite` changed and what stands in their place: the span from the first to
    the last differing word (a/an alike). None when the words are the same."""
    a, b = words(caption), words(rewrite)
    norm = lambda ws: ["a" if w == "an" else w for w in ws]  # noqa: E731
    changes = [op for op in difflib.SequenceMatcher(a=norm(a), b=norm(b), autojunk=False).get_opcodes()
               if op[0] != "equal"]
    if not changes:
        return None
    i1, j1 = changes[0][1], changes[0][3]
    i2, j2 = changes[-1][2], changes[-1][4]
    return " ".join(a[i1:i2]), " ".join(b[j1:j2])


@cache
def replace_eval_pairs(path: str | None = None) -> tuple[tuple[str, str], ...]:
    """Every (from, to) of the REPLACE evaluation table (data/replace_table.json): the c -> c_p substitutions the
    REPLACE set can hold."""
    raw = json.loads(Path(path or REPLACE_TABLE).read_text(encoding="utf-8"))
    pairs = {(old, new) for categories in raw["categories"].values() for entries in categories.values()
             for old, new in entries}
    return tuple(sorted(pairs))


def replace_eval_keys(path: str | None = None) -> frozenset:
    """The REPLACE table's substitutions as keys, both directions: what training positives hold out."""
    return either_way(replace_eval_pairs(path))
