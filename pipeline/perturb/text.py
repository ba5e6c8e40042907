"""Word-level text helpers shared by the perturbation rules (no Beam, no I/O)."""
from __future__ import annotations

import re
from typing import NamedTuple

# A word keeps inner hyphens/apostrophes ("half-full", "man's"); any other symbol is a token of its own.
TOKEN = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")


class Token(NamedTuple):
    text: str
    start: int
    end: int

    @property
    def norm(self) -> str:
        return self.text.casefold()


def tokenize(text: str) -> list[Token]:
    return [Token(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def words(text: str) -> list[str]:
    """Casefolded word tokens: the unit of the multiset and token checks (tokenize()'s tokens, without
    building their offsets: this runs for every candidate negative)."""
    return [w.casefold() for w in TOKEN.findall(text)]


def match_case(template: str, replacement: str) -> str:
    """Give `replacement` the casing pattern of `template` ("IN" -> "WITHIN", "Holding" -> "Grasping")."""
    letters = [c for c in template if c.isalpha()]
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return replacement.upper()
    if letters and letters[0].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


# Vowel letters that sound like consonants, and silent h: enough for caption vocabulary.
_CONSONANT_SOUND = re.compile(r"^(one\b|once|uni(?!n)|use|usu|ura|ure|euro|ewe|u[bcfgklmprstvz][aeiou])", re.I)
_VOWEL_SOUND = re.compile(r"^(hour|honest|honou?r|heir)", re.I)


def indefinite_article(word: str) -> str:
    """'a' or 'an' for the word that follows the article."""
    if _VOWEL_SOUND.match(word):
        return "an"
    if _CONSONANT_SOUND.match(word):
        return "a"
    return "an" if word[:1].lower() in "aeiou" else "a"


def lower_case(text: str) -> str:
    """Lower case, character for character, so that offsets into the text stay valid (a character whose lower
    case is longer, like "İ", is kept as it is)."""
    return "".join(c if len(low := c.lower()) != 1 else low for c in text)


def single_spaced(text: str) -> str:
    """Words separated by one space, none at either end (any run of Unicode whitespace counts as one)."""
    return " ".join(text.split())


def has_surrogates(text: str) -> bool:
    """True where undecodable bytes were kept as lone surrogates (surrogateescape) or escaped into JSON."""
    return any("\ud800" <= c <= "\udfff" for c in text)


def printable(text: str) -> str:
    """A string safe to write as UTF-8 (lone surrogates shown as \\udcXX)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
