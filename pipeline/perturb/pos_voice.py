"""rule_voice hard positives: an action said in the other voice, which keeps the scene and changes the structure
(the order of the two things and the verb's form):
- active -> passive: "A man riding a horse" -> "A horse ridden by a man"; "A boy is throwing a frisbee" -> "A frisbee
  is being thrown by a boy"; "A man rides a horse" -> "A horse is ridden by a man";
- passive -> active: "A kite being flown by a child" -> "A child flying a kite"; "A horse is ridden by a man" ->
  "A man rides a horse".
What stands after the object (a place, a time: "on a beach") stays at the end, said of the whole act.

Only where the other voice says the same of any photo and reads as a caption: a verb of data/structure.json
(voice_verbs: "holding", "riding", "throwing"; not "playing tennis", "taking a picture", "crossing the street",
nor a state: "has", "shows"); one clause (no second verb, no negation, no modal); the subject begins the caption and
both things are noun phrases that read whole wherever they stand ("a man", "two dogs", "kids"; no pronoun: "his
horse" would come before its owner; no "another"); nothing but places and adverbs after the object; no clause
inside the object ("a horse wearing a saddle").
"""
from __future__ import annotations

from collections import Counter

from pipeline.perturb.candidates import Candidate, make_candidate
from pipeline.perturb.phrases import FRAMES, NOUN_TAGS, determined, first_piece_cased, gerund, \
    misparsed, of_object, phrase_text, plain_phrase, subtree_range, tail_text
from pipeline.perturb.lexicon import kind_of
from pipeline.perturb.pos_clause import AMBIGUOUS_NUMBER, ANIMATE, COUNTS, FINITE, _aux_before, _number, _one_clause
from pipeline.perturb.rule_data import positive_swaps, structure_rules, swap_rules
from pipeline.perturb.substitution import stem, words

RULE_VOICE = "rule_voice"
# What may follow the object and stay in place: a place, a time, an adverb ("on a beach", "at night", "together").
TRAILING = frozenset({"prep", "advmod", "npadvmod", "punct"})
# A phrase after the object is read, once after "by a man", as his: only a place, a time or the weather says the
# same there ("on the beach", "in the rain"; not "walking a dog on a leash" -> "a dog walked by a woman on a leash").
PLACE_PREPOSITIONS = frozenset("""in on at near under beside behind above below inside outside atop beneath underneath
along across around over through down up into onto during next front top""".split())
PLACE_CLASSES = frozenset({"terrain", "building", "furniture", "fixture", "fixture_outdoor", "plant"})
PLACE_LEXNAMES = frozenset({"noun.location", "noun.object", "noun.phenomenon", "noun.time", "noun.event"})
# Adverbs that may stay after the act ("together", "downhill"); any other ("overhead", "behind") is left alone.
STILL_ADVERBS = frozenset("together outside outdoors inside indoors downhill uphill alone".split())
# Places no agent is in ("the people in the sky"): a phrase after the object that names one was the object's.
SKY = frozenset({"sky", "skies", "air", "clouds"})
# A bare singular object reads whole where it names a stuff, not a thing ("eating pizza" -> "pizza eaten by").
MASS_LEXNAMES = frozenset({"noun.food", "noun.substance", "noun.plant"})
# Things a caption names that do nothing themselves: "a statue of two people flying a kite".
DEPICTIONS = frozenset("statue statues sculpture painting drawing poster figurine figurines mural cartoon".split())
# The particles a verb keeps in the passive: "holds up a sign" -> "a sign is held up by" (not "riding down tracks").
PARTICLES = frozenset({("hold", "up"), ("lift", "up"), ("pick", "up")})
# The words the other voice adds or drops: "by", and the forms of "be" ("is being thrown").
VOICE_WORDS = frozenset({"by", "be", "being", "that", "who"})  # and a relative's pronoun: "a man that is riding"


def voice_positives(doc, lexicon, inflector) -> list[Candidate]:
    """The caption's action in the other voice (at most one: a caption has one clause)."""
    if misparsed(doc) or any(t.dep_ == "neg" or t.tag_ in ("MD", "PRP", "PRP$") for t in doc) or \
            any(t.lower_ in ("each", "one") and t.i + 1 < len(doc) and doc[t.i + 1].lower_ in ("other", "another")
                for t in doc):
        return []
    found = []
    for verb in doc:
        texts = _passive(doc, verb, lexicon) if verb.tag_ in ("VBG", "VBZ", "VBP") else \
            [_active(doc, verb, lexicon, inflector)] if verb.tag_ == "VBN" else None
        for text in texts or ():
            candidate = make_candidate(RULE_VOICE, doc.text, text) if text else None
            if candidate is not None:
                found.append(candidate)
    return found


