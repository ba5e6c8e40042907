"""Hard negatives that keep the caption's words and change their roles. Each function proposes every legal
exchange; a ranker (rank.py) chooses.

- `swap` (CREPE/SugarCrepe SWAP) exchanges two single words: two attributes of different objects ("a white
  dog and a black cat" -> "a black dog and a white cat"), colour with colour, size with size, ...; or two
  objects of one class, one number and different roles ("a dog chasing a cat" -> "a cat chasing a dog"),
  person with person, animal with animal, artifact with artifact (WordNet lexnames, data/swaps.json); or
  moves one colour to an object that has none ("a white cat on a chair" -> "a cat on a white chair"), the
  empty-slot case of exchanging two colours (data/swaps.json colour_moves).
- `negclip` (NegCLIP) exchanges whole phrases: two noun phrases with their modifiers ("a small dog chasing a
  big cat" -> "a big cat chasing a small dog"), of one class, at least one with a modifier (without one, the
  exchange is swap's), and never a text that swap proposes for the same caption. The modifiers move along, so
  a symmetric relation or a list between the phrases keeps the scene whatever the modifiers ("an adult elephant
  walking with a baby elephant"); neither are one thing named twice ("a city bus ... the bus"), a thing named
  against the other ("another guy") or a thing and what the other is for ("a bird on a bird feeder")
  exchanged. (Exchanging two relations, "a cat on a chair next to a table" -> "a cat next to a chair on a
  table", was tried and read as nonsense in most captions.)

Never exchanged, because the result keeps the scene (a hard *positive*, the paper's point) or is nonsense:
the conjuncts of one coordination ("a dog and a cat", "black and white"); two things related by a symmetric
relation ("a man next to a woman"); a thing and its part ("a bird with feathers"); a word of a compound ("fire
hydrant"); the head of a quantity or container phrase ("a group of zebras", "a plate of food"); a person with a
thing; two identical words; and, where the input captions' counts are given, an exchange that leaves an adjective
(not a colour or a size) on a noun they never use it with ("an open laptop ... a lamp" -> "an open lamp").
"""
from __future__ import annotations

from pipeline.perturb.candidates import Candidate, join_tokens, make_candidate, replace_tokens
from pipeline.perturb.relations import attested, caption_keys, exchanged_keys
from pipeline.perturb.rule_data import swap_rules
from pipeline.perturb.text import indefinite_article, match_case, words
from pipeline.perturb.units import Unit, render, swap_ranges, unit_index, units

SWAP, NEGCLIP = "swap", "negclip"
NOUN_TAGS = ("NN", "NNS")
LIST_WORDS = frozenset({"and", "or", ",", "&"})
RELATIVE_WORDS = frozenset({"another", "other", "others"})
FREE_ATTRIBUTES = frozenset({"colour", "size"})  # fit any thing of an exchangeable class
NP_MODIFIERS = frozenset({"det", "amod", "compound", "nummod", "poss", "nmod", "advmod", "case"})
MAX_CANDIDATES = 24
# Nouns without a regular singular/plural pair: never exchanged across numbers.
NUMBER_FIXED = frozenset("people persons clothes police cattle pants jeans shorts glasses scissors".split())


def _coordinated(a, b) -> bool:
    """a and b are conjuncts of one coordination: exchanging them keeps the meaning."""
    return a in b.conjuncts or b in a.conjuncts


def _path(a, b) -> list:
    """The tokens strictly between a and b on their dependency path."""
    up_a, up_b = [a, *a.ancestors], [b, *b.ancestors]
    ids_b = [t.i for t in up_b]
    for k, t in enumerate(up_a):
        if t.i in ids_b:
            path = up_a[1:k + 1] + up_b[1:ids_b.index(t.i)]
            return [x for x in path if x.i not in (a.i, b.i)]
    return []


def _distinguished(token, other) -> bool:
    """The noun carries something of its own that an exchange would move to the other one: a modifier
    ("a red car"), a number, or a phrase after it ("a man in a red shirt") other than the one that relates
    it to `other`."""
    path = {t.i for t in _path(token, other)}
    return any(c.dep_ in ("amod", "nummod", "compound", "poss", "nmod") or
               (c.dep_ in ("prep", "acl", "relcl") and c.i not in path) for c in token.children)


