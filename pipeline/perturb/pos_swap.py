"""rule_swap hard positives: the two conjuncts of one "and" exchanged, each with what belongs to it (the paper's
SWAP positives, "the open door and the crouched cat" -> "the crouched cat and the open door", applied to any
caption): "a dog and a cat on a couch" -> "a cat and a dog on a couch", "a black and white cat" -> "a white and
black cat". The result keeps the scene for any photo.

A conjunct is a noun with its determiner, numbers, adjectives, compounds and possessive, and an "of" phrase
("a cup of coffee"); or an adjective with its adverbs. Nothing is exchanged where the exchange could change or
break the meaning or the English:
- coordinated verbs or clauses (order is time: "stands up and walks away"); only two nouns or two adjectives;
- a pronoun in either conjunct ("a man and his dog": the pronoun would come before what it refers to); names;
- a modifier or count that may be shared ("two men and women", "a man and woman", "several laptops and
  devices", "baseball uniforms and bats": it would move to one conjunct, or "a child and woman" reads
  unidiomatically); a relative item that must stay last ("and other gadgets"); a place noun ("in front and
  trees behind");
- a phrase after the second conjunct that may belong to it only ("a man and a woman in a red dress", "a train
  and some people on a platform", "with", "for"); a clause after two subjects stays in place ("a man and a
  woman sitting on a bench"), one after an object list ("riding a horse and a dog running") does not, and a
  place stays after two things of one kind ("a dog and a cat on a couch", "cheese and tomatoes in a box");
- a list whose binding is not known ("A and B and C", "computers on a desk and a work light", "a bowl of rice
  and chopsticks");
- fixed pairs whose reversal is not idiomatic ("back and forth", "fish and chips"), intensifiers ("nice and
  warm"), ordered words ("left and right"), "black and white" of a photo; identical conjuncts.
The rules that are not plain grammar come from blind reads of the output (benchmarks/rule_positives.py).
The texts are exchanged character for character, so spacing and punctuation stay where they were; the
sentence capital moves with the first word.
"""
from __future__ import annotations

from pipeline.perturb.candidates import Candidate, make_candidate
from pipeline.perturb.lexicon import COLOURS, kind_of
from pipeline.perturb.rule_data import positive_swaps, swap_rules
from pipeline.perturb.text import indefinite_article, match_case
from pipeline.perturb.units import sentence_cased

RULE_SWAP = "rule_swap"
NOUN_TAGS = frozenset({"NN", "NNS"})
NOUN_LEFT = frozenset({"det", "amod", "compound", "nummod", "poss", "nmod", "quantmod", "case", "advmod", "npadvmod"})
ADJ_LEFT = frozenset({"advmod", "npadvmod"})
PRONOUN_TAGS = frozenset({"PRP", "PRP$", "WP", "WP$", "EX"})
NAME_TAGS = frozenset({"NNP", "NNPS"})
CLAUSES = frozenset({"acl", "relcl"})
SUBJECTS = frozenset({"ROOT", "nsubj", "nsubjpass"})
# Things counted one by one: a singular one needs an article of its own to move ("window", "man"; not "rice").
COUNTED = frozenset({"noun.artifact", "noun.person", "noun.animal", "noun.object"})
# Heads of an "of" phrase that count what follows: the count may be of the first thing only ("a couple of ski
# poles and skis"); a container's contents are both things ("a plate of broccoli and rice").
QUANTITIES = frozenset({"couple", "pair", "pairs", "few", "number", "dozen", "dozens", "handful", "lot", "lots",
                        "several", "trio", "set", "sets"})
# Heads of an "of" phrase that want a plural right after them ("a group of motorbike" is not English).
COLLECTIVES = QUANTITIES | {"group", "groups", "herd", "flock", "crowd", "bunch", "row", "rows", "line", "pile",
                            "stack", "fleet", "team", "collection", "variety", "assortment", "array", "cluster",
                            "swarm"}
