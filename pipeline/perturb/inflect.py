"""Inflect a replacement word to the form of the word it replaces (plural nouns, verb tenses).

Irregular forms come from WordNet's exception lists (noun.exc, verb.exc map inflected -> base), read
backwards; everything else follows the regular English spelling rules.
"""
from __future__ import annotations

import re
from collections import defaultdict

_VOWELS = "aeiou"
# Common forms WordNet's exception lists lack (they omit forms equal to the base and some frequent ones).
_NOUN_PLURALS = {"woman": "women", "man": "men", "person": "people", "sheep": "sheep", "deer": "deer",
                 "fish": "fish", "aircraft": "aircraft", "species": "species", "series": "series",
                 "bison": "bison", "moose": "moose", "salmon": "salmon", "shrimp": "shrimp", "police": "police"}
_VERBS = {  # base: (past, participle)
    "be": ("was", "been"), "begin": ("began", "begun"), "bite": ("bit", "bitten"), "blow": ("blew", "blown"),
    "break": ("broke", "broken"), "bring": ("brought", "brought"), "build": ("built", "built"),
    "buy": ("bought", "bought"), "catch": ("caught", "caught"), "come": ("came", "come"), "cut": ("cut", "cut"),
    "do": ("did", "done"), "draw": ("drew", "drawn"), "drink": ("drank", "drunk"), "drive": ("drove", "driven"),
    "eat": ("ate", "eaten"), "fall": ("fell", "fallen"), "feed": ("fed", "fed"), "fly": ("flew", "flown"),
    "get": ("got", "gotten"), "give": ("gave", "given"), "go": ("went", "gone"), "grow": ("grew", "grown"),
    "hang": ("hung", "hung"), "have": ("had", "had"), "hit": ("hit", "hit"), "hold": ("held", "held"),
    "keep": ("kept", "kept"), "lay": ("laid", "laid"), "lead": ("led", "led"), "leave": ("left", "left"),
    "let": ("let", "let"), "lie": ("lay", "lain"), "light": ("lit", "lit"), "make": ("made", "made"),
    "put": ("put", "put"), "read": ("read", "read"), "ride": ("rode", "ridden"), "ring": ("rang", "rung"),
    "rise": ("rose", "risen"), "run": ("ran", "run"), "see": ("saw", "seen"), "sell": ("sold", "sold"),
    "set": ("set", "set"), "shake": ("shook", "shaken"), "shoot": ("shot", "shot"), "shut": ("shut", "shut"),
    "sing": ("sang", "sung"), "sink": ("sank", "sunk"), "sit": ("sat", "sat"), "sleep": ("slept", "slept"),
    "slide": ("slid", "slid"), "spin": ("spun", "spun"), "split": ("split", "split"), "spread": ("spread", "spread"),
    "stand": ("stood", "stood"), "steal": ("stole", "stolen"), "stick": ("stuck", "stuck"),
    "swim": ("swam", "swum"), "swing": ("swung", "swung"), "take": ("took", "taken"), "teach": ("taught", "taught"),
    "tear": ("tore", "torn"), "throw": ("threw", "thrown"), "wake": ("woke", "woken"), "wear": ("wore", "worn"),
    "win": ("won", "won"), "write": ("wrote", "written"), "fight": ("fought", "fought"), "find": ("found", "found"),
    "freeze": ("froze", "frozen"), "hide": ("hid", "hidden"), "lose": ("lost", "lost"), "meet": ("met", "met"),
    "pay": ("paid", "paid"), "say": ("said", "said"), "send": ("sent", "sent"), "shine": ("shone", "shone"),
    "speak": ("spoke", "spoken"), "spend": ("spent", "spent"), "strike": ("struck", "struck"),
    "sweep": ("swept", "swept"), "think": ("thought", "thought"), "weave": ("wove", "woven"),
}
_SIBILANT = re.compile(r"(s|x|z|ch|sh)$")
_CONSONANT_Y = re.compile(r"[^aeiou]y$")