def _symmetric(a, b) -> bool:
    """Exchanging a and b keeps the scene: conjuncts; or two plain things of one number related by a symmetric
    relation on the dependency path between them ("a man next to a woman", "with", "near", "facing"). With a
    modifier or number to tell them apart, the exchange changes the scene
    ("two dogs next to a cat" -> "two cats next to a dog")."""
    if _coordinated(a, b):
        return True
    if a.tag_ != b.tag_ or _distinguished(a, b) or _distinguished(b, a):
        return False
    return _symmetric_path(a, b)


def _symmetric_path(a, b) -> bool:
    """A symmetric relation ("next", "with", "near", "facing") on the dependency path between a and b."""
    relations = swap_rules().symmetric_relations
    return any(t.lower_ in relations for t in _path(a, b))


def _related_in_text(a, b) -> bool:
    """A verb or preposition stands between the two nouns: they play roles in a relation, not items of a
    list ("a kitchen with a refrigerator a microwave and a toaster" lists its items), nor the two ends of a
    compound modifier ("a grass covered field")."""
    lo, hi = sorted((a.i, b.i))
    return any(t.tag_ in ("IN", "TO") or (t.tag_.startswith("VB") and t.dep_ not in ("amod", "compound"))
               for t in a.doc[lo + 1:hi])


def _in_compound(token, lexicon) -> bool:
    if token.dep_ == "compound" or any(c.dep_ == "compound" for c in token.children):
        return True
    doc = token.doc
    for start in (token.i - 1, token.i):
        if 0 <= start and start + 1 < len(doc) and doc[start].is_alpha and doc[start + 1].is_alpha and \
                lexicon.is_multiword((doc[start].lower_, doc[start + 1].lower_)):
            return True
    return False


def _quantity_head(token) -> bool:
    """"group" in "a group of zebras", "plate" in "a plate of food": a quantity or container head."""
    return token.lower_ in swap_rules().quantity_heads and any(
        c.lower_ == "of" for c in token.children) or (token.i + 1 < len(token.doc) and
                                                       token.lower_ in swap_rules().quantity_heads and
                                                       token.doc[token.i + 1].lower_ == "of")


def _noun_class(token, lexicon) -> str | None:
    """The token's object class (data/swaps.json object_classes), or None."""
    word = token.lower_
    return swap_rules().object_class(_lemma(lexicon, word, token.tag_ == "NNS"), lexicon.noun_class(word),
                                     lexicon.hypernym_names(word))


def _object_class(token, lexicon) -> str | None:
    """The token's class if things of that class may trade places (data/swaps.json exchangeable_classes)."""
    found = _noun_class(token, lexicon)
    return found if found in swap_rules().exchangeable_classes else None


def _objects(doc, lexicon) -> list:
    """Nouns that can be exchanged: whole words, not in a compound, not a quantity head, of a known class."""
    return [t for t in doc if t.tag_ in NOUN_TAGS and t.is_alpha and not _in_compound(t, lexicon)
            and not _quantity_head(t) and _object_class(t, lexicon) is not None]


def _swap_token_units(us: list[Unit], a, b) -> str | None:
    ka, kb = unit_index(us, a.i), unit_index(us, b.i)
    if ka == kb or us[ka].end - us[ka].start != 1 or us[kb].end - us[kb].start != 1:
        return None  # part of a multi-token word ("t-shirt"): moving it would split the word
    return render(us, swap_ranges(len(us), (ka, ka + 1), (kb, kb + 1)), fix_articles=True)


def _swap_spans(us: list[Unit], a: tuple[int, int], b: tuple[int, int]) -> str | None:
    """a, b: token ranges; None where they overlap or cut through a unit."""
    (s1, e1), (s2, e2) = sorted([a, b])
    if e1 > s2:
        return None
    try:
        k1, k2 = unit_index(us, s1), unit_index(us, s2)
        k1e, k2e = unit_index(us, e1 - 1) + 1, unit_index(us, e2 - 1) + 1
    except IndexError:
        return None
    if us[k1].start != s1 or us[k2].start != s2 or us[k1e - 1].end != e1 or us[k2e - 1].end != e2:
        return None
    return render(us, swap_ranges(len(us), (k1, k1e), (k2, k2e)), fix_articles=True)


