"""rule_converse hard positives: a relation between two things said the other way round, which keeps the scene and
changes the structure:
- a relation without an order, its two things exchanged, each with its own words: "A cat next to a dog" -> "A dog
  next to a cat", "A red car near a white truck." -> "A white truck near a red car." ("A black car parked near a red
  truck" is left alone: the participle is the car's);
- a relation with an order turned into its converse: "A car behind a bus" -> "A bus in front of a car", "A clock
  above a door" -> "A door below a clock";
- the relation said from its second thing: "A cat on a couch" <-> "A couch with a cat on it", "A man standing next
  to a bus" <-> "A bus with a man standing next to it", "A kitchen with a stove" <-> "A stove in a kitchen".

The relations and what may stand on either side are data (data/structure.json). Only where the other order says the
same of any photo and reads as a caption: the first thing begins the caption ("A cat ...", "There is a cat ...", "A
photo of a cat ..."), the relation is said of it (a participle of position or motion may stand between: "sitting",
"parked", "walking"; "a man sitting next to a woman" is not "a woman sitting next to a man": she may be standing),
both things are noun phrases that read whole wherever they stand (no pronoun, no "another"), things of kinds that
read naturally on either side of an order-free relation ("a building next to a man" reads the wrong way round), and
nothing after the second thing but its own words, a place or a time.
"""
from __future__ import annotations

from pipeline.perturb.candidates import Candidate, make_candidate
from pipeline.perturb.phrases import NOUN_TAGS, determined, first_piece_cased, gerund, \
    misparsed, owner, phrase_text, plain_phrase, tail_text
from pipeline.perturb.pos_clause import _number, _one_clause
from pipeline.perturb.pos_voice import living, trailing_ok
from pipeline.perturb.rule_data import positive_swaps, structure_rules, swap_rules
from pipeline.perturb.substitution import stem, words

RULE_CONVERSE = "rule_converse"
# Words a caption may start with before its first thing, kept in place: "There is", "A photo of".
OPENING_BE = frozenset({"is", "are"})
# Relations with an order: a phrase of the first thing that holds one leaves unknown which of the three is where.
ROOM = "room.n.01"
# Heads of a count of things ("a group of people"), more than one of them.
COUNTED_BY = frozenset("group couple bunch herd flock crowd pair pile stack row line set collection team".split())
# WordNet files of a thing data/swaps.json has no class for that may still hold something on or in it.
UNCLASSED_HOLDERS = frozenset({"noun.artifact", "noun.food", "noun.location", "noun.object"})
# Words of a participle that say how it stands, kept with it: "laying down on", "sitting alone on".
STILL = frozenset({"down", "alone", "together", "quietly", "peacefully"})
ORDERED = frozenset({"behind", "front", "above", "below", "under", "beneath", "underneath"})


def converse_positives(doc, lexicon, inflector) -> list[Candidate]:
    """"A cat next to a dog" -> "A dog next to a cat"; "A car behind a bus" -> "A bus in front of a car"; "A cat on a
    couch" <-> "A couch with a cat on it"."""
    if _refused(doc):
        return []
    rules = structure_rules()
    found = []
    lowers = [t.lower_ for t in doc]  # read once: the relations are looked up by their words, dozens per caption
    for relation in rules.symmetric:
        for start in _occurrences(lowers, relation):
            pair = related(doc, start, start + len(relation), lexicon)
            if pair is not None and comparable(pair[0][0], pair[1][0], lexicon):
                found.append(_rewrite(doc, RULE_CONVERSE, pair, start, start + len(relation),
                                      phrase_text(doc, start, start + len(relation))))
    for relation, converse in rules.converse.items():
        for start in _occurrences(lowers, relation):
            pair = related(doc, start, start + len(relation), lexicon)
            if pair is not None:
                found.append(_rewrite(doc, RULE_CONVERSE, pair, start, start + len(relation), " ".join(converse)))
    for relations, holding in ((rules.holder_prepositions, True), (rules.ground_prepositions, False)):
        for relation in relations:
            for start in _occurrences(lowers, relation):
                found.append(_ground_first(doc, start, start + len(relation), holding, lexicon, inflector))
    found.append(_ground_last(doc, lexicon))
    return [c for c in found if c is not None]