def voice_lemma(word: str, lexicon) -> str | None:
    """The verb of data/structure.json this form is of, among all its WordNet readings ("swinging" is "swinge"
    first)."""
    verbs = structure_rules().voice_participles
    return next((f for f in lexicon.wn._morphy(word.lower(), "v") if f in verbs), None)


def _object_fits(lemma: str, obj, lexicon) -> bool:
    """The object is of a kind the verb takes in the sense listed ("walking a dog", "playing a guitar")."""
    rules = structure_rules()
    word = lexicon.noun_lemma(obj.lower_, obj.tag_ == "NNS") or obj.lower_
    if word in rules.voice_not_objects.get(lemma, ()) or obj.lower_ in rules.voice_not_objects.get(lemma, ()):
        return False  # "skis ridden by a man"
    if lemma in rules.voice_objects:
        kind = swap_rules().object_class(word, lexicon.noun_class(word), lexicon.hypernym_names(word))
        if kind not in rules.voice_objects[lemma]:
            return False
    return lemma not in rules.voice_synsets or bool(lexicon.hypernym_names(word) & rules.voice_synsets[lemma])


def thing_phrase(doc, noun, start: int, end: int, lexicon=None, doing: bool = False) -> bool:
    """A noun phrase that reads whole wherever it stands: a common noun, no frame, no pronoun, no clause of its
    own (with `doing`, a participle of the noun's own may stand in it: "a little girl standing in a forest"), and
    determined ("a man", "two dogs", "kids"), or, given the lexicon, a bare mass noun ("eating pizza")."""
    if noun.tag_ not in NOUN_TAGS or noun.lower_ in FRAMES | DEPICTIONS or not plain_phrase(doc, start, end) or \
            any((t.tag_.startswith("VB") and t.dep_ not in ("amod", "compound") and
                 not (doing and t.dep_ == "acl" and t.head.i == noun.i)) or t.dep_ == "nmod"
                for t in doc[start:end]):
        return False  # "a man and dog herd sheep": a verb the parser read as a noun
    if lexicon is not None and any(gerund(t, lexicon) for t in doc[start:end] if t.tag_ in NOUN_TAGS):
        return False  # "wearing a bike helmet standing next to ...": "standing" is no thing
    return determined(doc, noun, start) or (lexicon is not None and start == noun.i - sum(
        1 for t in doc[start:noun.i] if t.dep_ in ("amod", "compound")) and
        lexicon.noun_class(noun.lower_) in MASS_LEXNAMES)


def counted(noun):
    """What a count counts ("people" in "a group of people"), else the noun itself."""
    if noun.lower_ in COUNTS or noun.lower_ in AMBIGUOUS_NUMBER:
        found = [o for p in noun.children if p.lower_ == "of" for o in p.children if o.dep_ == "pobj"]
        return found[0] if found else noun
    return noun


def living(noun, lexicon) -> bool:
    """A person or an animal, or a count of them ("a group of people"): by the class data/swaps.json gives the word
    ("bat" is sports gear there, a bat first in WordNet), else by its WordNet file."""
    noun = counted(noun)
    word = lexicon.noun_lemma(noun.lower_, noun.tag_ == "NNS") or noun.lower_
    kind = swap_rules().object_class(word, lexicon.noun_class(word), lexicon.hypernym_names(word))
    return kind in ("person", "animal") if kind is not None else kind_of(noun, lexicon) in ANIMATE


def trailing_ok(doc, start: int, heads, lexicon) -> bool:
    """Everything from token `start` on hangs, as a place, time or adverb, from one of `heads` (the verb, the
    first thing): it stays where it is, said of the whole act."""
    ids = {h.i for h in heads}
    for t in doc[start:]:
        if t.is_punct and all(u.is_punct for u in doc[t.i:]):
            break  # the caption's final stop
        if t.tag_.startswith("VB") and t.dep_ not in ("amod", "compound"):
            return False  # a second act: "... and looking at the camera"
        if t.head.i in ids and (t.dep_ not in TRAILING or (t.dep_ != "punct" and _relation(t) and
                                                           not _place(t, lexicon))):
            return False
        if t.head.i in ids and t.dep_ in ("advmod", "npadvmod") and not _relation(t) and \
                t.lower_ not in STILL_ADVERBS:
            return False  # "a brown horse carrying people behind": whose "behind" is not known once moved
        if t.lower_ in SKY:
            return False  # "kites flown by people in the sky": the place was the kites'; after "by", the people's
        if not any(a.i in ids for a in t.ancestors):
            return False
    return True