def keeps_words(caption: str, text: str, lemma=None) -> bool:
    """The same words, a/an counted as one ("an apple" may become "a dog"), and with `lemma(word)` nouns
    counted by lemma (an exchange keeps each slot's number: "two dogs ... a cat" -> "two cats ... a dog")."""
    def norm(t):
        return sorted("a" if w == "an" else (lemma(w) if lemma else w) for w in words(t))
    return norm(caption) == norm(text)


def _candidates(negative_type: str, caption: str, texts, lemma, exclude=frozenset()) -> list[Candidate]:
    seen, found = set(exclude), []
    for text in texts:
        if text is None or text in seen or not keeps_words(caption, text, lemma):
            continue
        seen.add(text)
        candidate = make_candidate(negative_type, caption, text)
        if candidate is not None:
            found.append(candidate)
        if len(found) >= MAX_CANDIDATES:
            break
    return found


def _attribute_pairs(doc) -> list[tuple]:
    classes = swap_rules().attribute_class
    # Not an adjective coordinated with another ("a gray and white kitten"): the colours describe one thing.
    adjectives = [t for t in doc if t.dep_ in ("amod", "compound", "nmod") and t.tag_ in ("JJ", "NN", "VBN")
                  and t.lower_ in classes and t.head.tag_ in NOUN_TAGS and not t.conjuncts
                  and not _in_word_list(t)]
    pairs = []
    for i, a in enumerate(adjectives):
        for b in adjectives[i + 1:]:
            if a.lower_ == b.lower_ or a.head == b.head or a.head.lower_ == b.head.lower_ or abs(a.i - b.i) <= 1:
                continue
            if not classes[a.lower_] & classes[b.lower_] or _coordinated(a, b) or _listed(a, b):
                continue
            pairs.append((a, b))
    return pairs


def _in_word_list(token) -> bool:
    """The word is one of a list ("white and grey", "red, yellow and blue"), however the parse attaches it."""
    doc = token.doc
    before = doc[token.i - 1].lower_ if token.i > 0 else ""
    after = doc[token.i + 1].lower_ if token.i + 1 < len(doc) else ""
    return before in ("and", "or", ",") or after in ("and", "or", ",")


def _listed(a, b) -> bool:
    """a and b stand in one list of words ("red, yellow and blue"): nothing but adjectives, commas and "and"
    between them."""
    lo, hi = sorted((a.i, b.i))
    return all(t.tag_.startswith("JJ") or t.lower_ in (",", "and", "or") for t in a.doc[lo + 1:hi])


def _bound_adjectives(noun) -> list[str]:
    """The noun's adjectives that do not suit every thing of its class: all but colours and sizes ("open",
    "wooden", "empty", "parked")."""
    return _bound([c.lower_ for c in noun.children if c.dep_ == "amod" and c.is_alpha])


def _bound(adjectives: list[str]) -> list[str]:
    classes = swap_rules().attribute_class
    return [a for a in adjectives if not classes.get(a, frozenset()) & FREE_ATTRIBUTES]


def _suits(adjectives: list[str], noun: str, corpus) -> bool:
    """Every adjective is said of this noun somewhere in the input captions: an exchange leaves the adjectives
    where they stand, and "an open laptop beside a lamp" must not become "an open lamp beside a laptop".
    Without a corpus nothing is known, so nothing is ruled out."""
    return corpus is None or all(corpus.bigram(adjective, noun) > 0 for adjective in adjectives)


def _attributes_fit(a, b, corpus) -> bool:
    """Each of two adjectives to be exchanged suits the other's noun ("a parked car by a sliced cake" must not
    give "a sliced car")."""
    return _suits(_bound([b.lower_]), a.head.lower_, corpus) and _suits(_bound([a.lower_]), b.head.lower_, corpus)