def _refused(doc) -> bool:
    """A caption whose order the rules cannot trust: a negation, a modal, a pronoun that points elsewhere once
    moved ("a cat next to its owner"), "each other"."""
    return misparsed(doc) or any(t.dep_ == "neg" or t.tag_ in ("MD", "PRP$") or
               (t.tag_ == "PRP" and t.lower_ not in ("it", "them", "him", "her")) or t.lower_ == "other" for t in doc)


def _occurrences(lowers: list[str], words: tuple[str, ...]) -> list[int]:
    """Where the words stand in the caption's lowered tokens, never first nor ending it."""
    n = len(words)
    return [i for i in range(1, len(lowers) - n)
            if (not n or lowers[i] == words[0]) and tuple(lowers[i:i + n]) == words]


def _head_noun(doc, first: int, end: int):
    """The noun the relation [first, end) is said of: the head its first word hangs from, where that is a noun
    (or "is"/"are" with a noun subject: "A cat is next to a dog"); and the relation's object noun."""
    relation = doc[first:end]
    ids = {t.i for t in relation}
    outside = [t for t in relation if t.head.i not in ids]
    objects = [t for t in doc[end:] if t.dep_ == "pobj" and t.head.i in ids]
    if len({t.head.i for t in outside}) != 1 or len(objects) != 1:
        return None
    head = owner(outside[0].head)
    if head.tag_ in ("VBZ", "VBP") and head.lower_ in OPENING_BE and head.i == first - 1:
        subjects = [c for c in head.children if c.dep_ == "nsubj"]
        if len(subjects) != 1 or not _one_clause(doc, head):
            return None
        return subjects[0], objects[0], head
    if head.tag_ not in NOUN_TAGS or any(t.tag_.startswith("VB") and t.dep_ not in ("amod", "compound")
                                         for t in doc):
        return None
    return head, objects[0], None


def _opening(doc, start: int, lexicon) -> bool:
    """What stands before the first thing may stay there: nothing, "There is/are", or a room's "with" ("A kitchen
    with a stove next to a refrigerator"). Not a photo frame's "of": the frame is of its first thing, and the
    rewrite would frame another (two readers: "a close up of a pizza on a table" is not "a close up of a table with
    a pizza on it")."""
    if start == 0:
        return True
    before = [t.lower_ for t in doc[:start]]
    if before[0] == "there" and len(before) == 2 and before[1] in OPENING_BE:
        return True
    with_ = doc[start - 1]
    scene = with_.head
    return with_.lower_ == "with" and scene.dep_ == "ROOT" and scene.tag_ in NOUN_TAGS and \
        scene.left_edge.i == 0 and scene.i == start - 2 and plain_phrase(doc, 0, start - 1) and \
        _class(scene, lexicon) == "building"  # a room: "a vase with flowers near a window" is the vase's place


def related(doc, first: int, end: int, lexicon):
    """((thing, [start, end)), (other, [start, end)), be) of "thing RELATION other" where both may change places;
    None otherwise."""
    found = _head_noun(doc, first, end)
    if found is None:
        return None
    thing, other, be = found
    a_start = thing.left_edge.i
    a_end = be.i if be is not None else first
    b_start, b_end = end, other.right_edge.i + 1
    if b_start != other.left_edge.i or not _opening(doc, a_start, lexicon) or _placed(doc, b_start, b_end) or \
            not all(t.i == thing.i or thing in t.ancestors for t in doc[a_start:a_end]):
        return None
    if (be is not None and be.i != a_end) or doc[a_end - 1].tag_.startswith("RB"):
        return None  # "A white bench just in front of": "just" is the relation's
    if not all(_phrase_ok(doc, noun, s, e, lexicon) for noun, s, e in ((thing, a_start, a_end),
                                                                      (other, b_start, b_end))):
        return None
    if any((t.dep_ == "prep" and (t.lower_ in ORDERED or t.lower_ == "with")) or t.dep_ == "conj"
           for t in doc[a_start:a_end]):
        return None  # "a person behind a table in front of many dishes", "a restaurant with red stools next to a
        # bar", "a refrigerator and a dish washer next to an oven": which the relation is said of is not known
    if not _tail_ok(doc, b_end):
        return None
    return (thing, (a_start, a_end)), (other, (b_start, b_end)), be


