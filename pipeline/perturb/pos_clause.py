"""rule_clause hard positives: the caption's clause said another way that, in a caption, means the same:
- progressive <-> simple present: "A man is riding a horse" <-> "A man rides a horse";
- a participle or a place <-> a sentence: "A man riding a horse" <-> "A man is riding a horse", "A bus parked on the
  street" <-> "A bus is parked on the street", "A cat on a couch" <-> "A cat is on a couch";
- "there is" <-> the thing first: "There are two dogs playing in the snow" <-> "Two dogs are playing in the snow";
- a "that has" clause <-> "with": "a table that has bananas on it" <-> "a table with bananas on it".
COCO writes its captions each of these ways, so both directions occur, and the words that change are the
captions' commonest ("is", "there", "with"): a text-only model finds no word that marks the positive.

Only where the meaning cannot move: one clause in the caption (no second finite verb, no coordinated verb, no
negation, no modal), a subject that begins the caption; not "going to"; a sentence made from a participle only for
a person, an animal or a vehicle doing something, or for a participle of state ("parked", "filled", "covered");
no stative verb turned progressive ("contains" -> "is containing" is not English; "reads 'STOP'" is no reading);
a place only where it is the noun's one complement ("A man in a suit holding ..." is not "A man is in a suit
holding ..."); "there is" only with a thing not yet named ("a", a number: not "the"); nothing said of a photo frame
("A picture showing ..." is not "A picture is showing ..."); no subject whose number English leaves open ("a group
of people is / are").
"""
from __future__ import annotations

from collections import Counter

from pipeline.perturb.candidates import Candidate
from pipeline.perturb.frames import CLOSE, frame_link
from pipeline.perturb.lexicon import COLOURS, kind_of
from pipeline.perturb.substitution import stem, words
from pipeline.perturb.text import match_case

RULE_CLAUSE = "rule_clause"
FINITE = frozenset({"VBZ", "VBP", "VBD", "MD"})
ANIMATE = frozenset({"noun.person", "noun.animal"})
PRONOUN_SUBJECTS = {"he": "is", "she": "is", "they": "are", "we": "are"}
# Verbs whose progressive is not English or says something else ("a bowl contains fruit", "a sign reads ...",
# "a man looks like ...", "a dog sees a cat"), and "lay", whose intransitive use in captions ("a cat laying on a
# bed") reads as an error once in another form.
STATIVE = frozenset("""be have contain include feature consist belong resemble need want like love hate know own
seem appear mean cost weigh fit lack deserve prefer wish understand remember hear see smell taste sound feel read
say depict represent show display exist matter lay lie go do get""".split())
# Participles of a state: "A bus parked ..." is "A bus is parked ..." whatever the subject.
STATE_PARTICIPLES = frozenset("""parked filled topped covered lined stacked loaded piled dressed decorated made
surrounded painted attached mounted placed displayed arranged located situated perched tied stuffed packed
crowded gathered equipped wrapped scattered positioned framed sliced served stopped docked hung propped lit closed
opened""".split())
# Heads of a count ("a group of people", "a couple of dogs"): COCO's writers say "are" after them when what they
# count is plural (val2017: "a group of ... are" 21 times, "is" 3; "a couple of ... are" 32, "is" 0).
COUNTS = frozenset("group herd couple bunch lot number few dozen handful crowd flock".split())
# Verbs of position said of any thing ("a laptop sits on a desk" -> "a laptop is sitting on a desk").
POSTURE = frozenset("sit stand hang rest float lean fly sail glide hover perch drift".split())
# Heads whose number English leaves open ("a pair of shoes is / are", "a family of ..."), and photo frames.
AMBIGUOUS_NUMBER = frozenset("""group groups couple pair pairs bunch herd herds flock flocks crowd team lot lots
number few dozen set sets variety assortment array collection pile stack row line fleet cluster family""".split())
FRAMES = frozenset("picture photo photograph image view shot closeup close snapshot scene display".split())
VEHICLE_SYNSETS = frozenset({"vehicle.n.01", "craft.n.02", "conveyance.n.03"})
# A colour the parser took for the noun: "a grey and white bird" is one bird, not "grey" and "bird".
COLOUR_NOUNS = frozenset(COLOURS) | {"grey", "tan", "beige"}
# Objects of a preposition that are no place a thing is in ("a street in the 1950s", "a phone at different
# angles"): "a street that is in the 1950s" reads as nonsense (round 10 readers).
NOT_PLACES = frozenset({"noun.time", "noun.shape", "noun.attribute"})
# Things that show another thing: "a portrait of a teen in coat and tie".
DEPICTIONS = frozenset("""portrait poster statue painting drawing sketch picture photo photograph image print mural
sculpture figurine figure model replica reflection silhouette shadow illustration cartoon sign logo view scene shot
snapshot display photos pictures images""".split())
DEPICTION_SYNSETS = frozenset({"art.n.01", "picture.n.01"})
# Senses that make "who" wrong for a word whose first sense is a person ("a jet fighter", "a bear cub").
NOT_PERSON_KINDS = frozenset({"noun.animal", "noun.artifact"})
# Prepositions of place: "A cat on a couch" says where the cat is, as "A cat is on a couch" does ("A kitchen
# with a stove" is not "A kitchen is with a stove").
PLACES = frozenset("""in on at near under beside behind above below inside outside atop beneath underneath among
between along across around over by against alongside""".split())
DEFINITE = frozenset({"the", "this", "that", "these", "those"})
# Determiners of a thing not yet named, which "there is" introduces.
INDEFINITE = frozenset({"a", "an", "some", "two", "three", "four", "five", "six", "several", "many", "few"})
PLACE_PRONOUNS = frozenset({"it", "them"})