def _object_pairs(doc, lexicon) -> list[tuple]:
    objects = _objects(doc, lexicon)
    pairs = []
    for i, a in enumerate(objects):
        for b in objects[i + 1:]:
            if _lemma(lexicon, a.lower_, a.tag_ == "NNS") == _lemma(lexicon, b.lower_, b.tag_ == "NNS") or \
                    abs(a.i - b.i) <= 1:
                continue
            if _object_class(a, lexicon) != _object_class(b, lexicon) or not _related_in_text(a, b) or \
                    _symmetric(a, b) or _owned(a, b, lexicon):
                continue
            pairs.append((a, b))
    return pairs


def _lemma(lexicon, word: str, plural: bool = False) -> str:
    return lexicon.noun_lemma(word, plural) or word


def _exchange_nouns(doc, us: list[Unit], a, b, lexicon, inflector, corpus=None) -> str | None:
    """a and b exchanged, each taking the number of the slot it moves into (articles follow), where the
    adjectives left in each slot suit the noun that moves in."""
    if a.tag_ == b.tag_:
        if not (_suits(_bound_adjectives(a), b.lower_, corpus) and _suits(_bound_adjectives(b), a.lower_, corpus)):
            return None
        return _swap_token_units(us, a, b)
    if {a.lower_, b.lower_} & NUMBER_FIXED:
        return None  # "people", "clothes": no singular and plural to trade
    # Across numbers only count nouns ("a cat", not "of food"): a mass noun has no plural to take.
    single = a if a.tag_ == "NN" else b
    if not any(c.dep_ == "det" and c.lower_ in ("a", "an", "one", "another", "each", "every")
               for c in single.children):
        return None
    if unit_index(us, a.i) == unit_index(us, b.i) or any(
            us[unit_index(us, t.i)].end - us[unit_index(us, t.i)].start != 1 for t in (a, b)):
        return None

    def form(lemma: str, tag: str) -> str:
        return inflector.plural(lemma) if tag == "NNS" else lemma

    texts, spaces = [t.text for t in doc], [t.whitespace_ for t in doc]
    lemma_a, lemma_b = (_lemma(lexicon, t.lower_, t.tag_ == "NNS") for t in (a, b))
    new_a, new_b = form(lemma_b, a.tag_), form(lemma_a, b.tag_)
    if not (_suits(_bound_adjectives(a), new_a, corpus) and _suits(_bound_adjectives(b), new_b, corpus)):
        return None
    texts, spaces = replace_tokens(texts, spaces, a.i, a.i + 1, new_a)
    texts, spaces = replace_tokens(texts, spaces, b.i, b.i + 1, new_b)
    return join_tokens(texts, spaces)


def _roles_attested(doc, pairs: list[tuple], lexicon, corpus) -> list[tuple]:
    """The pairs whose exchange makes only relations some input caption has (perturb/relations.py): "a cat
    eating a bird" gives "a bird eating a cat" only where the captions have a bird eating and a cat eaten.
    Without the corpus's relations (not counted), every pair."""
    table = getattr(corpus, "relations", None)
    if table is None or not pairs:
        return pairs
    before = set(caption_keys(doc, lexicon))  # once per caption, not per pair
    return [(a, b) for a, b in pairs if attested(table, exchanged_keys(doc, a, b, lexicon, before))]