def _relation(token) -> bool:
    """A preposition, or an adverb that heads one ("next" to a fence, "out" of the water)."""
    return token.dep_ == "prep" or any(c.dep_ == "prep" for c in token.children)


def _place(prep, lexicon) -> bool:
    """"on the beach", "in the rain", "at night", "next to a fence", "during a game": a place, a time or the
    weather."""
    if prep.lower_ == "during":
        return True
    if prep.lower_ not in PLACE_PREPOSITIONS:
        return False
    nouns = [t for t in prep.subtree if t.dep_ == "pobj" and t.tag_ in NOUN_TAGS]
    if not nouns:
        return False
    noun = nouns[-1] if prep.lower_ in ("next", "front", "top") else nouns[0]
    word = lexicon.noun_lemma(noun.lower_, noun.tag_ == "NNS") or noun.lower_
    return lexicon.noun_class(word) in PLACE_LEXNAMES or \
        swap_rules().object_class(word, lexicon.noun_class(word), lexicon.hypernym_names(word)) in PLACE_CLASSES


def agent_phrase(doc, verb, subject_end: int, lexicon, start: int = 0):
    """The noun that begins the caption (at token `start`, after an opening) and does the act, where tokens
    [start, subject_end) are its phrase: the noun with its modifiers, places and what it is doing meanwhile ("A
    little girl standing in a forest" holding an umbrella); None where the act may be another thing's ("a man next
    to a woman holding an umbrella") or the phrase reads cut ("A woman smiling and", "... while")."""
    if subject_end <= start or doc[subject_end - 1].is_punct or doc[subject_end - 1].tag_.startswith("RB") or \
            doc[subject_end - 1].tag_ in ("CC", "DT", "IN", "TO") or _some_of_them(doc, start, subject_end) or \
            any(t.dep_ in ("mark", "advmod") or (t.dep_ == "cc" and t.head.tag_ not in NOUN_TAGS)
                for t in doc[start:subject_end]):
        return None
    chain = [verb, *verb.ancestors]
    for k, t in enumerate(chain[1:], 1):
        if t.tag_ in NOUN_TAGS and t.left_edge.i == start:
            agent = t
            break
    else:
        return None
    alive = living(agent, lexicon)
    lemma = voice_lemma(verb.lower_, lexicon)
    for t in chain[1:k]:
        if of_object(t) or _clothes(t, lexicon):
            continue  # "a group of people flying kites": the people are the group; "a man in a uniform holding"
        if t.tag_ in NOUN_TAGS and (not alive or living(t, lexicon) or
                                    lemma in structure_rules().thing_agents):
            return None  # "a man next to a woman holding ...", "people near a lot holding motorcycles": the parse
            # says the woman, the lot holds them
        if t.tag_ in FINITE:
            return None
    if not all(t.i == agent.i or agent in t.ancestors for t in doc[start:subject_end]):
        return None
    return agent


def _some_of_them(doc, start: int, end: int) -> bool:
    """The phrase singles out some of its things ("two children one holding a bear", "three people and one is",
    "one of which"): what follows is said of one of them, not of the phrase."""
    return any(t.lower_ in ("which", "whom", "each") or (t.lower_ == "one" and (t.i + 1 >= len(doc) or
                                                                             doc[t.i + 1].tag_ not in NOUN_TAGS))
               for t in doc[start:end])


def _clothes(token, lexicon) -> bool:
    """What a person is "in" ("a man in a baseball uniform"): it does nothing of its own."""
    return token.dep_ == "pobj" and token.head.lower_ == "in" and \
        bool(lexicon.hypernym_names(token.lower_) & positive_swaps().worn)


def subject_phrase(doc, subject, end: int, start: int = 0) -> bool:
    """Tokens [start, end) are the subject's phrase: it begins the caption (or follows its opening) and nothing of
    the verb's is inside."""
    return subject.left_edge.i == start and end > start and \
        all(t.i == subject.i or subject in t.ancestors for t in doc[start:end]) and \
        not doc[end - 1].is_punct and not doc[end - 1].tag_.startswith("RB") and not _some_of_them(doc, start, end)