def clause_positives(doc, lexicon, inflector, in_frame: bool = False) -> list[Candidate]:
    """Every valid rewrite of the caption's clause (a few at most: one per way of saying it). `in_frame`: the doc is
    the scene of a photo frame ("A photo of <a man riding a horse>"), which must stay a noun phrase: a participle or
    a place becomes a relative clause ("a man who is riding a horse"), not a sentence."""
    roots = [t for t in doc if t.dep_ == "ROOT"]
    if not in_frame and (frame_link(doc, close_shots=True) is not None or _close_shot(doc)):
        return []  # a frame whose scene is no noun phrase ("a photo of a man is riding"), or a close shot
    if len(roots) != 1 or any(t.dep_ == "neg" or t.tag_ == "MD" for t in doc):
        return []
    if any(t.lower_ == "going" and t.i + 1 < len(doc) and doc[t.i + 1].lower_ == "to" for t in doc):
        return []  # "is going to hit" is a future, not a progressive
    root = roots[0]
    found = [_with_from_relative(doc, root), _relative_from_with(doc, root, lexicon), _reduced_relative(doc)]
    if root.tag_ in ("NN", "NNS"):
        relative = _relative_pronoun(root, lexicon) if in_frame else None
        found += [_sentence_from_participle(doc, root, lexicon, relative),
                  _sentence_from_place(doc, root, lexicon, relative)]
    elif root.tag_ in ("VBG", "VBN") and not any(c.dep_ in ("aux", "auxpass") for c in root.children):
        found += [_sentence_from_bare_participle(doc, root, lexicon)]  # "a bear shaking ...", parsed as a clause
    elif root.tag_ in ("VBG", "VBN"):
        found += [_simple_from_progressive(doc, root, lexicon, inflector), _participle_from_sentence(doc, root),
                  _there_from_sentence(doc, root)]
    elif root.tag_ in ("VBZ", "VBP") and root.lower_ in ("is", "are"):
        found += [_place_from_sentence(doc, root), _sentence_from_there(doc, root), _there_from_sentence(doc, root)]
    elif root.tag_ in ("VBZ", "VBP"):
        found += [_progressive_from_simple(doc, root, lexicon, inflector)]
    return [c for c in found if c is not None]


def _depiction_of(noun, until: int, lexicon) -> bool:
    """The noun shows the thing of its "of" phrase before token `until` ("a statue of a man on a horse"): what
    follows may be said of either."""
    if not any(c.dep_ == "prep" and c.lower_ == "of" and c.i < until for c in noun.children):
        return False
    return noun.lower_ in DEPICTIONS or bool(lexicon.hypernym_names(noun.lemma_.lower()) & DEPICTION_SYNSETS)