def _colour_moves(doc, lexicon) -> list[str]:
    """One colour moved from its object to another object that has none (data/swaps.json colour_moves): "a white
    cat sitting on a chair" -> "a cat sitting on a white chair". The colour must be a plain modifier of its noun
    (no "bright", no shade, no list, no fixed name such as "red wine") whose noun keeps an article, a number or
    a possessive; neither noun a person; the new object of a class that takes a colour (an animal only a coat
    colour), not a room or a place, not the old one's part or owner, with no colour of its own and only an
    article, a number, a possessive or a size before it, so that the colour goes right before the noun."""
    rules = swap_rules()
    classes = {t.i: _noun_class(t, lexicon) for t in doc if t.tag_ in NOUN_TAGS}  # once per noun, not per pair
    sources = [t for t in doc if t.dep_ == "amod" and t.lower_ in rules.movable_colours and t.text.islower()
               and t.i > 0 and t.head.tag_ in NOUN_TAGS and t.head.i > t.i and not t.conjuncts
               and not list(t.children) and not _in_word_list(t)
               and not lexicon.is_multiword((t.lower_, t.head.lower_)) and doc[t.i - 1].lower_ not in rules.shades
               and any(c.dep_ in ("det", "nummod", "poss") for c in t.head.lefts)
               and classes[t.head.i] not in (None, "person")
               and not (t.lower_ in rules.fruit_colours and classes[t.head.i] == "food")]
    texts = []
    for colour in sources:
        source_lemma = _lemma(lexicon, colour.head.lower_, colour.head.tag_ == "NNS")
        for target in doc:
            if target.tag_ not in NOUN_TAGS or not target.is_alpha or target.i in (0, colour.head.i):
                continue
            target_class = classes[target.i]
            if target_class not in rules.colour_target_classes or _in_compound(target, lexicon) \
                    or _quantity_head(target) or lexicon.is_multiword((colour.lower_, target.lower_)):
                continue
            if target.lower_ in rules.never_colour_targets or _part_of(colour.head, target) or \
                    _part_of(target, colour.head):
                continue
            if target_class == "animal" and colour.lower_ not in rules.animal_colours:
                continue  # "a green dog"
            if _lemma(lexicon, target.lower_, target.tag_ == "NNS") == source_lemma:
                continue
            if any(c.dep_ not in ("det", "nummod", "poss", "predet") and
                   not (c.dep_ == "amod" and "size" in rules.attribute_class.get(c.lower_, ())) for c in target.lefts):
                continue  # "a painted bench", "a wooden table", "a red bench": no sure place, or a colour already
            texts.append(_move_word(doc, colour.i, target.i))
    return texts


def _part_of(part, whole) -> bool:
    """"feathers" in "a bird with feathers", "door" in "the door of a car": one thing's part or belonging."""
    prep = part.head
    return prep.dep_ == "prep" and prep.lower_ in ("with", "of") and prep.head.i == whole.i


def _owned(a, b, lexicon) -> bool:
    """A thing and its part, never exchanged ("a bird with feathers" -> "a feather with birds"); between people
    "with" is company ("a man with an onlooker"), which may be exchanged."""
    return _object_class(a, lexicon) != "person" and (_part_of(a, b) or _part_of(b, a))


def _move_word(doc, index: int, before: int) -> str:
    """The caption with token `index` moved to just before token `before`; the a/an before the word's new
    place and before its old place agree with what now follows them."""
    tokens = [(t.text, t.whitespace_) for t in doc]  # the moved word had a space after it (its noun followed)
    order = [k for k in range(len(doc)) if k != index]
    order.insert(order.index(before), index)
    moved = [tokens[k] for k in order]
    # before the word's new place, and before its noun (index + 1: a moved colour always precedes its noun)
    for k in (order.index(index) - 1, order.index(index + 1) - 1):
        if 0 <= k < len(moved) - 1 and moved[k][0].lower() in ("a", "an"):
            moved[k] = (match_case(moved[k][0], indefinite_article(moved[k + 1][0])), moved[k][1])
    return "".join(t + sp for t, sp in moved).strip()


def attribute_exchanges(doc, corpus=None, us: list[Unit] | None = None) -> list[str | None]:
    """Two adjectives of one class on two different things exchanged ("a white dog and a black cat" -> "a black
    dog and a white cat"), each suited to its new noun where `corpus` is given."""
    us = units(doc) if us is None else us
    return [_swap_token_units(us, a, b) for a, b in _attribute_pairs(doc) if _attributes_fit(a, b, corpus)]


def swap_candidates(doc, lexicon, inflector, corpus=None) -> list[Candidate]:
    """With `corpus` (the input captions' CorpusModel), an adjective is only ever left on, or moved to, a noun
    the captions use it with."""
    caption, us = doc.text.strip(), units(doc)
    texts = attribute_exchanges(doc, corpus, us)
    texts += _colour_moves(doc, lexicon)
    texts += [_exchange_nouns(doc, us, a, b, lexicon, inflector, corpus)
              for a, b in _roles_attested(doc, _object_pairs(doc, lexicon), lexicon, corpus)]
    return _candidates(SWAP, caption, texts, lambda w: _lemma(lexicon, w, True))


