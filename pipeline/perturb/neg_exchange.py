"""`exchange` hard negatives: the caption's words kept, their roles exchanged, so that the scene changes and only the
structure says how ("A dog chasing a cat" -> "A cat chasing a dog"). What a matched training triple needs: with a
positive that keeps the words, a text-only model has nothing to tell the two apart by (stages/train_set.py).

- roles: the one who acts and the one acted on, both people, both animals or (data/structure.json either_kind: a
  look, a chase) one of each: "A man feeding a giraffe" -> "A giraffe feeding a man", "A dog looking at a man" ->
  "A man looking at a dog". Acts that are mutual ("hugging", "fighting") or that a thing does are never exchanged.
- order: the two things of a relation with an order, of kinds that stand either way ("A car behind a bus" -> "A bus
  behind a car", "A clock above a door" -> "A door above a clock").
- attributes: two adjectives of one class on two different things (swap's attribute exchanges: "a white dog and a
  black cat" -> "a black dog and a white cat"), each suited to its new noun by the input captions' bigrams.
Never a colour moved to a thing with none (it may still be true: "a white cat on a bed" -> "a cat on a white bed"),
never a thing exchanged with a place or a part, never a relation without an order ("next to": the same scene).
"""
from __future__ import annotations

from pipeline.perturb.candidates import Candidate, make_candidate
from pipeline.perturb.neg_swap import _attribute_pairs, _swap_token_units, keeps_words
from pipeline.perturb.phrases import NOUN_TAGS, first_piece_cased, misparsed, phrase_text, tail_text
from pipeline.perturb.pos_clause import _aux_before, _number, _one_clause
from pipeline.perturb.pos_relation import comparable, related
from pipeline.perturb.pos_voice import agent_phrase, counted, living, nsubj, object_range, subject_phrase, \
    thing_phrase, trailing_ok
from pipeline.perturb.rule_data import replacements, structure_rules, swap_rules
from pipeline.perturb.units import units

EXCHANGE = "exchange"
ORDERED = (("behind",), ("in", "front", "of"), ("above",), ("below",))
# Verbs whose object follows "at": "a dog looking at a man", "a dog barking at a cat".
AT_VERBS = frozenset({"look", "stare", "bark", "glance", "gaze"})
MAX_CANDIDATES = 12


def exchange_candidates(doc, lexicon, corpus=None) -> list[Candidate]:
    """Every exchange of the caption (roles, order, attributes), each keeping its words."""
    if misparsed(doc) or any(t.dep_ == "neg" or t.tag_ in ("MD", "PRP", "PRP$") for t in doc):
        return []
    caption = doc.text
    texts = _role_exchanges(doc, lexicon) + _order_exchanges(doc, lexicon) + \
        _attribute_exchanges(doc, lexicon, corpus)
    found, seen = [], set()
    for text in texts:
        if text is None or text in seen or not keeps_words(caption, text):
            continue
        seen.add(text)
        candidate = make_candidate(EXCHANGE, caption, text)
        if candidate is not None:
            found.append(candidate)
        if len(found) == MAX_CANDIDATES:
            break
    return found


def _verb_lemma(verb, lexicon) -> str | None:
    verbs = structure_rules().exchange_verbs
    return next((f for f in lexicon.wn._morphy(verb.lower_, "v") if f in verbs), None)


def _exchanged(doc, a: tuple[int, int], b: tuple[int, int], end: int) -> str:
    """Phrases a (at the caption's start) and b exchanged, what stands between them as written."""
    middle = doc.text[doc[a[1] - 1].idx + len(doc[a[1] - 1]):doc[b[0]].idx]
    first, second = first_piece_cased(doc, [(phrase_text(doc, *b), b[0]), (phrase_text(doc, *a), a[0])])
    return first + middle + second + tail_text(doc, end)