def _close_shot(doc) -> bool:
    """"A close up of three people are kicking ...", whatever the parser made of it."""
    return any(t.lower_ in CLOSE for t in doc[:4]) and any(t.lower_ == "of" for t in doc[:5])


def _replaced(doc, start: int, end: int, new: str) -> Candidate | None:
    """The caption with tokens [start, end) replaced by `new` (the space after the last token kept)."""
    text = doc.text
    begin, stop = doc[start].idx, doc[end - 1].idx + len(doc[end - 1])
    return _candidate(text, text[:begin] + new + text[stop:], text[begin:stop], new)


def _candidate(text: str, rewritten: str, old: str, new: str) -> Candidate | None:
    if text.isupper():
        rewritten, new = rewritten.upper(), new.upper()  # "A BOY TAKING A PICTURE" -> "A BOY IS TAKING ..."
    if rewritten.split() == text.split():
        return None
    return Candidate(RULE_CLAUSE, rewritten, old, new, 0, len(text))


# Words a rewrite of the clause may add or drop; every other word stays, in any form ("rides" / "riding").
CLAUSE_WORDS = frozenset({"be", "there", "that", "which", "who", "have", "with"})


def same_content(caption: str, text: str) -> bool:
    """The rewrite keeps the caption's words, each in some form, and adds or drops only the clause's own."""
    def content(t: str) -> Counter:
        return Counter(stem(w) for w in words(t) if w not in CLAUSE_WORDS and stem(w) not in CLAUSE_WORDS)
    return content(caption) == content(text)


def _one_clause(doc, verb, opening: frozenset = frozenset()) -> bool:
    """No other finite verb or coordinated verb: "A man is riding and a dog runs" has two clauses. `opening`: the
    tokens of an opening that are no clause of their own ("There is")."""
    own = {verb.i} | {c.i for c in verb.children if c.dep_ in ("aux", "auxpass")} | set(opening)
    others = [t for t in doc if t.i not in own and (t.tag_ in FINITE or (t.dep_ == "conj" and t.tag_.startswith("VB")))]
    return not others and not any(c.dep_ == "conj" and c.tag_.startswith("VB") for c in verb.children)


def _subject(verb, deps=("nsubj", "nsubjpass")):
    return next((c for c in verb.children if c.dep_ in deps), None)


def _lemma(verb, lexicon) -> str | None:
    return lexicon.lemma(verb.lower_, "v")


def _able_subject(noun, lexicon, lemma: str) -> bool:
    """A person, an animal or a vehicle, or any thing for a verb of position: what the verb's progressive or simple
    present says of it is the same."""
    if noun.lower_ in PRONOUN_SUBJECTS:
        return True
    if noun.tag_ not in ("NN", "NNS") or noun.lower_ in FRAMES or \
            (noun.lower_ in AMBIGUOUS_NUMBER and noun.lower_ not in COUNTS):
        return False
    if lemma in POSTURE:
        return True
    if noun.lower_ in COUNTS:
        noun = next((o for p in noun.children if p.lower_ == "of" for o in p.children if o.dep_ == "pobj"), noun)
    if kind_of(noun, lexicon) in ANIMATE:
        return True
    return bool(lexicon.hypernym_names(noun.lower_) & VEHICLE_SYNSETS)


def _number(subject, until: int) -> str | None:
    """"is" or "are" for the subject (its conjuncts before token `until` counted), None where English leaves it
    open."""
    if subject.lower_ in PRONOUN_SUBJECTS:
        return PRONOUN_SUBJECTS[subject.lower_]
    if subject.lower_ in COUNTS and subject.tag_ == "NN":
        counted = [o for p in subject.children if p.dep_ == "prep" and p.lower_ == "of" for o in p.children
                   if o.dep_ == "pobj"]
        return "are" if len(counted) == 1 and counted[0].tag_ == "NNS" else None
    if subject.lower_ in AMBIGUOUS_NUMBER or subject.lower_ in COLOUR_NOUNS:
        return None
    conjuncts = [c for c in subject.children if c.dep_ == "conj" and c.i < until]
    if conjuncts:  # "a man and a woman riding"; not "a man wearing glasses and a tie"
        phrases = [c for c in subject.children if c.dep_ in ("prep", "acl", "relcl") and c.i < conjuncts[0].i]
        return None if phrases else "are"  # "a kid in elbow and knee pads": the parser's conjunct is the pads
    if subject.tag_ == "NNS" and subject.left_edge.lower_ in ("a", "an") and \
            not any(c.dep_ == "prep" and c.lower_ == "of" for c in subject.children):
        return None  # "A zebra grazes on ...": a verb the parser read as a plural noun
    return {"NN": "is", "NNS": "are"}.get(subject.tag_)