def _noun_phrases(doc, lexicon):
    """(head, token range, has a modifier) of each exchangeable noun phrase: an object noun with its
    contiguous left modifiers ("a big red bus", "a fire hydrant"). Computed from the parse: spaCy's noun_chunks
    needs the attribute_ruler that is not run."""
    for token in doc:
        if token.tag_ not in NOUN_TAGS or not token.is_alpha or token.dep_ == "compound" or _quantity_head(token):
            continue
        start = token.i
        for child in sorted(token.lefts, key=lambda t: -t.i):
            if child.dep_ in NP_MODIFIERS and child.right_edge.i == start - 1:
                start = child.left_edge.i
        modified = any(t.dep_ in ("amod", "compound", "nummod", "poss", "nmod") for t in doc[start:token.i])
        # A possessive pronoun points back to another thing of the caption ("a man rides his horse"): moved,
        # it points elsewhere.
        if doc[start].tag_ != "PRP$" and _object_class(token, lexicon) is not None:
            yield token, (start, token.i + 1), modified


def _symmetric_phrases(doc, head_a, head_b, span_a, span_b) -> bool:
    """Exchanging the two whole phrases keeps the scene: a symmetric relation on the dependency path between
    their nouns ("an adult elephant walking with a baby elephant", "a tall monitor is near a keyboard"), or a
    list between the phrases ("a computer along with pictures and a lamp", "a laptop with keyboard, mouse").
    Unlike swap's single nouns, the phrases take their modifiers along, so a modifier does not tell them apart."""
    if _coordinated(head_a, head_b) or _symmetric_path(head_a, head_b):
        return True
    (_, end), (start, _) = sorted([span_a, span_b])
    return any(t.lower_ in LIST_WORDS for t in doc[end:start])


def _one_thing_or_its_kind(doc, lexicon, a, b) -> bool:
    """The two phrases (head, token range) name one thing twice ("a city bus with art on the side of the bus":
    one of them is "the" and its noun alone), one is named against the other ("one guy showing another guy"),
    or one names what the other is for ("a bird sitting on a bird feeder"): an exchange gives the same scene or
    nonsense."""
    def lemma(token):
        return _lemma(lexicon, token.lower_, token.tag_ == "NNS")

    for (head, (start, end)), (other, _) in ((a, b), (b, a)):
        if any(t.lower_ in RELATIVE_WORDS for t in doc[start:end]):
            return True  # "another guy", "the other animals": named against the first one, they cannot go first
        if end - start == 2 and doc[start].lower_ == "the" and lemma(head) == lemma(other):
            return True
        if any(t.i != head.i and lemma(t) == lemma(other) for t in doc[start:end]):
            return True
    return False


def negclip_candidates(doc, lexicon, swap_texts=frozenset()) -> list[Candidate]:
    caption, us = doc.text.strip(), units(doc)
    phrases = list(_noun_phrases(doc, lexicon))
    texts = []
    for i, (head_a, span_a, mod_a) in enumerate(phrases):
        for head_b, span_b, mod_b in phrases[i + 1:]:
            if not (mod_a or mod_b) or _object_class(head_a, lexicon) != _object_class(head_b, lexicon):
                continue
            if doc[span_a[0]:span_a[1]].text.lower() == doc[span_b[0]:span_b[1]].text.lower() or \
                    _one_thing_or_its_kind(doc, lexicon, (head_a, span_a), (head_b, span_b)):
                continue
            if head_a.tag_ != head_b.tag_ or not _related_in_text(head_a, head_b) or \
                    _symmetric_phrases(doc, head_a, head_b, span_a, span_b) or _owned(head_a, head_b, lexicon):
                continue
            texts.append(_swap_spans(us, span_a, span_b))
    return _candidates(NEGCLIP, caption, texts, lambda w: _lemma(lexicon, w, True), exclude=swap_texts)