# WordNet files that name one kind of thing in a caption ("broccoli" is a plant there, "rice" a food).
KINDS = {"noun.plant": "noun.food"}
QUANTIFIERS = frozenset({"several", "many", "few", "numerous", "multiple", "various", "other", "lots", "plenty"})
SHARABLE = frozenset({"det", "amod", "nummod", "poss", "quantmod", "advmod", "npadvmod", "predet"})
# Nouns that frame a photo ("a picture of a car parked and ..."): the list is inside their "of" phrase.
FRAMES = frozenset({"picture", "photo", "photograph", "image", "view", "shot", "closeup", "close", "snapshot"})
# Nouns of a place relative to something ("water in front and trees behind"): not things to list.
RELATIONAL = frozenset({"front", "back", "top", "side", "bottom", "middle", "left", "right", "rear", "foreground",
                        "background", "center", "centre", "edge", "end", "inside", "outside"})
# Clauses that say what one person wears or carries, not what both do.
OWN_CLAUSES = frozenset({"wearing", "dressed", "holding", "carrying", "wielding", "clutching", "sporting"})
# Words that place their phrase after the others ("keyboard and other gadgets"): it must stay last.
RELATIVE = frozenset({"other", "others", "another", "more", "rest", "else", "additional", "various", "assorted",
                      "etc", "one", "ones"})  # "a very colorful one": it refers back to the other
# Heads after which a single thing with "a" reads oddly ("a kitchen filled with a window and appliances").
CONTAINERS = frozenset({"filled", "full", "covered", "topped", "loaded", "packed", "stuffed", "crowded", "lined",
                        "piled", "stacked"})


def swap_positives(doc, lexicon) -> list[Candidate]:
    """Every valid exchange of the two sides of one "and" in the caption, in caption order."""
    caption = doc.text
    found = []
    for cc in doc:
        if cc.lower_ != "and" or cc.dep_ != "cc":
            continue
        spans = _conjunct_spans(cc, lexicon)
        if spans is None:
            continue
        candidate = make_candidate(RULE_SWAP, caption, _exchanged(doc, *spans))
        if candidate is not None and candidate.text not in {c.text for c in found}:
            found.append(candidate)
    return found


def _exchanged(doc, a: tuple[int, int], b: tuple[int, int]) -> str:
    """The caption with token ranges a and b exchanged, character for character (each place keeps its spacing
    and punctuation), the sentence capital moved with the first word."""
    text = doc.text
    (a0, a1), (b0, b1) = ((doc[s].idx, doc[e - 1].idx + len(doc[e - 1])) for s, e in (a, b))
    first, second = text[a0:a1], text[b0:b1]
    if a0 == 0 and sentence_cased(doc[0].text):
        first, second = first[:1].lower() + first[1:], second[:1].upper() + second[1:]
    before = text[:a0]
    if a[0] > 0 and doc[a[0] - 1].lower_ in ("a", "an"):  # "an orange and white cat" -> "a white and orange cat"
        article = doc[a[0] - 1]
        before = text[:article.idx] + match_case(article.text, indefinite_article(second)) + \
            text[article.idx + len(article):a0]
    return before + second + text[a1:b0] + first + text[b1:]