def _aux_before(verb, deps=("aux",)):
    """The single "is"/"are" right before the verb, or None."""
    auxes = [c for c in verb.children if c.dep_ in ("aux", "auxpass")]
    if len(auxes) != 1 or auxes[0].dep_ not in deps or auxes[0].lower_ not in ("is", "are") or \
            auxes[0].i != verb.i - 1:
        return None
    return auxes[0]


def _first_subject(verb):
    """The verb's noun subject where it begins the caption ("A man ...", "The cat ..."), else None."""
    subject = _subject(verb)
    if subject is None or subject.tag_ not in ("NN", "NNS") or subject.left_edge.i != 0 or subject.lower_ in FRAMES:
        return None
    return subject


def _simple_from_progressive(doc, verb, lexicon, inflector) -> Candidate | None:
    """"A man is riding a horse" -> "A man rides a horse"."""
    aux = _aux_before(verb)
    subject = _subject(verb, ("nsubj",))
    lemma = _lemma(verb, lexicon)
    if verb.tag_ != "VBG" or aux is None or subject is None or lemma is None or lemma in STATIVE or \
            not _one_clause(doc, verb) or _number(subject, verb.i) != aux.lower_:
        return None
    if subject.tag_ not in ("NN", "NNS"):
        return None  # "it is raining" -> "it rains" is a habit; "we are looking" -> "we look" reads unnatural
    new = inflector.verb(lemma, "VBZ" if aux.lower_ == "is" else "VBP")
    return _replaced(doc, aux.i, verb.i + 1, new)


def _participle_from_sentence(doc, verb) -> Candidate | None:
    """"A man is riding a horse" -> "A man riding a horse"; "A bus is parked ..." -> "A bus parked ..."."""
    aux = _aux_before(verb, ("aux", "auxpass"))
    if aux is None or _first_subject(verb) is None or not _one_clause(doc, verb):
        return None
    if verb.tag_ == "VBN" and verb.lower_ not in STATE_PARTICIPLES:
        return None  # "A ball is thrown ..." -> "A ball thrown ..." reads as a fragment of another sentence
    if not any(t.is_alpha for t in doc[verb.i + 1:]):
        return None  # "A train is displayed." -> "A train displayed." reads as the past of a sentence cut short
    if doc[0].lower_ in DEFINITE:
        return None  # a fragment names a thing anew: "The man in the picture wearing a kilt" reads cut short
    return _replaced(doc, aux.i, verb.i + 1, verb.text)


def _progressive_from_simple(doc, verb, lexicon, inflector) -> Candidate | None:
    """"A man rides a horse" -> "A man is riding a horse"."""
    subject = _subject(verb, ("nsubj",))
    lemma = _lemma(verb, lexicon)
    if subject is None or lemma is None or lemma in STATIVE or any(c.dep_ in ("aux", "auxpass") for c in
                                                                 verb.children) or not _one_clause(doc, verb):
        return None
    number = _number(subject, verb.i)
    if not _able_subject(subject, lexicon, lemma) or number != ("is" if verb.tag_ == "VBZ" else "are"):
        return None
    return _replaced(doc, verb.i, verb.i + 1, f"{number} {inflector.verb(lemma, 'VBG')}")


def _relative_pronoun(noun, lexicon) -> str:
    """"who" for a person, "that" for the rest and wherever the noun may be something else too."""
    if kind_of(noun, lexicon) != "noun.person" or any(c.dep_ == "compound" for c in noun.children):
        return "that"
    lemma = lexicon.noun_lemma(noun.lower_, noun.tag_ == "NNS") or noun.lower_
    senses = lexicon.wn.synsets(lemma, "n")[:3]
    return "that" if any(s.lexname() in NOT_PERSON_KINDS for s in senses) else "who"