def _phrase_ok(doc, noun, start: int, end: int, lexicon, dressed: bool = False) -> bool:
    """A noun phrase that reads whole wherever it stands: determined, plain (phrases.plain_phrase), no verb (nor one
    the parser read as a noun: "a dog pose in front of"; with `dressed`, what a person wears may be said: "a man
    wearing a hat"), and no bare singular inside ("gifts on table")."""
    tokens = doc[start:end]
    if dressed:
        tokens = [t for t in tokens if not _wearing(t, noun)]
    if any(t.tag_ == "NN" and any(c.dep_ == "compound" and living(c, lexicon) for c in t.lefts) and
           lexicon.lemma(t.lower_, "v") == t.lower_ and t.i + 1 < len(doc) and doc[t.i + 1].tag_ in ("IN", "RP")
           for t in tokens):
        return False  # "a dog pose in front of": a person or an animal does what the word says
    if any(t.tag_ in NOUN_TAGS and gerund(t, lexicon) for t in tokens):
        return False  # "a refrigerator standing in front of": the participle read as a noun
    return noun.tag_ in NOUN_TAGS and determined(doc, noun, start) and plain_phrase(doc, start, end) and \
        not any(t.tag_.startswith("VB") and t.dep_ not in ("amod", "compound") for t in tokens) and \
        not any(t.dep_ == "pobj" and t.tag_ == "NN" and t.head.lower_ != "of" and
                not any(c.dep_ in ("det", "poss", "nummod") for c in t.children) for t in tokens)


def _wearing(token, person) -> bool:
    """The token is in the person's "wearing ..." clause ("a man wearing a red hat")."""
    return any(a.dep_ == "acl" and a.head.i == person.i and a.lower_ in ("wearing", "dressed")
               for a in [token, *token.ancestors])


def _placed(doc, start: int, end: int, lexicon=None) -> bool:
    """The phrase has a place of its own ("a fence by a body of water"): moved before a relation, the place reads as
    said of what follows it. Given the lexicon, what a person is in ("a man in a red shirt") is no place."""
    worn = [t for t in doc[start:end] if lexicon is not None and _worn_by(t, lexicon, end)]
    return any(t.dep_ == "prep" and t.lower_ != "of" and t not in worn for t in doc[start:end])


def _worn_by(prep, lexicon, end: int | None = None) -> bool:
    """"in a red shirt", "in uniform": the clothes of the person the phrase is of (up to token `end`)."""
    objects = [c for c in prep.children if c.dep_ == "pobj"]
    return prep.lower_ == "in" and len(objects) == 1 and _class(prep.head, lexicon) == "person" and \
        bool(lexicon.hypernym_names(objects[0].lower_) & positive_swaps().worn) and \
        not any(t.dep_ == "prep" and t.i != prep.i and (end is None or t.i < end) for t in prep.subtree)


def _tail_ok(doc, end: int) -> bool:
    """Nothing after the second thing but punctuation: a phrase there may be said of it alone, and moved away
    from it, said of the other."""
    return all(t.is_punct for t in doc[end:])


def _class(noun, lexicon) -> str | None:
    word = lexicon.noun_lemma(noun.lower_, noun.tag_ == "NNS") or noun.lower_
    return swap_rules().object_class(word, lexicon.noun_class(word), lexicon.hypernym_names(word))


def comparable(a, b, lexicon) -> bool:
    """Things that read naturally on either side of an order-free relation: two people or animals, two movable
    things, two buildings ("a building next to a man" reads the wrong way round)."""
    groups = structure_rules().comparable
    ga, gb = groups.get(_class(a, lexicon)), groups.get(_class(b, lexicon))
    return ga is not None and ga == gb