def _conjunct_spans(cc, lexicon) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Token ranges [start, end) of the two conjuncts that `cc` joins, or None where they must not move."""
    first = cc.head
    conjuncts = [c for c in first.children if c.dep_ == "conj"]
    ccs = [c for c in first.children if c.dep_ == "cc"]
    if len(conjuncts) != 1 or len(ccs) != 1 or conjuncts[0].i < cc.i or first.i > cc.i:
        return None
    second = conjuncts[0]
    if any(c.dep_ in ("cc", "conj") for c in second.children):
        return None
    if first.dep_ == "conj" and any(c.dep_ == "cc" for c in first.head.children):
        return None  # "white cabinets and appliances and yellow walls": which "and" binds closer is not known
    nouns = first.tag_ in NOUN_TAGS and second.tag_ in NOUN_TAGS
    adjectives = first.tag_ == "JJ" and second.tag_ == "JJ" and all(_adjective(t, lexicon) for t in (first, second))
    if not (nouns or adjectives) or first.lower_ == second.lower_ or _fixed(first, second, adjectives):
        return None
    if nouns and (_modifies_noun(first) or {first.lower_, second.lower_} & (FRAMES | RELATIONAL)
                  or _gerund(first, lexicon) or _gerund(second, lexicon)
                  or _elided(first, second, lexicon) or _verb_like(second, lexicon)
                  or _person_after_thing(first, second, lexicon) or _unlike_subjects(first, second, lexicon)):
        return None
    left = NOUN_LEFT if nouns else ADJ_LEFT
    a = _phrase(first, left, nouns, before=cc.i)
    b = _phrase(second, left, nouns)
    if a is None or b is None:
        return None
    (a_start, a_end), (b_start, b_end) = a, b
    if [t.lower_ for t in cc.doc[a_end:b_start] if t.lower_ != "," and not t.is_space] != ["and"]:
        return None
    tokens = (*cc.doc[a_start:a_end], *cc.doc[b_start:b_end])
    if any(t.dep_ == "compound" and t.tag_ == "NNS" for t in tokens):
        return None  # "carrots broccoli and rice": a list missing its comma, not a compound
    if adjectives and _after_noun_list(cc.doc, a_start):
        return None  # "a papaya, orange and bruised banana": "orange" is the second fruit
    if adjectives and _after_adjective(cc.doc, a_start, first, second):
        return None  # "a grassy plain and blue sky": "plain" is the place the parser read as an adjective
    if nouns and first.dep_ not in SUBJECTS and _verb_after(cc.doc, b_end):
        return None  # "playing tennis and others watching her": the second starts a clause of its own
    if nouns and first.dep_ == "pobj" and first.head.lower_ not in ("of", "with"):
        return None  # "stools next to a bar and a blue table": the list may be the place's or the sentence's
    if nouns and a_start > 0 and cc.doc[a_start - 1].tag_ in ("VBN", "VBD") and \
            not _determined(cc.doc, b_start, second.i):
        return None  # "has broken wood and pipes", "has fried eggs and hash browns": the participle may be both's
    if any(t.tag_ in PRONOUN_TAGS or t.tag_ in NAME_TAGS or t.tag_ == "VBG" or t.lower_ in RELATIVE for t in tokens):
        return None
    if _fixed_inside(tokens[:a_end - a_start], tokens[a_end - a_start:], first, second):
        return None
    if nouns and not _one_level(cc.doc, first, second, (a_start, a_end), (b_start, b_end), lexicon):
        return None
    if _may_share_a_modifier(cc.doc, a_start, first.i, second) or \
            not _trailing_is_shared(first, second, b_end, nouns, lexicon):
        return None
    return (a_start, a_end), (b_start, b_end)


def _adjective(token, lexicon) -> bool:
    """An adjective to WordNet or a colour ("a tub and large sink": the parser's "tub" is not one)."""
    return lexicon.lemma(token.lower_, "a") is not None or token.lower_ in COLOURS


def _after_noun_list(doc, start: int) -> bool:
    """The phrase follows a comma after something other than an adjective: it continues a list of things."""
    return start >= 2 and doc[start - 1].text == "," and doc[start - 2].tag_ not in ("JJ", "RB")


def _after_adjective(doc, start: int, first, second) -> bool:
    """The first adjective follows another one with no comma between: it may be a noun the parser read as an
    adjective ("a grassy plain and blue sky"); two colours stay exchangeable ("a shiny black and white cat")."""
    return start >= 1 and doc[start - 1].tag_ == "JJ" and not (first.lower_ in COLOURS and second.lower_ in COLOURS)


def _verb_after(doc, end: int) -> bool:
    """A verb right after the second conjunct: that conjunct is the subject of what follows, not a thing listed
    beside the first."""
    return end < len(doc) and doc[end].tag_.startswith("VB")


def _gerund(token, lexicon) -> bool:
    """"working in the kitchen and cooking": a verb's -ing form tagged as a noun."""
    return token.lower_.endswith("ing") and lexicon.lemma(token.lower_, "v") not in (None, token.lower_)


def _modifies_noun(token) -> bool:
    """"a cane and shopping bag", "computer and tea kettle": the nouns modify a noun after them."""
    return token.dep_ in ("compound", "nmod", "amod") or (token.head.i > token.i and token.head.tag_ in NOUN_TAGS)


def _fixed_inside(a_tokens, b_tokens, first, second) -> bool:
    """A fixed pair across the two conjuncts other than their heads (_fixed judges those): "peanut butter and
    jelly sandwiches"."""
    pairs = positive_swaps().fixed_pairs
    return any(frozenset((x.lower_, y.lower_)) in pairs for x in a_tokens for y in b_tokens
               if (x.i, y.i) != (first.i, second.i))


def _has_of(noun) -> bool:
    return any(c.dep_ == "prep" and c.lower_ == "of" for c in noun.rights)


def _bare_alike_before_place(doc, first, second, a, b_determined: bool, after, lexicon) -> bool:
    """"a pizza with cheese and tomatoes in a box", "a plate of broccoli and rice on a table": two bare things of
    one kind, then a place: the place is the whole phrase's (not "a bed and a TV on top of a dresser", "traffic
    and men on bikes")."""
    return after.tag_ == "IN" and after.lower_ in positive_swaps().shared_prepositions and \
        not _determined(doc, a[0], first.i) and not b_determined and _alike(first, second, lexicon)


def _determined(doc, start: int, head: int) -> bool:
    return any(t.tag_ in ("DT", "CD", "PDT", "PRP$") or t.lower_ in QUANTIFIERS for t in doc[start:head])


def _one_level(doc, first, second, a: tuple[int, int], b: tuple[int, int], lexicon) -> bool:
    """The two phrases are one list, not the end of one phrase and the start of another, and neither reads worse
    once moved. Each clause below names the caption (most from a blind reader's failure) it keeps unchanged."""
    for (start, end), head in zip((a, b), (first, second), strict=True):
        if any(t.tag_ in ("DT", "PDT") for t in doc[start + 1:head.i]):
            return False
    b_determined = _determined(doc, b[0], second.i)
    if _has_of(first) != _has_of(second):
        return False  # "a still life of fruit and an old man": the list may be inside the "of" phrase
    if first.dep_ == "pobj":
        if first.head.lower_ == "of" and (_determined(doc, a[0], first.i) or b_determined):
            return False
        owner = first.head.head
        if first.head.lower_ in positive_swaps().shared_prepositions and \
                owner.tag_ in NOUN_TAGS | {"NNP", "NNPS"} and b_determined:
            return False
    if first.tag_ != second.tag_ and any(t.dep_ == "expl" for t in doc):
        return False
    after = doc[b[1]] if b[1] < len(doc) else None
    if after is not None and after.tag_ in ("NN", "NNS"):
        return False  # "a sink, dishwasher and microwave oven": the second noun modifies the next one
    if first.dep_ == "pobj" and after is not None and after.tag_ in ("IN", "TO", "VBG", "VBN", "RB", "JJ") and \
            not _bare_alike_before_place(doc, first, second, a, b_determined, after, lexicon):
        return False  # "holes in the wall and dirt on the bed": each phrase has its own place, a list above
    if first.dep_ == "pobj" and first.head.head.lower_ in CONTAINERS and \
            any(t.lower_ in ("a", "an") for t in doc[b[0]:second.i]):
        return False  # "filled with appliances and a window" -> "filled with a window"
    if first.dep_ == "pobj" and first.head.lower_ == "of" and first.head.head.lower_ in COLLECTIVES and \
            first.tag_ != second.tag_:
        return False  # "a group of cars and motorbike" -> "a group of motorbike"
    if _determined(doc, a[0], first.i) and not b_determined:
        return False  # "several laptops and electronic devices": "several" may count both
    if not list(second.lefts) and any(c.dep_ in ("compound", "amod", "nmod") for c in first.lefts):
        return False  # "baseball uniforms and bats": "baseball" may say what both are
    if first.dep_ == "pobj" and (first.head.lower_ in ("like", "as") or (
            first.head.lower_ == "of" and first.head.head.lower_ in QUANTITIES)):
        return False  # "looks like worms and some greens", "a couple of ski poles and skis"
    if first.dep_ == "pobj" and first.head.lower_ == "of" and first.head.head.lower_ in swap_rules().quantity_heads \
            and not _alike(first, second, lexicon):
        return False  # "a bowl of rice and chopsticks": the chopsticks are beside the bowl, not in it
    for head, start in ((first, a[0]), (second, b[0])):
        other_start, other = (b[0], second) if head is first else (a[0], first)
        if head.tag_ == "NN" and not _determined(doc, start, head.i) and _determined(doc, other_start, other.i):
            return False  # "a toilet and pedestal sink" -> "pedestal sink and a toilet"
        if head.tag_ == "NN" and not _determined(doc, start, head.i) and kind_of(head, lexicon) in COUNTED:
            return False  # "a counter, window, stove and cutlery": the bare "stove" leans on the list's "a"
    return True


def _unlike_subjects(first, second, lexicon) -> bool:
    """Two subjects of one verb that are neither both living nor of one kind ("a baseball game and the catcher
    just threw the ball"): the parser joined what a comma-less caption meant as two clauses."""
    if first.dep_ not in ("nsubj", "nsubjpass"):
        return False
    kinds = (kind_of(first, lexicon), kind_of(second, lexicon))
    living = {"noun.person", "noun.animal"}
    return not (set(kinds) <= living or kinds[0] == kinds[1])


def _person_after_thing(first, second, lexicon) -> bool:
    """"two men in hats and women": a person after a thing inside a phrase is a second person, not a list."""
    return first.dep_ == "pobj" and kind_of(second, lexicon) == "noun.person" and \
        kind_of(first, lexicon) != "noun.person"


def _elided(first, second, lexicon) -> bool:
    """"an adult and a juvenile zebra": the first noun is an adjective too and stands for "adult zebra"."""
    described = any(c.dep_ in ("amod", "compound") for c in second.lefts)
    return described and lexicon.lemma(first.lower_, "a") is not None and not any(
        c.dep_ in ("amod", "compound") for c in first.lefts)


def _verb_like(second, lexicon) -> bool:
    """"a man and a dog paddle on a surfboard": a bare verb form parsed as a noun after a noun compound."""
    return second.tag_ == "NN" and any(c.dep_ == "compound" for c in second.lefts) and \
        lexicon.lemma(second.lower_, "v") == second.lower_ and second.i + 1 < len(second.doc) and \
        second.doc[second.i + 1].tag_ in ("IN", "RP", "DT")


def _fixed(first, second, adjectives: bool) -> bool:
    rules = positive_swaps()
    pair = frozenset((_base(first), _base(second)))
    if first.lower_ in rules.intensifiers and adjectives:
        return True
    if adjectives and (first.lower_ in rules.ordinals or second.lower_ in rules.ordinals):
        return True
    if pair in rules.monochrome_only:
        noun = first.head if first.dep_ in ("amod", "compound") else None
        return noun is None or noun.lower_ in rules.monochrome_nouns or \
            (noun.lower_.endswith("s") and noun.lower_[:-1] in rules.monochrome_nouns)
    return pair in rules.fixed_pairs


def _base(token) -> str:
    """The head word, with a compound before it where the fixed pairs list the two ("hot dog")."""
    compounds = [c.lower_ for c in token.lefts if c.dep_ == "compound"]
    joined = f"{compounds[-1]} {token.lower_}" if compounds else ""
    return joined if joined in positive_swaps().fixed_words else token.lower_


def _phrase(head, left_deps: frozenset[str], noun: bool, before: int | None = None) -> tuple[int, int] | None:
    """[start, end) of the head's conjunct: its left modifiers (each of left_deps, contiguous up to the head) and,
    for a noun, an "of" phrase right after it. None where another left modifier is in the way, or where the
    first conjunct (the one ending `before` "and") has a phrase of its own after it ("a dog with a ball and")."""
    start = head.i
    for child in reversed(list(head.lefts)):
        if child.dep_ == "preconj":  # "both": stays in place
            continue
        if child.dep_ not in left_deps or child.right_edge.i != start - 1:
            return None
        start = child.left_edge.i
    end = head.i + 1
    for child in head.rights:
        if child.dep_ in ("cc", "conj", "punct") or child.is_space or (before is not None and child.i >= before):
            continue
        if noun and child.dep_ == "prep" and child.lower_ == "of" and child.i == end and _plain_of(child):
            end = child.right_edge.i + 1
        elif before is not None:
            return None
        else:
            break  # what follows the second conjunct: _trailing_is_shared decides
    return start, end


def _plain_of(of) -> bool:
    """An "of" phrase that is only a noun phrase ("of pasta salad"), not one with a place or a clause of its own
    ("of pasta salad on a table" may say where the whole list is)."""
    return all(t.dep_ not in ("prep", "acl", "relcl", "advcl", "conj", "cc") or t.i == of.i or t.lower_ == "of"
               for t in of.subtree)


def _may_share_a_modifier(doc, a_start: int, a_head: int, second) -> bool:
    """The second conjunct has no determiner, number or adjective of its own and the first has one, which may
    be both's ("two men and women", "a black dog and cat", "a man and woman"): moving it with the first, or
    leaving it in place, changes what it describes or reads unidiomatically ("a child and woman")."""
    if any(c.dep_ in SHARABLE for c in second.lefts):
        return False
    return any(t.dep_ in SHARABLE or t.head.i != a_head for t in doc[a_start:a_head])


def _trailing_is_shared(first, second, b_end: int, nouns: bool, lexicon) -> bool:
    """What follows the second conjunct and hangs from either conjunct stays in place: allowed only where it is
    read as said of both: a clause after two subjects ("a man and a woman sitting on a bench"), a place after
    two subjects of one kind ("a dog and a cat on a couch"). A place after two different kinds of thing may be
    the last one's only (two blind readers failed "a train and some people on a platform" -> "some people and
    a train on a platform")."""
    trailing = [c for c in list(second.rights) + list(first.rights)
                if c.i >= b_end and c.dep_ not in ("punct", "cc", "conj") and not c.is_space]
    if not trailing:
        return True
    if not nouns:
        return False
    rules = positive_swaps()
    if any(t.tag_ in ("PRP", "PRP$") and t.lower_ not in ("each", "other") for c in trailing for t in c.subtree):
        return False  # "a flock of goats and some men watching them": the pronoun points at one of the two
    for child in trailing:
        if child.dep_ in CLAUSES:
            if first.dep_ not in SUBJECTS or not _participle_or_relative(child):
                return False
        elif child.dep_ == "prep":
            if first.dep_ not in SUBJECTS or (child.head.i == second.i and not _alike(first, second, lexicon)):
                return False  # "a train and some people on a platform": the place may be the last one's only
            if child.lower_ not in rules.shared_prepositions:
                return False
            objects = [c for c in child.children if c.dep_ == "pobj"]
            if any(_worn(lexicon, o.lower_) for o in objects):
                return False
        else:
            return False
    return True


def _alike(first, second, lexicon) -> bool:
    """Two different things of one kind (WordNet lexicographer file: two animals, two people, two vehicles, two
    foods...), so that a place said after the second, or a container before the first, is read as both's ("a dog
    and a cat on a couch", "a plate of broccoli and rice"); not one noun twice
    ("some parked airplanes and one airplane in the sky": the place tells the second apart)."""
    kind = _kind(first, lexicon)
    return kind is not None and kind == _kind(second, lexicon) and \
        lexicon.noun_lemma(first.lower_, first.tag_ == "NNS") != lexicon.noun_lemma(second.lower_, second.tag_ == "NNS")


def _kind(token, lexicon) -> str | None:
    """The token's kind for _alike: its WordNet file, with plants as food and drinks apart from food ("bowls of
    food and beer": beer is not in bowls)."""
    word = lexicon.noun_lemma(token.lower_, token.tag_ == "NNS") or token.lower_
    if "beverage.n.01" in lexicon.hypernym_names(word):
        return "drink"
    kind = kind_of(token, lexicon)
    return KINDS.get(kind, kind)


def _participle_or_relative(clause) -> bool:
    """"sitting on a bench", "that are parked": a clause said of a noun phrase, not a sentence the parser hung
    from the last noun ("a baseball game and the catcher just threw the ball"); and not what one of the two
    wears or carries ("a bride and a man wearing a suit": the suit is his), nor a singular verb ("a mouse and a
    keyboard that is sitting on a table")."""
    if clause.lower_ in OWN_CLAUSES or any(t.tag_ == "VBZ" or t.lower_ in ("is", "was") for t in clause.subtree):
        return False  # "a mouse and a keyboard that is sitting on a table": the singular says which one
    return clause.tag_ in ("VBG", "VBN") or any(c.tag_ in ("WDT", "WP") or c.lower_ == "that"
                                                 for c in clause.children)


def _worn(lexicon, word: str) -> bool:
    return bool(lexicon.hypernym_names(word) & positive_swaps().worn)