def _sentence_from_participle(doc, noun, lexicon, relative: str | None = None) -> Candidate | None:
    """"A man riding a horse" -> "A man is riding a horse"; "A bus parked ..." -> "A bus is parked ..."; with
    `relative`, "a man who is riding a horse"."""
    clauses = [c for c in noun.children if c.dep_ == "acl" and c.i > noun.i]
    if len(clauses) != 1 or any(c.dep_ in ("aux", "auxpass", "nsubj") for c in clauses[0].children):
        return None
    return _is_before_participle(doc, noun, clauses[0], lexicon, relative)


def _sentence_from_bare_participle(doc, verb, lexicon) -> Candidate | None:
    """The same where the parser made the participle the root and the noun its subject ("a brown bear shaking the
    water off")."""
    subject = _subject(verb)
    if subject is None or subject.i > verb.i:
        return None
    return _is_before_participle(doc, subject, verb, lexicon)


def _bare(noun) -> bool:
    """A singular noun with no determiner: "Girl trying out a game" is a headline; "Girl is trying" is no English."""
    return noun.tag_ == "NN" and not any(c.dep_ in ("det", "poss", "nummod", "predet") for c in noun.children)


def _is_before_participle(doc, noun, verb, lexicon, relative: str | None = None) -> Candidate | None:
    if noun.lower_ in FRAMES or noun.left_edge.i != 0 or noun.tag_ not in ("NN", "NNS") or _bare(noun) or \
            _gerund(noun, lexicon):
        return None
    number = _number(noun, verb.i)
    if number is None or doc[verb.i - 1].tag_.startswith("RB") or doc[verb.i - 1].is_punct or \
            not _one_clause(doc, verb):
        return None
    if verb.tag_ == "VBN" and any(c.tag_ == "VBG" for c in verb.subtree):
        return None  # "a player dressed in black returning the ball": the second participle is the act
    if relative and any(c.i != verb.i and c.tag_ in ("VBG", "VBN") and c.dep_ != "amod" for c in verb.subtree):
        return None  # "a boy who is wearing a mitt holding a ball": the second one left hanging
    if any(t.lower_ == "with" for t in doc[noun.i + 1:verb.i]) and (verb.tag_ == "VBN" or relative):
        return None  # "a room with pictures mounted on the wall": the pictures are mounted, not the room
    if _depiction_of(noun, verb.i, lexicon):
        return None  # "a statue of a man riding a horse": the man rides it
    if relative == "that" and verb.i != noun.i + 1:
        return None  # "a guy in a green shirt that is holding a phone": the shirt would hold it
    if verb.tag_ == "VBN":
        if verb.lower_ not in STATE_PARTICIPLES:
            return None
    elif verb.tag_ == "VBG":
        lemma = _lemma(verb, lexicon)
        if lemma is None or lemma in STATIVE or not _able_subject(noun, lexicon, lemma):
            return None
    else:
        return None
    return _replaced(doc, verb.i, verb.i + 1, " ".join(filter(None, (relative, number, verb.text))))


def _place_of(noun):
    """The noun's first complement after it, where that is a place ("on a couch") and any after it are phrases
    too ("on a table next to a lamp"), else None."""
    rights = [c for c in noun.rights if c.dep_ not in ("punct",) and not (c.dep_ == "prep" and c.lower_ == "of")]
    if not rights or any(c.dep_ != "prep" for c in rights) or rights[0].lower_ not in PLACES:
        return None
    place = rights[0]
    before = [c for c in noun.rights if c.i < place.i and c.dep_ == "prep" and c.lower_ == "of"]
    if place.i != (before[-1].right_edge.i if before else noun.i) + 1:
        return None  # "A zebra playing on a field": something the parser left out stands before the place
    if before and any(t.dep_ == "prep" and t.i != before[-1].i for t in before[-1].subtree):
        return None  # "a herd of cows grazes in a field near a river": the place would follow the field
    objects = [c for c in place.children if c.dep_ == "pobj"]
    if len(objects) != 1 or objects[0].tag_ not in ("NN", "NNS", "NNP", "PRP"):
        return None
    return place