def _rewrite(doc, rule: str, pair, first: int, end: int, relation: str) -> Candidate | None:
    """The two things exchanged around `relation` (the caption's own, or its converse); "is"/"are" agrees with the
    new first thing."""
    (thing, (a_start, a_end)), (other, (b_start, b_end)), be = pair
    pieces = [(phrase_text(doc, b_start, b_end), b_start)]
    if be is not None:
        number = _number(other, len(doc))
        if number is None:
            return None
        pieces.append((number, None))
    pieces += [(relation, None), (phrase_text(doc, a_start, a_end), a_start)]
    texts = first_piece_cased(doc, pieces) if a_start == 0 else [t for t, _ in pieces]
    before = doc.text[:doc[a_start].idx] if a_start else ""
    if be is not None and a_start:
        return None  # "There is a cat is next to ..." does not occur; keep the rule to what it was read on
    if before and _there(doc, a_start):
        number = _number(other, len(doc))
        if number is None or number != _number(thing, len(doc)):
            return None  # "There is a cat next to two dogs" -> "There is two dogs ..."
    text = before + " ".join(texts) + tail_text(doc, b_end)
    return make_candidate(rule, doc.text, text)


def _there(doc, start: int) -> bool:
    return doc[0].lower_ == "there"


def _pronoun(noun, relation: tuple[str, ...], holding: bool, lexicon) -> str | None:
    """How the ground is said again after the relation: "it", "them", "him" or "her"; None where it cannot be a
    ground of the relation (a substance, a person whose pronoun is not known, a person that holds)."""
    rules = structure_rules()
    kind = _class(noun, lexicon)
    holder = kind in rules.holder_classes or (kind is None and lexicon.noun_class_of(
        noun.lower_, noun.tag_ == "NNS") in UNCLASSED_HOLDERS)  # "a pizza crust", "a white surface"
    words = {noun.lower_, lexicon.noun_lemma(noun.lower_, noun.tag_ == "NNS") or noun.lower_}  # "skies" is "sky"
    if words & rules.not_grounds or (holding and (not holder or words & rules.not_holders)):
        return None
    if holding and relation != ("in",) and ROOM in lexicon.hypernym_names(noun.lower_):
        return None  # "a bathroom with orange walls on it": a room holds things in it, not on it
    if noun.tag_ == "NNS":
        return "them"
    if kind == "person":
        return None if holding else rules.person_pronouns.get(noun.lower_)
    return "it"


def _opens_caption(doc, noun, start: int) -> bool:
    """"a couch", "the table", "two plates", "plates": a phrase a caption can begin with ("this couch", "his bed"
    point to something said before)."""
    first = doc[start]
    return first.lower_ in ("a", "an", "the", "some", "two", "three", "four", "five", "several", "many") or \
        (noun.tag_ == "NNS" and first.tag_ not in ("DT", "PRP$"))


def _plain_ground(doc, ground, start: int, end: int) -> bool:
    """The ground's phrase is a noun with its modifiers and at most one place of its own ("a couch in a living
    room"): "with a cat on it" then follows the place and still reads as said of the couch. No list, no clause."""
    if any(t.dep_ in ("acl", "relcl", "cc", "conj") or (t.tag_.startswith("VB") and t.dep_ != "amod")
           for t in doc[start:end]):
        return False  # a participle of the ground's may describe it ("a grass covered field")
    places = [c for c in ground.rights if c.dep_ == "prep" and c.lower_ != "of"]
    if not places:
        return not any(t.dep_ == "prep" and t.lower_ != "of" for t in doc[start:end])
    place = places[0]
    nouns = [c for c in place.children if c.dep_ == "pobj"]
    return len(places) == 1 and place.lower_ in ("in", "on", "at", "inside") and len(nouns) == 1 and \
        nouns[0].lower_ not in structure_rules().not_grounds and \
        any(c.dep_ in ("det", "poss", "nummod") for c in nouns[0].children) and \
        not any(t.dep_ == "prep" and t.i != place.i and t.lower_ != "of" for t in doc[start:end])


def _plural(noun) -> bool:
    """More than one thing: a plural, a count of things, or a list."""
    return noun.tag_ == "NNS" or any(c.dep_ == "conj" for c in noun.children) or \
        (noun.lower_ in COUNTED_BY and any(c.lower_ == "of" for c in noun.children))


def _be_before(participle):
    """The "is"/"are" right before a participle whose own it is ("A cat is sitting"), or None."""
    auxes = [c for c in participle.children if c.dep_ in ("aux", "auxpass")]
    if len(auxes) == 1 and auxes[0].lower_ in OPENING_BE and auxes[0].i == participle.i - 1:
        return auxes[0]
    return None