def opening(doc) -> tuple[int, str | None]:
    """Where the first thing of the caption starts, after an opening that stays in place: (2, "is"/"are") after
    "There is/are", else (0, None). Not after a photo frame: "a close up of a child holding a banana" is not "a close
    up of a banana held by a child" (two readers: the photo's subject changes)."""
    if len(doc) > 2 and doc[0].lower_ == "there" and doc[1].lower_ in ("is", "are"):
        return 2, doc[1].lower_
    return 0, None


def _passive(doc, verb, lexicon) -> list[str] | None:
    """"A man riding a horse" -> "A horse ridden by a man"; "... is riding ..." -> "... is being ridden by ..."; "A man
    rides a horse" -> "A horse is ridden by a man"."""
    lemma = voice_lemma(verb.lower_, lexicon)
    participle = structure_rules().voice_participles.get(lemma)
    if participle is None or not _one_clause(doc, verb, frozenset({1}) if opening(doc)[1] else frozenset()):
        return None
    aux = _aux_before(verb) if verb.tag_ == "VBG" else None
    own_aux = any(c.dep_ in ("aux", "auxpass") for c in verb.children)
    relative = nsubj(verb) if verb.dep_ == "relcl" else None
    if verb.tag_ == "VBG" and aux is not None and relative is not None and relative.lower_ in ("that", "who") and \
            relative.i == aux.i - 1 == verb.head.i + 1:
        kind, subject, subject_end = "participle", verb.head, relative.i  # "a man that is riding a horse"
    elif verb.tag_ == "VBG" and aux is not None:
        kind, subject, subject_end = "progressive", nsubj(verb), aux.i
    elif verb.tag_ == "VBG" and not own_aux:
        kind, subject_end = "participle", verb.i
        subject = nsubj(verb) if verb.dep_ == "ROOT" else agent_phrase(doc, verb, subject_end, lexicon)
    elif verb.tag_ in ("VBZ", "VBP") and verb.dep_ == "ROOT" and not own_aux:
        kind, subject, subject_end = "simple", nsubj(verb), verb.i
    else:
        return None
    start, there = 0, None
    if kind == "participle" and subject is None:  # "There is a man holding ...", "A photo of a man holding ..."
        start, there = opening(doc)
        subject = agent_phrase(doc, verb, subject_end, lexicon, start) if start else None
    if subject is None or subject.i >= verb.i or not subject_phrase(doc, subject, subject_end, start) or \
            not thing_phrase(doc, subject, start, subject_end, lexicon, doing=True):
        return None
    if not living(subject, lexicon) and lemma not in structure_rules().thing_agents:
        return None  # "a bathroom with two containers catching drips": a thing that cannot do it
    objects = [c for c in verb.children if c.dep_ == "dobj"]
    particles = [c for c in verb.children if c.dep_ == "prt"]
    if len(objects) != 1 or len(particles) > 1 or (particles and (particles[0].i != verb.i + 1 or (
            lemma, particles[0].lower_) not in PARTICLES)):
        return None
    obj = objects[0]
    span = object_range(obj, lexicon)
    if span is None or span[0] != verb.i + 1 + len(particles) or not thing_phrase(doc, obj, *span, lexicon) or \
            not _object_fits(lemma, obj, lexicon) or not trailing_ok(doc, span[1], (verb, subject, obj), lexicon):
        return None
    if span[1] < len(doc) and not doc[span[1]].is_punct and \
            any(c.dep_ == "prep" and c.lower_ != "of" and c.i > subject.i for c in subject.children):
        return None  # "a person in a field flying a kite in the sky" -> "... by a person in a field in the sky"
    if there is not None and _number_of(obj) != there:
        return None  # "There is a man holding two umbrellas" -> "There is two umbrellas held by a man"
    verb_words = participle + "".join(" " + p.lower_ for p in particles)
    # "A man is riding a horse" -> "A horse ridden by a man" too; "a pizza eaten by a girl" reads as done: "being"
    bare = f"being {verb_words}" if lemma in structure_rules().in_progress else verb_words
    forms = [bare] if kind != "simple" else []
    if kind != "participle":
        be = _number_of(obj)
        if be is not None:
            forms.append(f"{be} being {verb_words}" if kind == "progressive" else f"{be} {verb_words}")
    keep = doc.text[:doc[start].idx]
    texts = []
    for form in forms:
        pieces = [(phrase_text(doc, *span), span[0]), (form, None), ("by", None),
                  (phrase_text(doc, start, subject_end), start)]
        words = [t for t, _ in pieces] if start else first_piece_cased(doc, pieces)
        texts.append(keep + " ".join(words) + tail_text(doc, span[1]))
    return texts


