"""rule_replace hard positives: one word or phrase of a caption replaced by a true synonym from the versioned table
data/positive_synonyms.json (the paper's REPLACE positives, "next to" -> "beside", applied to any caption):
"a cat sitting on a couch" -> "a cat sitting on a sofa", "a man playing tennis" -> "a guy playing tennis".

A table word is replaced only in the sense the table means: its part of speech and dependency role are checked
against the entry (a verb's subject and object, the noun an adjective describes, the dependents a preposition
needs), never inside a name or a compound the change would break ("Big Ben", "hot dog"), and the new word is
inflected like the old one (plural, verb form), with the a/an before it and the caption's capitals put right.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.perturb.candidates import Candidate, make_candidate
from pipeline.perturb.lexicon import kind_of
from pipeline.perturb.rule_data import positive_swaps, positive_synonyms, swap_rules
from pipeline.perturb.text import indefinite_article, match_case

RULE_REPLACE = "rule_replace"
NAME_TAGS = frozenset({"NNP", "NNPS"})
DEFAULT_TAGS = {"adj": frozenset({"JJ"}), "adv": frozenset({"RB"})}
VERB_TAGS = ("VB", "VBP", "VBZ", "VBG", "VBD", "VBN")
ANIMATE = frozenset({"noun.person", "noun.animal"})
PERSONAL_PRONOUNS = frozenset("i you he she we they someone somebody everyone".split())
TAKE = frozenset({"take", "takes", "taking", "took", "taken"})
PHYSICAL = frozenset(f"noun.{n}" for n in "artifact animal person food plant object body substance location".split())
# What one is under only in a fixed phrase ("under the sun", "under the stars": not "underneath the sun").
SKY = frozenset({"sun", "sky", "skies", "moon", "stars", "sunshine", "moonlight"})


@dataclass(frozen=True)
class Form:
    """One way a table entry appears in a caption: its words, the tags its first word may have, and what
    replaces it in that form."""

    words: tuple[str, ...]
    tags: frozenset[str] | None
    to: str
    entry: dict


class SynonymTable:
    """data/positive_synonyms.json expanded into the surface forms it matches, keyed by their first word."""

    def __init__(self, entries: list[dict], inflector):
        self.forms: dict[str, list[Form]] = {}
        for entry in entries:
            for form in _forms(entry, inflector):
                self.forms.setdefault(form.words[0], []).append(form)

    @classmethod
    def load(cls, inflector) -> SynonymTable:
        return cls(positive_synonyms().entries, inflector)


def _forms(entry: dict, inflector) -> list[Form]:
    words, to, pos = tuple(entry["from"].lower().split()), entry["to"], entry["pos"]
    tags = frozenset(entry["tags"]) if "tags" in entry else None
    if entry.get("surface") or pos not in ("noun", "verb"):
        return [Form(words, tags or DEFAULT_TAGS.get(pos), to, entry)]
    if pos == "noun":
        forms = [("NN", words, to), ("NNS", (*words[:-1], inflector.plural(words[-1])), _plural(inflector, to))]
        return [Form(w, frozenset({tag}), new, entry) for tag, w, new in forms if tags is None or tag in tags]
    found = []
    for tag in VERB_TAGS:
        if tags is not None and tag not in tags:
            continue
        new = to if entry.get("fixed") else inflector.verb(to, tag)
        found.append(Form((*words[:-1], inflector.verb(words[-1], tag)), frozenset({tag}), new, entry))
    return found


def _plural(inflector, phrase: str) -> str:
    *rest, last = phrase.split()
    return " ".join([*rest, inflector.plural(last) if not last.isupper() else last + "s"])


def replace_positives(doc, table: SynonymTable, lexicon) -> list[Candidate]:
    """Every valid replacement by a table synonym in the caption, in caption order."""
    caption = doc.text
    found, texts = [], set()
    lowers = [t.lower_ for t in doc]
    words_of_caption = frozenset(lowers)
    for i, token in enumerate(doc):
        for form in table.forms.get(token.lower_, ()):
            end = i + len(form.words)
            if tuple(lowers[i:end]) != form.words or not _fits(doc, i, end, form, lexicon, words_of_caption):
                continue
            candidate = make_candidate(RULE_REPLACE, caption, _replaced(doc, i, end, form))
            if candidate is not None and candidate.text not in texts:  # every synonym that fits: the stage
                texts.add(candidate.text)                                # prefers the rarer substitution
                found.append(candidate)
    return found


def _replaced(doc, start: int, end: int, form: Form) -> str:
    """The caption with tokens [start, end) replaced, cased like them, the a/an before put right."""
    text = doc.text
    first = doc[start]
    template = first.text
    if form.entry.get("acronym"):  # "TV" is capitals by convention, not emphasis
        template = template.capitalize() if start == 0 else template.lower()
    new = match_case(template, form.to) if not form.to.isupper() else form.to
    if text.isupper():
        new = new.upper()  # "A PERSON ... WATCHING TV": a shouted caption stays shouted
    begin, stop = first.idx, doc[end - 1].idx + len(doc[end - 1])
    before = text[:begin]
    if start > 0 and doc[start - 1].lower_ in ("a", "an"):
        article = doc[start - 1]
        before = text[:article.idx] + match_case(article.text, indefinite_article(new)) + \
            text[article.idx + len(article):begin]
    return before + new + text[stop:]


def _fits(doc, start: int, end: int, form: Form, lexicon, caption_words: frozenset[str]) -> bool:
    """Whether the table's sense applies here: every check the entry names, and no name or compound broken."""
    entry = form.entry
    first, last = doc[start], doc[end - 1]
    key = last if entry["pos"] == "prep" else first
    # a noun's number is its head's ("fire hydrants"); a phrase as written is tagged by its first word
    tagged = last if entry["pos"] == "noun" and not entry.get("surface") else first
    if form.tags is not None and tagged.tag_ not in form.tags:
        return False
    if any(doc[k].tag_ in NAME_TAGS for k in range(start, end)) or _inside_word(doc, start, end):
        return False
    after = doc[end] if end < len(doc) else None
    before = doc[start - 1] if start > 0 else None
    nxt = after.lower_ if after is not None else ""
    prev = before.lower_ if before is not None else ""
    if "only_before" in entry and nxt not in entry["only_before"]:
        return False
    if nxt in entry.get("not_before", ()) or prev in entry.get("not_after", ()) or \
            ("only_after" in entry and prev not in entry["only_after"]):
        return False
    if "only_before_tags" in entry and (after is None or after.tag_ not in entry["only_before_tags"]):
        return False
    if caption_words & frozenset(entry.get("not_in_caption", ())):
        return False
    if "deps" in entry and key.dep_ not in entry["deps"]:
        return False
    if "object_of" in entry and not _object_of(first, entry["object_of"]):
        return False
    if entry.get("of_object") == "person" and not any(
            c.lower_ == "of" and any(o.dep_ == "pobj" and kind_of(o, lexicon) == "noun.person"
                                     for o in c.children) for c in first.children):
        return False
    child_deps = {c.dep_ for c in key.children}
    if child_deps & set(entry.get("not_with", ())) or not set(entry.get("needs", ())) <= child_deps:
        return False
    if entry["pos"] == "noun" and not _noun_fits(doc, start, end, entry, lexicon):
        return False
    if first.tag_ == "NNS" and ((after is not None and after.tag_ == "POS") or prev in ("a", "an")):
        return False  # "men's room", "children's toys": often a fixed use; "a women": a typo to leave alone
    if "object_tags" in entry and not any(c.dep_ == "pobj" and c.tag_ in entry["object_tags"] for c in key.children):
        return False
    if entry.get("frame") and not _names_the_photo(first):
        return False
    if entry.get("no_and_after") and any(t.lower_ == "and" and t.i + 1 < len(doc) and doc[t.i + 1].tag_.startswith("VB")
                                         for t in doc[end:]):
        return False
    if "modifies" in entry and not _modifies(first, entry["modifies"], lexicon):
        return False
    if "subject" in entry and not _subject_is(first, entry["subject"], lexicon):
        return False
    return "object" not in entry or _object_fits(key, entry["object"], lexicon)