def _participle_ok(participle, lexicon) -> bool:
    """A participle of position or motion that says where the thing is ("sitting", "parked", "walking"), not one
    whose preposition is part of its sense ("talking on a phone", "playing with")."""
    return bool(set(lexicon.wn._morphy(participle.lower_, "v")) & structure_rules().on_participles)


def _ground_first(doc, first: int, end: int, holding: bool, lexicon, inflector) -> Candidate | None:
    """"A cat on a couch" -> "A couch with a cat on it"; "A man standing next to a bus" -> "A bus with a man standing
    next to it"; "A cat sits on a couch" -> "A couch with a cat sitting on it"."""
    relation = doc[first:end]
    ids = {t.i for t in relation}
    outside = [t for t in relation if t.head.i not in ids]
    objects = [t for t in doc[end:] if t.dep_ == "pobj" and t.head.i in ids]
    if len({t.head.i for t in outside}) != 1 or len(objects) != 1:
        return None  # one head: "next" and "to" may both hang from "sitting"
    ground, head = objects[0], outside[0].head
    participle, be, form = None, None, None
    if head.tag_ == "VBD" and head.dep_ == "ROOT" and not any(c.dep_ in ("aux", "auxpass") for c in head.children):
        lemmas = [f for f in lexicon.wn._morphy(head.lower_, "v") if f in structure_rules().on_participles]
        if not lemmas or inflector.verb(lemmas[0], "VBN") != head.lower_:
            return None
        # "Four computers arranged on a desk": the participle read as a past tense, its noun as the subject
        participle, head = head, next((c for c in head.children if c.dep_ == "nsubj"), None)
    elif head.tag_ in ("VBZ", "VBP") and head.dep_ == "ROOT" and head.lower_ not in OPENING_BE:
        lemmas = [f for f in lexicon.wn._morphy(head.lower_, "v") if f in structure_rules().on_participles]
        if not lemmas:
            return None
        form = inflector.verb(lemmas[0], "VBG")  # "sits" -> "sitting": said of the thing in the ground's phrase
        participle, head = head, next((c for c in head.children if c.dep_ == "nsubj"), None)
    elif head.tag_ == "VBG" or (head.tag_ == "VBN" and head.dep_ in ("acl", "ROOT")):
        participle, head = head, head.head
        be = _be_before(participle)
        if be is not None or participle.dep_ == "ROOT":  # "A cat is sitting on a couch": the subject, "is" left out
            head = next((c for c in participle.children if c.dep_ in ("nsubj", "nsubjpass")), None)
        elif participle.dep_ not in ("acl", "xcomp", "advcl") or head.tag_ not in NOUN_TAGS:
            return None
    elif head.lower_ in OPENING_BE and head.dep_ == "ROOT" and head.i == first - 1:
        be, head = head, next((c for c in head.children if c.dep_ == "nsubj"), None)  # "A cat is on a couch"
    if head is None:
        return None
    if head.dep_ == "pobj" and _worn_by(head.head, lexicon, first):
        head = head.head.head  # "a man in a white suit standing ...": the parse hangs it from the suit
    head = owner(head)
    start, keep = head.left_edge.i, ""
    there = start == 2 and doc[0].lower_ == "there" and doc[1].lower_ in OPENING_BE and head.head.i == 1 and \
        head.dep_ == "attr" and be is None
    if there:  # "There is a cat sitting on a couch" -> "A couch with a cat sitting on it"
        be = doc[1]
    elif start:  # not after a photo frame: "a close up of a pizza on a table" frames the pizza, not the table
        return None
    if participle is not None and (not _participle_ok(participle, lexicon) or
                                   any(c.i not in ({t.i for t in outside} | {getattr(be, "i", -1)}) and c.dep_ not in
                                       ("nsubj", "nsubjpass", "punct") and not (c.dep_ == "prep" and c.i > end) and
                                       not (c.lower_ in STILL and c.i == first - 1) for c in participle.children) or
                                   participle.i not in (first - 1, first - 2) or
                                   (participle.i == first - 2 and doc[first - 1].lower_ not in STILL)):
        return None  # "A dog laying down on a carpet": "down" stays with "laying"
    subject_of_participle = participle is not None and participle.dep_ == "ROOT" and head.dep_ == "nsubj"  # or a verb
    if head.tag_ not in NOUN_TAGS or (be is None and not keep and head.dep_ != "ROOT" and
                                      not subject_of_participle) or \
            any(t.tag_ in ("VBZ", "VBP", "VBD", "MD") and
                t.i not in (getattr(be, "i", -1), getattr(participle, "i", -1)) for t in doc):
        return None
    thing_end = be.i if be is not None and not there else participle.i if participle is not None else first
    if not all(t.i == head.i or head in t.ancestors for t in doc[start:thing_end]) or \
            not _phrase_ok(doc, head, start, thing_end, lexicon, dressed=True) or \
            _placed(doc, start, thing_end, lexicon) or \
            any(t.lower_ == "with" for t in doc[start:thing_end]):
        return None  # "a guy with a guitar on a bed" -> "a bed with a guy with a guitar on it"
    g_start, g_end = end, ground.right_edge.i + 1
    pronoun = _pronoun(ground, tuple(t.lower_ for t in relation), holding, lexicon)
    if _class(head, lexicon) == "building" and _class(ground, lexicon) not in ("building", "terrain"):
        return None  # "a glass building next to a street light" -> "a street light with a building next to it"
    if holding and _class(ground, lexicon) == "electronics" and living(head, lexicon) and \
            _class(head, lexicon) == "person":
        return None  # "a man on a laptop" is using it
    if _plural(head) and (_plural(ground) or _class(ground, lexicon) == "sports"):
        return None  # "two sandwiches on two plates" -> "two plates with two sandwiches on them" (two on each?);
        # "four persons skating on the skate board" each on one
    if pronoun is None or ground.left_edge.i != g_start or not _phrase_ok(doc, ground, g_start, g_end, lexicon) or \
            not _opens_caption(doc, ground, g_start) or \
            not (_tail_ok(doc, g_end) or trailing_ok(doc, g_end, [participle or head], lexicon)) or \
            any(t.lower_ in ORDERED for t in doc[g_end:]):
        return None  # "a person behind a table in front of many dishes": which is in front is not known
    if not _plain_ground(doc, ground, g_start, g_end):
        return None
    said = [(phrase_text(doc, start, thing_end), start)] + \
        ([(" ".join([form or participle.text] + [t.text for t in doc[participle.i + 1:first]]), None)]
         if participle is not None else [])
    pieces = [(phrase_text(doc, g_start, g_end), g_start), ("with", None), *said,
              (phrase_text(doc, first, end) + " " + pronoun, None)]
    texts = [t for t, _ in pieces] if keep else first_piece_cased(doc, pieces)
    return make_candidate(RULE_CONVERSE, doc.text, keep + " ".join(texts) + tail_text(doc, g_end))