def object_range(obj, lexicon) -> tuple[int, int] | None:
    """[start, end) of the object's phrase: its left modifiers and "of" phrases ("a plate of food"); a place after
    it ("a racket on a tennis court") is left where it stands, said of the whole act."""
    span = subtree_range(obj)
    if span is None or sum(t.lower_ == "of" for t in obj.doc[span[0]:span[1]]) > 1:
        return None  # "the inside of the curve of a wave ridden by": which the act is said of is not known
    places = [c for c in obj.rights if _relation(c) and c.lower_ != "of"]
    if not places:
        return span
    if any(c.i > places[0].i and c.dep_ != "prep" and not c.is_punct for c in obj.rights) or \
            not all(_place(p, lexicon) for p in places):
        return None
    return span[0], places[0].i


def _number_of(noun) -> str | None:
    """"is" or "are" for the thing as a subject; None for a count whose number English leaves open ("a bunch of
    bananas is / are")."""
    if noun.lower_ in AMBIGUOUS_NUMBER or noun.lower_ in COUNTS:
        return None
    return _number(noun, len(noun.doc))


def nsubj(verb):
    return next((c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass")), None)


def _active(doc, verb, lexicon, inflector) -> str | None:
    """"A horse ridden by a man" -> "A man riding a horse"; "A kite being flown by a boy" -> "A boy flying a kite";
    "A horse is ridden by a man" -> "A man rides a horse"; "... is being flown by ..." -> "... is flying ..."."""
    lemma = structure_rules().participle_lemmas.get(verb.lower_)
    if lemma is None or not _one_clause(doc, verb):
        return None
    particles = [c for c in verb.children if c.dep_ == "prt"]
    agents = [c for c in verb.children if c.dep_ == "agent" and c.lower_ == "by"]
    if len(agents) != 1 or len(particles) > 1 or agents[0].i != verb.i + 1 + len(particles) or \
            (particles and particles[0].i != verb.i + 1):
        return None
    agent_nouns = [c for c in agents[0].children if c.dep_ == "pobj"]
    if len(agent_nouns) != 1:
        return None
    agent = agent_nouns[0]
    span = subtree_range(agent)
    auxes = [c for c in verb.children if c.dep_ in ("aux", "auxpass")]
    being = doc[verb.i - 1] if verb.i > 0 and doc[verb.i - 1].lower_ == "being" else None
    if verb.dep_ == "acl" and verb.head.tag_ in NOUN_TAGS and verb.head.i < verb.i:
        thing, thing_end, kind = verb.head, (being or verb).i, "participle"
        if auxes and [a.i for a in auxes] != [getattr(being, "i", -1)]:
            return None
    elif verb.dep_ == "ROOT":
        thing = nsubj(verb)
        be = [a for a in auxes if a.lower_ in ("is", "are")]
        if thing is None or len(be) != 1 or len(auxes) != 1 + (being is not None) or be[0].i != (being or verb).i - 1:
            return None
        thing_end, kind = be[0].i, "progressive" if being is not None else "simple"
    else:
        return None
    if thing is None or span is None or span[0] != agents[0].i + 1 or not subject_phrase(doc, thing, thing_end) or \
            not thing_phrase(doc, thing, 0, thing_end) or not thing_phrase(doc, agent, *span) or \
            not _object_fits(lemma, thing, lexicon) or not trailing_ok(doc, span[1], (verb, thing), lexicon):
        return None
    verb_word = inflector.verb(lemma, "VBG")
    if kind != "participle":
        number = _number(agent, len(doc))
        if number is None:
            return None
        verb_word = f"{number} {verb_word}" if kind == "progressive" else \
            inflector.verb(lemma, "VBZ" if number == "is" else "VBP")
    verb_word += "".join(" " + p.lower_ for p in particles)
    pieces = [(phrase_text(doc, *span), span[0]), (verb_word, None), (phrase_text(doc, 0, thing_end), 0)]
    return " ".join(first_piece_cased(doc, pieces)) + tail_text(doc, span[1])


def same_action(caption: str, text: str) -> bool:
    """The rewrite keeps the caption's words, each in some form, but for "by" and "be": the other voice's own words
    (the verb's participle counted as the verb: "ridden" as "riding")."""
    participles = structure_rules().participle_lemmas

    def content(t: str) -> Counter:
        return Counter(stem(participles.get(w, w)) for w in words(t)
                       if stem(w) not in VOICE_WORDS and w not in VOICE_WORDS)
    return content(caption) == content(text)