def _inside_word(doc, start: int, end: int) -> bool:
    """Part of a longer written word ("camera-man", "man-made"): joined to a neighbour without a space."""
    if start > 0 and not doc[start - 1].whitespace_ and (doc[start - 1].is_alpha or doc[start - 1].text == "-"):
        return True
    last = doc[end - 1]
    return end < len(doc) and not last.whitespace_ and (doc[end].is_alpha or doc[end].text == "-")


def _noun_fits(doc, start: int, end: int, entry: dict, lexicon) -> bool:
    """A noun that is not the modifier of another noun (unless the entry is about that: "cell phone") and not
    part of a WordNet multiword entry with a neighbour ("hot dog")."""
    head = doc[end - 1]
    if "deps" not in entry and (head.dep_ in ("compound", "nmod") or
                                (head.dep_ == "amod" and head.head.i > head.i)):
        return False
    if kind_of(head, lexicon) == "noun.person":
        if head.tag_ == "NN" and not any(c.dep_ in ("det", "poss", "nummod") for c in head.children):
            return False  # "Man skiing down a slope" -> "Guy skiing ...": a bare person word reads as a name
        if head.dep_ == "conj" or any(c.dep_ == "conj" for c in head.children):
            return False  # "men and women" -> "men and ladies": one of a pair changes register alone
        if any(c.dep_ == "compound" for c in head.children):
            return False  # "a business man" -> "a business guy": the compound is a fixed word
    if "only_before" in entry or "only_after" in entry:
        return True
    pairs = []
    if start > 0 and doc[start - 1].is_alpha:
        pairs.append((doc[start - 1].lower_, doc[start].lower_))
    if end < len(doc) and doc[end].is_alpha:
        pairs.append((doc[end - 1].lower_, doc[end].lower_))
    return not any(lexicon.is_multiword(p) for p in pairs)