def _ground_last(doc, lexicon) -> Candidate | None:
    """"A couch with a cat on it" -> "A cat on a couch"; "A bus with a man standing next to it" -> "A man standing
    next to a bus"; "A cake with a candle on top" -> "A candle on top of a cake"."""
    roots = [t for t in doc if t.dep_ == "ROOT"]
    if len(roots) != 1 or roots[0].tag_ not in NOUN_TAGS:
        return None
    ground = roots[0]
    withs = [c for c in ground.rights if c.lower_ == "with" and c.dep_ == "prep"]
    if len(withs) != 1 or ground.left_edge.i != 0:
        return None
    with_ = withs[0]
    if not all(t.i == ground.i or ground in t.ancestors for t in doc[:with_.i]) or \
            not _phrase_ok(doc, ground, 0, with_.i, lexicon):
        return None
    things = [c for c in with_.children if c.dep_ == "pobj"]
    if len(things) != 1:
        return None
    thing = things[0]
    t_start = with_.i + 1
    rest = [t for t in doc[t_start:] if not t.is_punct]
    words = [t.lower_ for t in rest]
    rules = structure_rules()
    for relation, holding in [(r, True) for r in rules.holder_prepositions + (("on", "top"),)] + \
            [(r, False) for r in rules.ground_prepositions]:
        pronoun = _pronoun(ground, relation, holding, lexicon)
        if pronoun is None:
            continue
        full = relation + ((pronoun,) if relation != ("on", "top") else ())
        n = len(full)
        if len(words) <= n or tuple(words[-n:]) != full:
            continue
        t_end = rest[-n].i
        participle = None
        if doc[t_end - 1].tag_ in ("VBG", "VBN") and owner(doc[t_end - 1].head).i == thing.i:
            participle = doc[t_end - 1]
            if not _participle_ok(participle, lexicon):
                return None
            t_end -= 1
        if not all(t.i == thing.i or thing in t.ancestors for t in doc[t_start:t_end]) or \
                not _phrase_ok(doc, thing, t_start, t_end, lexicon) and not _bare_stuff(doc, thing, t_start, t_end):
            return None
        relation_text = " ".join(relation) + (" of" if relation == ("on", "top") else "")
        said = phrase_text(doc, t_start, t_end) + (" " + participle.text if participle else "")
        pieces = [(said, t_start), (relation_text, None), (phrase_text(doc, 0, with_.i), 0)]
        text = " ".join(first_piece_cased(doc, pieces)) + tail_text(doc, rest[-1].i + 1)
        return make_candidate(RULE_CONVERSE, doc.text, text)
    return _place_of_with(doc, ground, with_, thing, lexicon)