def _gerund(noun, lexicon) -> bool:
    """"A zebra playing on a field": a verb's -ing form the parser read as the head noun."""
    return noun.lower_.endswith("ing") and lexicon.lemma(noun.lower_, "v") not in (None, noun.lower_)


def _sentence_from_place(doc, noun, lexicon, relative: str | None = None) -> Candidate | None:
    """"A cat on a couch." -> "A cat is on a couch."; with `relative`, "a cat that is on a couch"."""
    if noun.left_edge.i != 0 or noun.lower_ in FRAMES or _bare(noun) or _gerund(noun, lexicon) or \
            any(t.tag_.startswith("VB") for t in doc):
        return None
    place = _place_of(noun)
    number = _number(noun, len(doc))
    if place is None or number is None or doc[place.i - 1].is_punct:
        return None
    where = next(c for c in place.children if c.dep_ == "pobj")
    if where.like_num or where.text[:1].isdigit() or kind_of(where, lexicon) in NOT_PLACES:
        return None
    later = [o for p in [*place.rights, *(c for c in noun.rights if c.i > place.i)] if p.dep_ == "prep"
             for o in p.children if o.dep_ == "pobj"]
    if any(kind_of(w, lexicon) == "noun.time" for w in later):
        return None  # "horses that are on the beach on a clear day": the time is the scene's, not the horses'
    if _depiction_of(noun, place.i, lexicon):
        return None  # "a portrait of a teen in coat and tie": the teen is in them, not the portrait
    counted = [o for p in noun.children if p.dep_ == "prep" and p.lower_ == "of" for o in p.children
               if o.dep_ == "pobj"]
    if counted and {"NN": "is", "NNS": "are"}.get(counted[-1].tag_) != number and \
            any(c.dep_ == "compound" for c in counted[-1].children):
        return None  # "a loaf of bread hits that is on top": a verb the parser read as a plural noun
    return _replaced(doc, place.i, place.i + 1, " ".join(filter(None, (relative, number, place.text))))


def _place_from_sentence(doc, be) -> Candidate | None:
    """"A cat is on a couch." -> "A cat on a couch."."""
    subject = _first_subject(be)
    rest = [c for c in be.children if c.dep_ not in ("punct", "nsubj")]
    if subject is None or len(rest) != 1 or rest[0].dep_ != "prep" or rest[0].lower_ not in PLACES or \
            rest[0].i != be.i + 1 or not _one_clause(doc, be):
        return None
    return _replaced(doc, be.i, be.i + 2, rest[0].text)


def _sentence_from_there(doc, be) -> Candidate | None:
    """"There are two dogs playing in the snow" -> "Two dogs are playing in the snow"; "There is a cat on the
    couch" -> "A cat is on the couch"."""
    expl = [c for c in be.children if c.dep_ == "expl"]
    attrs = [c for c in be.children if c.dep_ in ("attr", "nsubj") and c.tag_ in ("NN", "NNS")]
    if len(expl) != 1 or expl[0].i != 0 or be.i != 1 or len(attrs) != 1 or not _one_clause(doc, be):
        return None
    thing = attrs[0]
    if _number(thing, len(doc)) != be.lower_ or thing.left_edge.i != 2 or \
            doc[2].lower_ not in INDEFINITE | {"a", "an"} and doc[2].tag_ not in ("JJ", "NN", "NNS"):
        return None
    after = [c for c in thing.rights if c.dep_ in ("acl", "prep")] + [c for c in be.rights if c.dep_ == "prep"]
    if len(after) != 1 or not (after[0].tag_ == "VBG" or (after[0].dep_ == "prep" and after[0].lower_ in PLACES)):
        return None
    split = after[0].i
    if any(t.dep_ == "relcl" for t in doc):
        return None
    text = doc.text
    np = text[doc[2].idx:doc[split - 1].idx + len(doc[split - 1])]
    new_start = match_case(doc[0].text, np[:1]) + np[1:]
    rewritten = new_start + " " + be.lower_ + " " + text[doc[split].idx:]
    return _candidate(text, rewritten, f"there {be.lower_}", be.lower_)