def _names_the_photo(token) -> bool:
    """"A picture of a dog ..." at the start, or what is taken ("taking a picture"): the photo itself."""
    if token.dep_ == "dobj" and token.head.lower_ in TAKE:
        return True
    return token.i <= 2 and all(t.tag_ in ("DT", "JJ") for t in token.doc[:token.i]) and \
        any(c.dep_ == "prep" and c.lower_ == "of" for c in token.children)


def _object_of(token, verbs) -> bool:
    """The noun is the object of one of the verbs, directly ("taking a picture") or through "for" ("posing for a
    picture")."""
    head = token.head
    if token.dep_ == "pobj" and head.lower_ == "for":
        head = head.head
    return token.dep_ in ("dobj", "pobj") and head.lower_ in verbs


def _described_noun(token):
    if token.dep_ == "amod":
        return token.head
    if token.dep_ == "acomp":
        return next((c for c in token.head.children if c.dep_ in ("nsubj", "nsubjpass")), None)
    return None


def _modifies(token, kind: str, lexicon) -> bool:
    """The noun an adjective describes (and the noun right after it, where the parser hung the adjective
    elsewhere: "a little girl laughs") is a person ("person"); is no quantity ("not_quantity": "a large
    number"); or is a thing ("thing": no quantity, person or animal: "a little zebra" is a young one)."""
    nouns = [n for n in (_described_noun(token), _next_noun(token)) if n is not None]
    if not nouns or any(n.tag_ not in ("NN", "NNS") for n in nouns[:1]):
        return False
    classes = {kind_of(n, lexicon) for n in nouns}
    if kind == "person":
        return classes == {"noun.person"}
    quantity = any(n.lower_ in swap_rules().quantity_heads for n in nouns)
    if kind == "not_quantity":
        return not quantity
    return not quantity and not classes & ANIMATE


def _next_noun(token):
    following = token.doc[token.i + 1] if token.i + 1 < len(token.doc) else None
    return following if following is not None and following.tag_ in ("NN", "NNS") else None


def _subject(verb):
    """The noun doing a verb: its subject, or the noun a participle describes ("a cat sitting on ...")."""
    for child in verb.children:
        if child.dep_ in ("nsubj", "nsubjpass"):
            return child
    if verb.dep_ in ("acl", "relcl", "amod"):
        return verb.head
    if verb.dep_ == "conj":
        return _subject(verb.head)
    return None


def _subject_is(verb, kind: str, lexicon) -> bool:
    """The verb's subject is a person or an animal ("animate"), or a person ("person")."""
    subject = _subject(verb)
    if subject is None:
        return False
    if subject.lower_ in PERSONAL_PRONOUNS:
        return True
    return kind_of(subject, lexicon) in (ANIMATE if kind == "animate" else {"noun.person"})


def _object_fits(verb, kind: str, lexicon) -> bool:
    """The verb's object is something worn ("worn") or a made thing ("artifact": "fixing a bike", not "fixing
    dinner"); a preposition's object is a thing or place, not an act or a state ("physical": "under
    construction")."""
    if kind == "physical":
        objects = [c for c in verb.children if c.dep_ == "pobj"]
        return len(objects) == 1 and objects[0].lower_ not in SKY and (objects[0].tag_ == "PRP" or
                                                                       kind_of(objects[0], lexicon) in PHYSICAL)
    objects = [c for c in verb.children if c.dep_ == "dobj"]
    if len(objects) != 1:
        return False
    if kind == "artifact":
        return kind_of(objects[0], lexicon) == "noun.artifact" and not _worn(objects[0], lexicon)
    return _worn(objects[0], lexicon)  # kind == "worn"


def _worn(noun, lexicon) -> bool:
    return bool(lexicon.hypernym_names(noun.lower_) & positive_swaps().worn)