# What a thing named after "with" may be to be said in or on its holder: a thing, a food, a plant, people, animals
# ("A kitchen with a lot of space", "a cake with a message" keep their "with").
CONCRETE = frozenset({"noun.artifact", "noun.food", "noun.plant", "noun.animal", "noun.person", "noun.object",
                      "noun.substance"})


def _place_of_with(doc, ground, with_, thing, lexicon) -> Candidate | None:
    """"A kitchen with a stove and a refrigerator" -> "A stove and a refrigerator in a kitchen"; "A plate with a
    sandwich" -> "A sandwich on a plate": the thing said where its holder is, nothing after it."""
    preposition = structure_rules().with_places.get(ground.lower_)
    t_start, t_end = with_.i + 1, thing.right_edge.i + 1
    if any(t.dep_ in ("cc", "conj") for t in doc[:with_.i]):
        return None  # "A kitchen counter and cabinetry with a large window": which one has it is not known
    if preposition is None or thing.left_edge.i != t_start or not _tail_ok(doc, t_end) or \
            not all(t.tag_ in NOUN_TAGS or t.tag_ in ("DT", "CD", "JJ", "CC", "PDT", ",") or t.dep_ in (
                "amod", "compound", "nummod", "det", "cc", "conj", "punct") for t in doc[t_start:t_end]):
        return None  # a phrase or a clause of its own: "with a cat sleeping on it" is _ground_last's
    nouns = [t for t in doc[t_start:t_end] if t.tag_ in NOUN_TAGS and t.dep_ in ("pobj", "conj")]
    if not nouns or any(lexicon.noun_class_of(n.lower_, n.tag_ == "NNS") not in CONCRETE for n in nouns) or \
            not (_phrase_ok(doc, thing, t_start, t_end, lexicon) or _bare_stuff(doc, thing, t_start, t_end)) or \
            any(t.is_punct and t.text != "," for t in doc[t_start:t_end]):
        return None
    pieces = [(phrase_text(doc, t_start, t_end), t_start), (preposition, None), (phrase_text(doc, 0, with_.i), 0)]
    text = " ".join(first_piece_cased(doc, pieces)) + tail_text(doc, t_end)
    return make_candidate(RULE_CONVERSE, doc.text, text)


def _bare_stuff(doc, noun, start: int, end: int) -> bool:
    """"food", "fresh fruit": a bare mass noun reads whole at a caption's start ("Food on a table")."""
    return noun.tag_ == "NN" and plain_phrase(doc, start, end) and all(t.dep_ in ("amod", "compound")
                                                                       for t in doc[start:noun.i])


# Words the other way round may add or drop: the relations, "with", "it"/"them", and "be".
RELATION_WORDS = frozenset("""next to beside near alongside close adjacent across from behind in front of above below
under underneath beneath on top inside atop over along down through around against at by into out toward towards past
up with it them him her is are there""".split())


def same_things(caption: str, text: str) -> bool:
    """The rewrite keeps the caption's words, each in some form, adding or dropping only relation words, "with",
    "it" and "them"."""
    def content(t: str) -> list[str]:
        return sorted(stem(w) for w in words(t) if w not in RELATION_WORDS and w not in ("a", "an"))
    return content(caption) == content(text)