class Inflector:
    def __init__(self, noun_plurals: dict[str, list[str]], verb_forms: dict[str, list[str]]):
        self.noun_plurals = noun_plurals
        self.verb_forms = verb_forms

    @classmethod
    def from_wordnet(cls, wordnet) -> Inflector:
        """From an NLTK WordNetCorpusReader's exception files (plain folder or NLTK's zip alike)."""
        def lines(name):
            with wordnet.open(name) as f:
                return f.read().splitlines()
        return cls(_reverse_exceptions(lines("noun.exc")), _reverse_exceptions(lines("verb.exc")))

    def plural(self, noun: str) -> str:
        if noun in _NOUN_PLURALS:
            return _NOUN_PLURALS[noun]
        if noun.endswith("man") and len(noun) > 4 and noun not in ("human", "german", "roman", "shaman"):
            return noun[:-3] + "men"  # policeman, fisherman, snowman
        irregular = self.noun_plurals.get(noun)
        if irregular:
            return irregular[0]
        if _SIBILANT.search(noun):
            return noun + "es"
        if _CONSONANT_Y.search(noun):
            return noun[:-1] + "ies"
        return noun + "s"

    def verb(self, base: str, tag: str) -> str:
        """`base` in the Penn tag's form: VBG, VBD, VBN, VBZ; VB and VBP are the base form."""
        if tag == "VBG":
            return self._irregular(base, lambda f: f.endswith("ing")) or _regular_ing(base)
        if tag in ("VBD", "VBN") and base in _VERBS:
            return _VERBS[base][tag == "VBN"]
        if tag in ("VBD", "VBN"):
            forms = [f for f in self.verb_forms.get(base, []) if not f.endswith("ing") and not f.endswith("s")]
            if forms:
                # Where past and participle differ ("began"/"begun"), the participle is the -n/-en form.
                participles = [f for f in forms if f.endswith("n")]
                pasts = [f for f in forms if not f.endswith("n")]
                if tag == "VBN":
                    return (participles or forms)[0]
                return (pasts or forms)[0]
            return _regular_ed(base)
        if tag == "VBZ":
            if base == "have":
                return "has"
            if base in ("be",):
                return "is"
            if _SIBILANT.search(base) or base.endswith("o"):
                return base + "es"
            if _CONSONANT_Y.search(base):
                return base[:-1] + "ies"
            return base + "s"
        return base

    def _irregular(self, base: str, keep) -> str | None:
        forms = [f for f in self.verb_forms.get(base, []) if keep(f)]
        return forms[0] if forms else None


def _reverse_exceptions(lines: list[str]) -> dict[str, list[str]]:
    reverse: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        parts = line.split()
        for base in parts[1:]:
            if "_" not in parts[0] and parts[0] not in reverse[base]:
                reverse[base].append(parts[0])
    return {base: sorted(forms, key=lambda f: (len(f), f)) for base, forms in reverse.items()}


def _cvc(word: str) -> bool:
    """Short consonant-vowel-consonant ending whose last consonant doubles: run -> running, sit -> sat."""
    return (len(word) >= 3 and word[-1] not in _VOWELS + "wxy" and word[-2] in _VOWELS
            and word[-3] not in _VOWELS and sum(c in _VOWELS for c in word) == 1)


def _regular_ing(base: str) -> str:
    if base.endswith("ie"):
        return base[:-2] + "ying"
    if base.endswith("e") and not base.endswith(("ee", "ye", "oe")) and len(base) > 2:
        return base[:-1] + "ing"
    if _cvc(base):
        return base + base[-1] + "ing"
    return base + "ing"


def _regular_ed(base: str) -> str:
    if base.endswith("e"):
        return base + "d"
    if _CONSONANT_Y.search(base):
        return base[:-1] + "ied"
    if _cvc(base):
        return base + base[-1] + "ed"
    return base + "ed"