def _there_from_sentence(doc, verb) -> Candidate | None:
    """"Two dogs are playing in the snow" -> "There are two dogs playing in the snow"; "A cat is on the couch" ->
    "There is a cat on the couch"."""
    if verb.lower_ in ("is", "are"):  # "A cat is on the couch"
        be, rest = verb, [c for c in verb.children if c.dep_ not in ("punct", "nsubj")]
        if len(rest) != 1 or rest[0].dep_ != "prep" or rest[0].lower_ not in PLACES or rest[0].i != be.i + 1:
            return None
    else:  # "Two dogs are playing"
        be = _aux_before(verb)
        if be is None or verb.tag_ != "VBG":
            return None
    subject = _first_subject(verb)
    if subject is None or not _one_clause(doc, verb) or _number(subject, be.i) != be.lower_ or \
            doc[0].lower_ not in INDEFINITE or subject.i + 1 != be.i or doc[0].tag_ == "NNP":
        return None
    text = doc.text
    np = text[:subject.idx + len(subject)]
    shouted = doc[0].text.isupper() and len(doc[0].text) > 1  # "TWO DOGS ..." stays as written
    lowered = np if shouted else np[:1].lower() + np[1:]
    rewritten = match_case(doc[0].text, "there") + " " + be.lower_ + " " + lowered + " " + \
        text[doc[be.i + 1].idx:]
    return _candidate(text, rewritten, be.lower_, f"there {be.lower_}")


def _reduced_relative(doc) -> Candidate | None:
    """"A bus that is parked on the street" -> "A bus parked on the street"; "a man who is holding an umbrella"
    -> "a man holding an umbrella"."""
    for verb in doc:
        if verb.dep_ != "relcl" or verb.tag_ not in ("VBG", "VBN"):
            continue
        rel = [c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass") and c.lower_ in ("that", "who", "which")]
        aux = _aux_before(verb, ("aux", "auxpass"))
        if len(rel) != 1 or aux is None or rel[0].i != aux.i - 1 or rel[0].i != verb.head.i + 1:
            return None
        if verb.tag_ == "VBN" and verb.lower_ not in STATE_PARTICIPLES:
            return None
        if not any(t.is_alpha for t in doc[verb.i + 1:]):
            return None  # "a bus that is parked." -> "a bus parked." reads cut short
        return _replaced(doc, rel[0].i, verb.i + 1, verb.text)
    return None


def _with_from_relative(doc, root) -> Candidate | None:
    """"a table that has bananas on it" -> "a table with bananas on it"."""
    for clause in doc:
        if clause.dep_ != "relcl" or clause.lower_ not in ("has", "have"):
            continue
        rel = [c for c in clause.children if c.dep_ == "nsubj" and c.lower_ in ("that", "which")]
        noun = clause.head
        if len(rel) != 1 or rel[0].i != noun.i + 1 or clause.i != rel[0].i + 1 or noun.tag_ not in ("NN", "NNS") or \
                any(c.dep_ not in ("nsubj", "dobj", "prep", "punct") for c in clause.children):
            return None
        if any(t.tag_ in FINITE and t.i not in (clause.i,) and t.head.i != clause.i for t in doc):
            return None
        return _replaced(doc, rel[0].i, clause.i + 1, "with")
    return None


def _relative_from_with(doc, root, lexicon) -> Candidate | None:
    """"A bathroom with a green shower curtain" -> "A bathroom that has a green shower curtain": of a thing or a
    place only ("a man with a dog" may be walking it)."""
    if root.tag_ not in ("NN", "NNS") or root.left_edge.i != 0 or root.lower_ in FRAMES | AMBIGUOUS_NUMBER or \
            any(t.tag_.startswith("VB") for t in doc):
        return None
    rights = [c for c in root.rights if c.dep_ != "punct"]
    if len(rights) != 1 or rights[0].lower_ != "with" or rights[0].i != root.i + 1:
        return None
    if kind_of(root, lexicon) not in ("noun.artifact", "noun.food", "noun.location", "noun.object"):
        return None
    if any(o.tag_ == "NN" and not any(c.dep_ in ("det", "poss", "nummod") for c in o.children)
           for o in rights[0].children if o.dep_ == "pobj"):
        return None  # "a room with balcony" is a caption's shorthand; "a room that has balcony" is an error
    number = _number(root, len(doc))
    if number is None:
        return None
    return _replaced(doc, rights[0].i, rights[0].i + 1, "that has" if number == "is" else "that have")