def _role_exchanges(doc, lexicon) -> list[str]:
    """"A dog chasing a cat" -> "A cat chasing a dog"; "A man is feeding a giraffe" -> "A giraffe is feeding a man"."""
    rules = structure_rules()
    texts = []
    for verb in doc:
        lemma = _verb_lemma(verb, lexicon) if verb.tag_ in ("VBG", "VBZ", "VBP") else None
        if lemma is None or not _one_clause(doc, verb):
            continue
        aux = _aux_before(verb) if verb.tag_ == "VBG" else None
        if aux is not None:
            subject, subject_end, sentence = nsubj(verb), aux.i, True
        elif verb.tag_ == "VBG" and not any(c.dep_ in ("aux", "auxpass") for c in verb.children):
            subject_end, sentence = verb.i, False
            subject = nsubj(verb) if verb.dep_ == "ROOT" else agent_phrase(doc, verb, subject_end, lexicon)
        elif verb.dep_ == "ROOT" and not any(c.dep_ in ("aux", "auxpass") for c in verb.children):
            subject, subject_end, sentence = nsubj(verb), verb.i, True
        else:
            continue
        if subject is None or subject.i >= verb.i or not subject_phrase(doc, subject, subject_end) or \
                not thing_phrase(doc, subject, 0, subject_end, lexicon):
            continue
        obj = _object(doc, verb, lemma)
        span = object_range(obj, lexicon) if obj is not None else None
        if span is None or not thing_phrase(doc, obj, *span, lexicon) or \
                not trailing_ok(doc, span[1], (verb, subject, obj), lexicon):
            continue
        if not (living(subject, lexicon) and living(obj, lexicon)) or lexicon.noun_lemma(
                subject.lower_, subject.tag_ == "NNS") == lexicon.noun_lemma(obj.lower_, obj.tag_ == "NNS"):
            continue
        if any(c.dep_ == "prep" and c.lower_ == "of" for c in obj.children) and counted(obj) is obj:
            continue  # "an older model of a smart phone": a thing's "of" phrase, not a person
        kinds = {_kind(subject, lexicon), _kind(obj, lexicon)}
        if len(kinds) != 1 and lemma not in rules.either_kind:
            continue  # "a man riding a horse" -> "a horse riding a man": not a scene a photo could show
        if kinds == {"person"} and len({_age(subject), _age(obj)} - {None}) > 1:
            continue  # "a man lifting a child" -> "a child lifting a man"
        if sentence and _number(subject, len(doc)) != _number(obj, len(doc)):
            continue  # "two dogs are chasing a cat" -> "a cat are chasing two dogs"
        texts.append(_exchanged(doc, (0, subject_end), span, span[1]))
    return texts


def _object(doc, verb, lemma):
    """The verb's object: its direct object right after it, or, for a look, the object of "at"."""
    objects = [c for c in verb.children if c.dep_ == "dobj"]
    if lemma in AT_VERBS:
        objects = [o for p in verb.children if p.dep_ == "prep" and p.lower_ == "at" and p.i == verb.i + 1
                   for o in p.children if o.dep_ == "pobj"]
    if len(objects) != 1 or objects[0].left_edge.i not in (verb.i + 1, verb.i + 2):
        return None
    return objects[0]


def _age(noun) -> str | None:
    """"adult" or "child" for a person word or its age modifier ("a young boy"), None when not said."""
    noun = counted(noun)
    ages = replacements().age_class
    if any(c.lower_ in ("young", "little", "baby", "teenage", "teen") for c in noun.lefts):
        return "child"
    return ages.get(noun.lower_) or ages.get(noun.lower_.rstrip("s"))


def _kind(noun, lexicon) -> str:
    """"person" or "animal": by the noun's class, or by a compound before it that names an animal ("a bear cub")."""
    noun = counted(noun)
    if any(c.dep_ == "compound" and _class(c, lexicon) == "animal" for c in noun.lefts):
        return "animal"
    return "person" if _class(noun, lexicon) == "person" else "animal"


def _class(noun, lexicon) -> str | None:
    word = lexicon.noun_lemma(noun.lower_, noun.tag_ == "NNS") or noun.lower_
    return swap_rules().object_class(word, lexicon.noun_class(word), lexicon.hypernym_names(word))


def _order_exchanges(doc, lexicon) -> list[str]:
    """"A car behind a bus" -> "A bus behind a car"; "A cat is above a dog" -> "A dog is above a cat"."""
    texts = []
    lowers = [t.lower_ for t in doc]  # read once: every relation is looked for at every position
    for relation in ORDERED:
        n = len(relation)
        for first in range(1, len(doc) - n):
            if lowers[first] != relation[0] or tuple(lowers[first:first + n]) != relation:
                continue
            pair = related(doc, first, first + n, lexicon)
            if pair is None:
                continue
            (thing, a), (other, b), be = pair
            if a[0] != 0 or not comparable(thing, other, lexicon) or thing.tag_ not in NOUN_TAGS or \
                    (be is not None and _number(thing, len(doc)) != _number(other, len(doc))):
                continue
            texts.append(_exchanged(doc, a, b, b[1]))
    return texts


# Sizes exchange only across the two ends of the scale ("a large dog and a small cat"): "large" and "big", "tall"
# and "long" say much the same of two things, and "little room" is not a size.
MANY_COLOURS = frozenset({"colorful", "colourful", "multicolored", "multicoloured", "multi", "rainbow"})
BIG = frozenset("big large huge giant tall long wide massive enormous thick fat".split())
SMALL = frozenset("small tiny short narrow mini miniature thin skinny".split())


def _contrast(a, b) -> bool:
    """Two adjectives whose exchange changes what is said: two colours, two materials...; two sizes from the two
    ends of the scale; not "colorful" against a colour (a blue toilet may be called colorful)."""
    classes = swap_rules().attribute_class
    if {a.lower_, b.lower_} & MANY_COLOURS:
        return False
    if "size" in classes.get(a.lower_, ()) and "size" in classes.get(b.lower_, ()):
        return bool({a.lower_, b.lower_} & BIG and {a.lower_, b.lower_} & SMALL)
    return True


def _attribute_exchanges(doc, lexicon, corpus) -> list[str | None]:
    """"A white dog and a black cat" -> "A black dog and a white cat": two adjectives of one class on different
    things, each a plain word of its own (not "light blue", "lush green", "stainless steel"), and, given the input
    captions, each said of its new noun in some caption ("red grass", "blue bananas" are not: a text-only model
    rejects them without the photo)."""
    us = units(doc)
    return [_swap_token_units(us, a, b) for a, b in _attribute_pairs(doc)
            if _contrast(a, b) and _plain_adjective(a, lexicon) and _plain_adjective(b, lexicon) and
            _said_of(a, b.head, corpus, lexicon)
            and _said_of(b, a.head, corpus, lexicon)]


def _plain_adjective(adjective, lexicon) -> bool:
    """An adjective of its own (no "light" blue, no "lush" green before it) and, on a food, a plant or a thing of no
    class, no name of a kind ("red wine", "green beans"); "a black cat" is a cat that is black."""
    doc = adjective.doc
    before = doc[adjective.i - 1] if adjective.i else None
    named = _class(adjective.head, lexicon) in (None, "food", "plant") and \
        lexicon.is_multiword((adjective.lower_, adjective.head.lower_))
    # right before its noun, or its noun's compounds ("a white fire hydrant"): not "a dark burgundy seat"
    next_to_noun = adjective.head.i > adjective.i and all(
        t.dep_ == "compound" and t.head.i == adjective.head.i for t in doc[adjective.i + 1:adjective.head.i])
    return not list(adjective.children) and not named and next_to_noun and \
        (before is None or before.tag_ not in ("JJ", "JJR", "JJS", "RB", "NN"))


# Things any colour or size suits ("a blue ball", "a grey collar"); of the rest (animals, food, plants, places) only
# a colour or size some input caption says of the noun ("a green horse", "red grass" are not).
PAINTED = frozenset({"vehicle", "furniture", "fixture", "tableware", "clothing", "electronics", "sports", "building",
                     "fixture_outdoor"})
FREE = frozenset({"colour", "size"})


def _said_of(adjective, noun, corpus, lexicon=None) -> bool:
    """The adjective suits the noun: a colour or a size on a made thing, else a pair some input caption has."""
    if corpus is None or corpus.bigram(adjective.lower_, noun.lower_) > 0:
        return True
    free = swap_rules().attribute_class.get(adjective.lower_, frozenset()) & FREE
    return bool(free) and lexicon is not None and _class(noun, lexicon) in PAINTED
