"""The train_negatives generators (replace, swap, negclip, ARO order, bi-gram shuffle) on hand-written captions.

spaCy and WordNet load once for the module. Every test asserts a property of the outputs (the words kept,
the span changed, what is never exchanged), over several seeds and several negatives per caption. The rules
of issue 12 (vocabulary of the input captions, compounds, like with like, quantity heads, physically possible
relations, near-synonyms) each have a caption that breaks them under a naive rule.
"""
import difflib
import gzip
import itertools
import random

import pytest

from pipeline.perturb import neg_order, neg_replace, neg_swap, wordnet
from pipeline.perturb.candidates import same_text
from pipeline.perturb.corpus import CorpusCounts, photo_words
from pipeline.perturb.generators import NEGATIVE_TYPES, SPACY_MODELS, Generators, load_spacy
from pipeline.perturb.guards import conjunct_swaps, quantity_heads_moved
from pipeline.perturb.lexicon import NOUN
from pipeline.perturb.rank import NgramScorer
from pipeline.perturb.text import indefinite_article, tokenize, words

SEEDS = range(5)
PER_CAPTION = 5
ORDER_TYPES = (*neg_order.ARO_ORDER, neg_order.BIGRAM)
SWAP_TYPES = ("swap", "negclip")

NOUN_PHRASES = ["a red double decker bus", "Two slices of pizza on a white plate", "A bowl of fruit",
                "A dog and a person", "black and white photo", "A person and a dog."]
MISSPELT = {"A man riding a skatebaord down a stret": {"skatebaord", "stret"},
            "a dgo sittin on a bech": {"dgo", "sittin", "bech"}}
PLURAL_NOUNS = {"Two dogs playing in the grass.": "dogs", "Three women holding umbrellas in the rain.": "women",
                "Several knives on a cutting board next to a red apple.": "knives",
                "Two cats sleeping on a couch.": "cats"}
ARTICLE_CAPTIONS = ["an old car parked on a street", "An elephant standing near a large tree.",
                    "A man eating an apple in a park.", "an orange cat lying on a wooden table",
                    "A woman holding an umbrella on a street."]
# caption -> outputs no swap/negclip may give: coordinated conjuncts exchanged (the same meaning)
COORDINATED = {
    "A dog and a person on a beach.": ["A person and a dog on a beach."],
    "A dog and a person": ["A person and a dog"],
    "A person and a dog.": ["A dog and a person."],
    "A black and white photo of a street.": ["A white and black photo of a street."],
    "black and white photo": ["white and black photo"],
    "there is a man wearing glasses and holding a wine bottle":
        ["there is a man holding a wine bottle and wearing glasses"],
    "A white dog and a black cat sitting on a wooden bench.":
        ["A black cat and a white dog sitting on a wooden bench."],
    "Old and new airplane models handing inside a building.":
        ["New and old airplane models handing inside a building."],
}
OTHER = ["A woman talking on a cell phone in a kitchen.", "A cat sitting on top of a table next to a laptop.",
         "Man wearing a hat and a red shirt standing next to a large brown horse.",
         "A man holding a cell phone next to a cell tower.", "A white dog sitting next to a black cat.",
         "A train traveling down the tracks under a blue sky.", "A young boy throwing a frisbee in a park.",
         "A plate of food with broccoli and rice.", "Dogs chasing a ball near the old barn.",
         "A man riding a wave on top of a surfboard.", "A dog chasing a cat across a field.",
         "A group of zebras are crossing a stream.", "A person sprays the inside of a toilet.",
         "A fire hydrant is standing amid some grass.", "A boat floating on the ocean.",
         "A man standing on a bench.", "A woman holding a purple umbrella on a beach.",
         "A small dog chasing a big cat.", "A red car parked behind a blue truck.",
         "A stuffed bunny is holding a tooth brush.", "A little league player swinging a bat."]
CAPTIONS = list(dict.fromkeys([*NOUN_PHRASES, *MISSPELT, *PLURAL_NOUNS, *ARTICLE_CAPTIONS, *COORDINATED, *OTHER]))


@pytest.fixture(scope="module")
def nlp():
    return load_spacy(list(NEGATIVE_TYPES))


@pytest.fixture(scope="module")
def gens():
    return Generators.load(list(NEGATIVE_TYPES))


@pytest.fixture(scope="module")
def full_nlp():
    """spaCy with every component (attribute_ruler included): a second parse for the swap rules."""
    import spacy

    for name in SPACY_MODELS:
        try:
            return spacy.load(name)
        except OSError:
            continue
    pytest.skip("no spaCy English model")


@pytest.fixture(scope="module")
def docs(nlp):
    return dict(zip(CAPTIONS, nlp.pipe(CAPTIONS), strict=True))


def generate(gens, negative_type, doc, seed, example_id, n, corpus=None, scorer=None):
    """[(candidate, atom)] of one type for one caption, as the stage asks for them."""
    choices = gens.negatives([doc], [example_id], seed, n, corpus, scorer)[0][negative_type]
    return [(c.candidate, c.atom) for c in choices]


@pytest.fixture(scope="module")
def outputs(gens, docs):
    """(caption, type) -> every (candidate, atom) over SEEDS, PER_CAPTION each, drawn at random."""
    found = {}
    for (caption, doc), negative_type in itertools.product(docs.items(), NEGATIVE_TYPES):
        found[caption, negative_type] = [
            pair for seed in SEEDS for pair in generate(gens, negative_type, doc, seed, f"id:{caption}", PER_CAPTION)]
    return found


@pytest.fixture(scope="module")
def swap_outputs(outputs, full_nlp, gens):
    """(caption, type, parse) -> swap/negclip texts, from the generators' own parse and from the full one."""
    found = {(c, t, "own"): [cand.text for cand, _ in outputs[c, t]] for c in CAPTIONS for t in SWAP_TYPES}
    for caption, doc in zip(CAPTIONS, full_nlp.pipe(CAPTIONS), strict=True):
        proposed = gens.propose(doc)
        for t in SWAP_TYPES:
            found[caption, t, "full"] = [c.text for c, _ in proposed[t]]
    return found


def texts(outputs, negative_type, captions=CAPTIONS):
    return [(c, cand.text) for c in captions for cand, _ in outputs[c, negative_type]]


def non_equal_opcodes(a: str, b: str):
    return [op for op in difflib.SequenceMatcher(a=words(a), b=words(b), autojunk=False).get_opcodes()
            if op[0] != "equal"]


def articles_agree(text: str) -> bool:
    toks = [t.text for t in tokenize(text) if any(ch.isalnum() for ch in t.text)]
    return all(indefinite_article(nxt) == w.lower() for w, nxt in itertools.pairwise(toks) if w.lower() in ("a", "an"))


def corpus_of(captions):
    counts = CorpusCounts()
    for caption in captions:
        counts.add(caption)
    return counts.model()


# --- replace ---------------------------------------------------------------------------------------------

def test_replace_changes_one_contiguous_word_span_to_unrelated_words(outputs, gens):
    found = 0
    for caption in CAPTIONS:
        for candidate, atom in outputs[caption, "replace"]:
            found += 1
            out = candidate.text
            assert not same_text(out, caption), caption
            assert len(non_equal_opcodes(caption, out)) == 1, (caption, out)
            assert neg_replace.replaced_words_unrelated(gens.lexicon, candidate.changed_span, candidate.new_span), \
                (caption, out)
            assert caption[:candidate.span_start] + candidate.new_span + caption[candidate.span_end:] == out
            assert caption[candidate.span_start:candidate.span_end] == candidate.changed_span
            assert atom in ("object", "attribute", "relation")
    assert found > 3 * len(CAPTIONS)


def test_replace_finds_something_for_most_captions(outputs):
    without = [c for c in CAPTIONS if not outputs[c, "replace"]]
    assert len(without) <= 4, without


def test_replace_gives_distinct_negatives_per_call(gens, docs):
    for caption, doc in docs.items():
        got = [c.text for c, _ in generate(gens, "replace", doc, 0, caption, PER_CAPTION)]
        assert len(got) == len(set(got)) <= PER_CAPTION


def test_replace_never_touches_misspelt_words(outputs):
    for caption, misspelt in MISSPELT.items():
        for candidate, _ in outputs[caption, "replace"]:
            assert not misspelt & set(words(candidate.changed_span)), candidate
            assert misspelt <= set(words(candidate.text))
    assert outputs["A man riding a skatebaord down a stret", "replace"]  # "man" is spelt right


def test_replace_keeps_plural_nouns_plural(outputs, gens):
    checked = 0
    for caption, plural in PLURAL_NOUNS.items():
        for candidate, atom in outputs[caption, "replace"]:
            if words(candidate.changed_span) != [plural]:
                continue
            checked += 1
            new = candidate.new_span.lower()
            assert atom == "object"
            bases = [b for b in gens.lexicon.wn._morphy(new, NOUN) if b != new]
            assert new in {gens.inflector.plural(b) for b in bases}, (caption, candidate.text, bases)
    assert checked >= 3


def test_replace_fixes_a_and_an(outputs):
    changed_article = 0
    for caption in ARTICLE_CAPTIONS:
        assert articles_agree(caption)
        for candidate, _ in outputs[caption, "replace"]:
            assert articles_agree(candidate.text), (caption, candidate.text)
            before = [w for w in words(caption) if w in ("a", "an")]
            after = [w for w in words(candidate.text) if w in ("a", "an")]
            changed_article += before != after
    assert changed_article >= 2  # e.g. "an old car" -> "a new car", "An elephant" -> "A giraffe"


def test_replaced_prepositions_come_from_the_fixed_list(outputs):
    seen = set()
    for caption in CAPTIONS:
        for candidate, atom in outputs[caption, "replace"]:
            key = tuple(words(candidate.changed_span))
            if key in neg_replace.PREPOSITIONS:
                assert atom == "relation"
                assert candidate.new_span.lower() in neg_replace.PREPOSITIONS[key], candidate
                seen.add(key)
    assert len(seen) >= 4, seen  # on, in, on top of, near, next to, ...


def test_replace_uses_multiword_prepositions_whole(outputs):
    caption = "A cat sitting on top of a table next to a laptop."
    spans = {tuple(words(c.changed_span)) for c, atom in outputs[caption, "replace"] if atom == "relation"}
    assert spans & {("on", "top", "of"), ("next", "to")}, spans
    assert ("top",) not in spans and ("of",) not in spans and ("next",) not in spans


def test_replace_words_come_from_the_input_captions(gens, nlp):
    """With the corpus of the input captions, every new word is one the captions use (twice or more)."""
    captions = ["A dog sitting on a couch.", "A cat sitting on a couch.", "A cat on a bed.", "A dog on a bed.",
                "A man riding a horse.", "A woman riding a horse.", "A horse in a field."]
    corpus = corpus_of(captions)
    doc = nlp("A dog sitting on a bed.")
    found = generate(gens, "replace", doc, 0, "x", 40, corpus)
    assert found
    for candidate, _ in found:
        assert all(corpus.count(w) >= neg_replace.MIN_WORD_COUNT for w in words(candidate.new_span)), candidate
    # without the corpus, words the captions never use are offered too
    assert {c.new_span for c, _ in generate(gens, "replace", doc, 0, "x", 40)} - {c.new_span for c, _ in found}


def test_replace_keeps_both_halves_of_a_compound(gens, nlp):
    """"fire hydrant", "tooth brush", "little league": neither half is replaced into a pair no caption uses."""
    corpus = corpus_of(["a fire truck on a street", "a cat near a toilet", "a man with a tool",
                        "a large dog in a league"] * 2)
    for caption, compound in (("An orange fire hydrant on a street.", ("fire", "hydrant")),
                              ("A stuffed bunny is holding a tooth brush.", ("tooth", "brush")),
                              ("A little league player swinging a bat.", ("little", "league"))):
        for candidate, _ in generate(gens, "replace", nlp(caption), 0, "x", 40, corpus):
            w = words(candidate.text)
            pairs = set(zip(w, w[1:], strict=False))
            assert compound in pairs or corpus.bigram(*[p for p in pairs if compound[0] in p or compound[1] in p][0]), \
                (caption, candidate.text)
            assert "fire toilet" not in candidate.text and "tooth tool" not in candidate.text
            assert "large league" not in candidate.text


def test_replace_head_of_a_compound_only_into_a_compound_the_captions_use(gens, nlp):
    doc = nlp("A passenger train at a station.")
    with_bus = corpus_of(["a passenger bus on a road", "a passenger train"] * 2)
    without = corpus_of(["a bus on a road", "a passenger train"] * 2)
    assert "A passenger bus at a station." in {c.text for c, _ in generate(gens, "replace", doc, 0, "x", 40, with_bus)}
    assert "A passenger bus at a station." not in {c.text for c, _ in generate(gens, "replace", doc, 0, "x", 40,
                                                                                without)}


@pytest.mark.parametrize("caption,never", [
    ("A boat floating on the ocean.", ["under the ocean", "beneath the ocean"]),
    ("A man standing on a bench.", ["standing under a bench"]),
    ("A kite flying in the air.", ["beside the air", "outside the air"]),
    ("A woman talking on a cell phone in a kitchen.", ["under a cell phone", "beside a cell phone"]),
    ("People walking down the street.", ["up the street"]),
    # emitted before prepositions.json v3 (a blind reader failed each): up and down only on a slope, "in" of
    # a reflection or a picture kept, nothing beside a room, nothing without a quantity
    ("a couple of people guys walking down a long hall way", ["walking up"]),
    ("River down the middle of a city with many parked boats.", ["River up"]),
    ("Woman taking her picture in a mirror with her cell phone.", ["beside a mirror", "outside a mirror"]),
    ("A daybed in a sitting rooms with a fireplace.", ["beside a sitting", "outside a sitting"]),
    ("An open air market with a variety of foods for sale.", ["without a variety"]),
    ("A living room with a couple of furniture.", ["without a couple"]),
    ("A woman holding a wild animal in her arms", ["beside her arms"]),
    # emitted before prepositions.json v4: "in" of what is worn kept (WordNet clothing, skis, a wetsuit), no trick
    # and no wave beside anything
    ("The blonde woman in the red checked shirt is learning to use Wii Fit.", ["beside the red", "outside the red"]),
    ("A young boy in his pajamas is playing a video game.", ["beside his pajamas", "outside his pajamas"]),
    ("A surfer in a wetsuit sliding through the water.", ["beside a wetsuit", "outside a wetsuit"]),
    ("A skateboarder doing tricks on the rim of a pit", ["tricks beside", "tricks behind"]),
    ("A surfer is on top of an ocean wave.", ["beside an ocean wave"]),
])
def test_replace_changes_a_relation_only_where_it_is_possible(outputs, gens, nlp, caption, never):
    doc = nlp(caption)
    found = [c.text for seed in SEEDS for c, _ in generate(gens, "replace", doc, seed, "x", 40)]
    assert not [t for t in found for phrase in never if phrase in t], found


@pytest.mark.parametrize("caption,offered", [
    ("a couple skiers going down the snowy hill", "going up the snowy hill"),
    ("A man on a skateboard is coming up a ramp.", "coming down a ramp"),
    ("A large formal living room with stained glass windows.", "without stained glass windows"),
    ("A persons hand with a pair of scissors.", "without a pair of scissors"),
    ("A cat in a box.", "beside a box"),                    # "in" of what is not worn still changes
    ("A man standing on a skateboard.", "beside a skateboard"),
])
def test_replace_still_changes_a_relation_that_makes_another_scene(gens, nlp, caption, offered):
    found = [c.text for c, _ in generate(gens, "replace", nlp(caption), 0, "x", 40)]
    assert any(offered in t for t in found), found


@pytest.mark.parametrize("caption,word,never", [
    ("A woman holding a purple umbrella on a beach.", "umbrella", {"sunshade", "parasol"}),
    ("A woman holding a purple umbrella on a beach.", "beach", {"shore", "seashore", "coast"}),
    ("Boats in a harbor", "boats", {"ships", "vessels"}),
    ("A truck parked on a street.", "street", {"road", "roadway", "avenue"}),
])
def test_replace_never_offers_a_near_synonym(gens, nlp, caption, word, never):
    found = {c.new_span.lower() for c, _ in generate(gens, "replace", nlp(caption), 0, "x", 60)
             if c.changed_span.lower() == word}
    assert not found & never, found


READ_CORPUS = ["a group of sheep in a field", "a baby elephant and an adult elephant", "a red bus", "a yellow bus",
               "a black bus", "a white bus", "a large bathroom", "a small bathroom", "a cramped bathroom",
               "a man shaking hands with a woman", "a man and another man", "two beds in a room",
               "a table in a room", "a man performing a trick", "a male dog", "in mid air", "in early morning",
               "a man doing a flip", "a whiskey glass", "a giraffe", "an adult giraffe", "a cat near a sheep",
               "a man swinging a baseball bat", "a man dropping a baseball bat"] * 2


def replaced_with_read_corpus(gens, nlp, caption):
    return [c.text for c, _ in generate(gens, "replace", nlp(caption), 0, "x", 40, corpus_of(READ_CORPUS))]


@pytest.mark.parametrize("caption,bad", [
    # one thing named twice: the group and its member, or a later "the"
    ("A group of elephants, including a baby elephant, gather at a wildlife exhibit.", "group of sheep"),
    ("Three beds in a street with cartoon figures in the bed.", "in the table"),
    # a colour the same noun already has
    ("a red white and black bus some people and a building", "a black white and black bus"),
    # an adjective before another the captions never put it before
    ("A small cramped bathroom.", "large cramped"),
    # the object of an act verb is an act, whatever WordNet's rarer senses say
    ("A skateboard enthusiast performing a stunt in mid air.", "performing a male"),
    ("A man doing a flip on a skateboard.", "doing a whiskey"),
    ("A skateboard enthusiast performing a stunt in mid air.", "early air"),
    # one action means the other ("swinging a bat" is holding it): data/verbs.json "entailed"
    ("A man is holding a baseball bat.", "swinging"),
])
def test_replace_never_gives_what_the_blind_read_rejected(gens, nlp, caption, bad):
    """Each was an emitted negative (benchmarks/judged/negatives_reread.jsonl) before its rule."""
    found = replaced_with_read_corpus(gens, nlp, caption)
    assert not [t for t in found if bad in t], found


@pytest.mark.parametrize("caption,kept", [
    ("A man is shaking hands with another man.", "with another woman"),   # two things of one kind
    ("An adult elephant is pictured walking with a baby elephant.", "An adult giraffe"),
    ("A sheep stands near other sheep.", "A cat stands near other sheep"),
    ("A small bathroom.", "A large bathroom"),
    ("a red bus", "a yellow bus"),
    ("A man is holding a baseball bat.", "A man is dropping a baseball bat"),
])
def test_those_rules_leave_two_things_of_one_kind_and_plain_attributes(gens, nlp, caption, kept):
    found = replaced_with_read_corpus(gens, nlp, caption)
    assert [t for t in found if kept in t], found


BALL_CORPUS = ["a man hitting a ball", "a man catching a ball", "a man tossing a ball", "a man kicking a ball",
               "a man throwing a ball", "a man swinging a racket", "a woman holding a tennis racket",
               "a woman holding a game controller", "a player hits a ball", "a player throws a ball",
               "a player swings a bat", "a man hitting a tennis ball"] * 2


@pytest.mark.parametrize("caption,bad", [
    # emitted before verbs.json v3 "object_words"
    ("A person holding a tennis racket in their hand.", ("hitting", "catching", "tossing", "kicking", "throwing")),
    ("A woman holding a Nintendo Wii game controller in her hand.", ("hitting", "catching", "tossing", "kicking")),
    ("A pitcher throws a baseball to a batter.", ("swings",)),
    # the object of such a verb is not replaced by one it cannot take (a blind reader's failure of replace/6)
    ("A man on a court swinging a tennis racket.", ("swinging a tennis ball", "swinging a tennis frisbee")),
    # WordNet's first lemma of "swinging" is "swinge": the rule asks every lemma
    ("A boy is hitting a tennis ball on a tennis court.", ("swinging a tennis ball",)),
])
def test_replace_hits_throws_and_catches_only_a_ball_and_swings_only_a_bat(gens, nlp, caption, bad):
    found = [c.text for c, _ in generate(gens, "replace", nlp(caption), 0, "x", 40, corpus_of(BALL_CORPUS))]
    assert not [t for t in found for verb in bad if verb in t], found


def test_replace_still_exchanges_what_is_done_with_a_ball(gens, nlp):
    found = [c.text for c, _ in generate(gens, "replace", nlp("A little league baseball player hits a ball."), 0,
                                         "x", 40, corpus_of(BALL_CORPUS))]
    assert "A little league baseball player throws a ball." in found, found


def test_replace_fixes_the_article_across_a_double_space(gens, nlp):
    """spaCy gives the second space its own token; "a  busy" -> "a  idle" was emitted (the a_an check's one row)."""
    found = [c.text for c, _ in gens.propose(nlp("Bikers driving down a  busy street."),
                                            corpus_of(["a busy street", "an idle street"] * 2))["replace"]]
    assert "Bikers driving down an  idle street." in found, found
    assert not [t for t in found if "a  idle" in t]


def test_replace_never_repeats_an_adjective_of_the_same_list(gens, nlp):
    """"Old and new airplane models" parses "Old" as a subject; the new word is still never one beside it ("New
    and new airplane models" was emitted while the ranker tried tiers)."""
    corpus = corpus_of(["old and new models", "an old model", "a new model", "a small model", "a large model",
                        "models inside a building", "models outside a building"] * 2)
    found = [c.text for c, _ in gens.propose(nlp("Old and new models inside a building."), corpus)["replace"]]
    assert not [t for t in found if t.lower().startswith(("new and new", "old and old"))], found
    assert "Old and new models outside a building." in found, found


AGE_CORPUS = ["a young boy on a skateboard", "a young girl on a skateboard", "a young man on a skateboard",
              "a young woman on a skateboard", "an old man on a bench", "a boy on a bench", "a man on a bench",
              "a black and white photo of a chair", "a red and white photo", "a red and white chair",
              "sandwiches on a plate", "sandwiches on a tray", "sandwiches on a bowl"] * 2


@pytest.mark.parametrize("caption,bad,kept", [
    # with its age said, a person changes only its sex (a fifth blind reader: "young boy" / "young man")
    ("A young boy on a skateboard.", "young man", "young girl"),
    ("A young man on a skateboard.", "young boy", "young woman"),
    # "black and white" of a photo is no colour
    ("A chair in a black and white photo.", "red and white photo", "A bench in a black and white photo."),
    # plate and tray are read as the same thing (near_synonyms.json v2)
    ("Sandwiches on a plate.", "on a tray", "on a bowl"),
])
def test_replace_keeps_age_monochrome_and_plate_tray(gens, nlp, caption, bad, kept):
    found = [c.text for c, _ in gens.propose(nlp(caption), corpus_of(AGE_CORPUS))["replace"]]
    assert not [t for t in found if bad in t], found
    assert [t for t in found if kept in t], found


def test_an_age_word_elsewhere_leaves_people_their_usual_replacements(gens, nlp):
    found = [c.text for c, _ in gens.propose(nlp("A boy on a bench."), corpus_of(AGE_CORPUS))["replace"]]
    assert "A man on a bench." in found, found


def test_replace_never_names_what_another_caption_of_the_photo_names(gens, nlp):
    """"a tub and toilet" -> "a sink and toilet" is no negative where another annotator of the photo wrote
    "sink"; for another photo it is. Actions too ("standing" -> "sitting" where another says "sits")."""
    corpus, photos = CorpusCounts(), {}
    for caption, image in [("a tub and toilet in a small bathroom", 1), ("a bathroom with a sink and a tub", 1),
                           ("A dog standing on a boat.", 1), ("a dog sits on a boat", 1),
                           ("a sink in a bathroom", 3), ("a dog sitting on a couch", 3)] * 2:
        corpus.add(caption)
        photos.setdefault(image, set()).update(photo_words(caption, image)[1])
    corpus = corpus.model()
    named = {image: frozenset(words) for image, words in photos.items()}
    named[2] = None

    def made(caption, image):
        return [c.text for c, _ in gens.propose(nlp(caption), corpus, named[image])["replace"]]

    assert "a sink and toilet in a small bathroom" in made("a tub and toilet in a small bathroom", 2)
    assert "a sink and toilet in a small bathroom" not in made("a tub and toilet in a small bathroom", 1)
    assert "A dog sitting on a boat." in made("A dog standing on a boat.", 2)
    assert "A dog sitting on a boat." not in made("A dog standing on a boat.", 1)
    doc = nlp("a tub and toilet in a small bathroom")
    for image, sink in ((2, True), (1, False)):  # the stage's path: each record's photo words
        found = gens.negatives([doc], ["x"], 0, 40, corpus, None, [named[image]])[0]["replace"]
        assert bool([c for c in found if "sink" in c.candidate.text]) is sink


# --- swap and negclip ------------------------------------------------------------------------------------

@pytest.mark.parametrize("negative_type", SWAP_TYPES)
def test_swaps_keep_the_words_and_change_the_order(swap_outputs, gens, negative_type):
    found = 0
    lemma = lambda w: gens.lexicon.lemma(w, NOUN) or w  # noqa: E731  (an exchanged noun keeps its slot's number)
    for (caption, t, _), outs in swap_outputs.items():
        if t != negative_type:
            continue
        for out in outs:
            found += 1
            assert neg_swap.keeps_words(caption, out, lemma), (caption, out)
            assert words(out) != words(caption), (caption, out)
            assert not same_text(out, caption)
    assert found >= 8


@pytest.mark.parametrize("negative_type", SWAP_TYPES)
def test_swaps_never_exchange_coordinated_conjuncts(swap_outputs, negative_type):
    for caption, forbidden in COORDINATED.items():
        for parse in ("own", "full"):
            outs = swap_outputs[caption, negative_type, parse]
            assert not set(forbidden) & set(outs), (caption, parse, outs)
            assert not any(same_text(o, f) for o in outs for f in forbidden)
            assert not [o for o in outs if conjunct_swaps(caption, o)], (caption, outs)


def test_the_coordination_rule_is_not_vacuous(swap_outputs):
    """Captions with a coordination still give swaps of other pairs (the rule removes pairs, not captions)."""
    assert "A black dog and a white cat sitting on a wooden bench." in \
        swap_outputs["A white dog and a black cat sitting on a wooden bench.", "swap", "own"]


@pytest.mark.parametrize("negative_type", SWAP_TYPES)
def test_swaps_never_split_compounds(swap_outputs, docs, negative_type):
    compounds = {c: [(t.text.lower(), t.head.text.lower()) for t in doc if t.dep_ == "compound" and t.head.i == t.i + 1]
                 for c, doc in docs.items()}
    assert ("cell", "phone") in compounds["A woman talking on a cell phone in a kitchen."]
    for (caption, t, _), outs in swap_outputs.items():
        if t != negative_type:
            continue
        for out in outs:
            lowered = " ".join(words(out))
            for modifier, head in compounds[caption]:
                assert f"{head} {modifier}" not in lowered, (caption, out)
            assert "phone cell" not in lowered and "decker double" not in lowered
            assert "fire grass" not in lowered, (caption, out)


def test_no_swap_in_noun_phrases_with_nothing_to_exchange(swap_outputs):
    for caption in ("a red double decker bus", "black and white photo", "A dog and a person"):
        for t, parse in itertools.product(SWAP_TYPES, ("own", "full")):
            assert swap_outputs[caption, t, parse] == [], (caption, t, parse)


def test_swaps_exchange_like_with_like(swap_outputs):
    """A person never trades places with a thing, nor an animal with a place; a quantity head never moves."""
    for t, parse in itertools.product(SWAP_TYPES, ("own", "full")):
        assert swap_outputs["A person sprays the inside of a toilet.", t, parse] == []
        assert swap_outputs["A group of zebras are crossing a stream.", t, parse] == []
    for (caption, _, _), outs in swap_outputs.items():
        assert not [o for o in outs if quantity_heads_moved(caption, o)], (caption, outs)
    assert "A cat chasing a dog across a field." in swap_outputs["A dog chasing a cat across a field.", "swap", "own"]


def test_swap_exchanges_attributes_of_one_kind(swap_outputs):
    assert "A black dog sitting next to a white cat." in swap_outputs["A white dog sitting next to a black cat.",
                                                                      "swap", "own"]
    assert "A big dog chasing a small cat." in swap_outputs["A small dog chasing a big cat.", "swap", "own"]
    # a colour never trades places with a size
    outs = swap_outputs["Man wearing a hat and a red shirt standing next to a large brown horse.", "swap", "own"]
    assert not [o for o in outs if "large shirt" in o or "red brown" in o], outs


def test_negclip_exchanges_whole_phrases_and_never_what_swap_gives(swap_outputs, gens, docs):
    assert "A big cat chasing a small dog." in swap_outputs["A small dog chasing a big cat.", "negclip", "own"]
    assert "A blue truck parked behind a red car." in \
        swap_outputs["A red car parked behind a blue truck.", "negclip", "own"]
    for caption, doc in docs.items():
        proposed = gens.propose(doc)
        assert not {c.text for c, _ in proposed["swap"]} & {c.text for c, _ in proposed["negclip"]}, caption


def check_sentence_capital(caption: str, out: str):
    first, out_tokens = tokenize(caption)[0].text, [t.text for t in tokenize(out)]
    if not first[:1].isupper():
        return False
    assert out[:1].isupper(), (caption, out)
    if out_tokens[0].lower() == first.lower():
        return False
    # the caption's first word moved inside: lower-cased there, and no capital is left inside the sentence
    assert first not in out_tokens[1:], (caption, out)
    assert first.lower() in [t.lower() for t in out_tokens[1:]], (caption, out)
    return True


def test_swaps_keep_the_sentence_capital_first(swap_outputs, outputs):
    moved = 0
    for (caption, _, _), outs in swap_outputs.items():
        for out in outs:
            moved += check_sentence_capital(caption, out)
    for caption, out in texts(outputs, "shuffle_nouns_and_adj"):
        moved += check_sentence_capital(caption, out)
    assert moved >= 2


# --- ranking ---------------------------------------------------------------------------------------------

def test_the_ranker_emits_the_most_plausible_candidate(gens, nlp):
    captions = ["A dog chasing a cat in a park.", "A cat chasing a dog in a park.", "A dog in a park.",
                "A cat in a park.", "A horse beside a field.", "A bird in a field."] * 3
    corpus = corpus_of(captions)
    doc = nlp("A dog chasing a cat in a park.")
    ranked = gens.negatives([doc], ["x"], 0, 3, corpus, NgramScorer(corpus))[0]
    for negative_type in ("replace", "swap"):
        choices = ranked[negative_type]
        assert choices and [c.score for c in choices] == sorted(c.score for c in choices)
        assert all(c.candidates >= len(choices) for c in choices)
    assert ranked["swap"][0].candidate.text == "A cat chasing a dog in a park."
    # "none" keeps every valid candidate possible; the seed decides
    drawn = {generate(gens, "replace", doc, seed, "x", 1, corpus)[0][0].text for seed in range(12)}
    assert len(drawn) > 1


# --- ARO order and bi-gram shuffles ----------------------------------------------------------------------

@pytest.mark.parametrize("negative_type", ORDER_TYPES)
def test_order_perturbations_keep_words_punctuation_and_spacing(outputs, negative_type):
    found = 0
    for caption, out in texts(outputs, negative_type):
        found += 1
        assert not same_text(out, caption) and words(out) != words(caption), (caption, out)
        assert sorted(words(out)) == sorted(words(caption)), (caption, out)
        if caption.endswith("."):
            assert out.endswith(".") and out.count(".") == caption.count("."), (caption, out)
        assert " ." not in out and "  " not in out and out == out.strip(), (caption, out)
        check_sentence_capital(caption, out)
    assert found > len(CAPTIONS)


@pytest.mark.parametrize("negative_type", ORDER_TYPES)
def test_order_perturbations_are_distinct_per_call(gens, docs, negative_type):
    for caption, doc in docs.items():
        got = [c.text for c in gens.order(negative_type, doc, 0, caption, 3)]
        assert len(got) == len(set(got)) <= 3


def test_order_perturbation_returns_none_where_nothing_can_move(nlp):
    # no word but nouns and adjectives to shuffle except the single article
    doc = nlp("a red double decker bus")
    assert neg_order.order_perturbation("shuffle_allbut_nouns_and_adj", doc, random.Random(0)) is None
    one_word = nlp("Dog.")
    for name in ORDER_TYPES:
        assert neg_order.order_perturbation(name, one_word, random.Random(0)) is None, name
    # a noun phrase with a single noun and a single adjective cannot change under shuffle_nouns_and_adj
    assert neg_order.order_perturbation("shuffle_nouns_and_adj", nlp("a red bus"), random.Random(0)) is None


def test_order_generators_give_nothing_rather_than_the_caption(outputs):
    assert outputs["a red double decker bus", "shuffle_allbut_nouns_and_adj"] == []


# --- determinism -----------------------------------------------------------------------------------------

def run_all(gens, docs_by_caption, seed, corpus=None):
    scorer = NgramScorer(corpus) if corpus is not None else None
    items = list(docs_by_caption.items())
    found = gens.negatives([d for _, d in items], [f"id:{c}" for c, _ in items], seed, 3, corpus, scorer)
    return {(c, t): [(x.candidate, x.atom, x.score) for x in by_type[t]]
            for (c, _), by_type in zip(items, found, strict=True) for t in NEGATIVE_TYPES}


def test_same_seed_and_example_id_give_the_same_negatives(gens, docs):
    first, again = run_all(gens, docs, 7), run_all(gens, docs, 7)
    assert first == again
    assert any(first[k] != v for k, v in run_all(gens, docs, 8).items())  # the seed is actually used
    shuffled = dict(reversed(list(docs.items())))
    assert run_all(gens, shuffled, 7) == first  # no state carried from one caption to the next
    corpus = corpus_of(CAPTIONS)
    assert run_all(gens, docs, 7, corpus) == run_all(gens, shuffled, 7, corpus)


def test_batch_size_does_not_change_the_negatives(nlp, gens):
    one = dict(zip(CAPTIONS, nlp.pipe(CAPTIONS, batch_size=1), strict=True))
    many = dict(zip(CAPTIONS, nlp.pipe(CAPTIONS, batch_size=64), strict=True))
    corpus = corpus_of(CAPTIONS)
    assert run_all(gens, one, 3, corpus) == run_all(gens, many, 3, corpus)


# --- inflection and WordNet ------------------------------------------------------------------------------

# --- lexicon shortcuts ----------------------------------------------------------------------------------

def test_lemma_counts_sum_the_sense_keys_of_that_part_of_speech(gens):
    lexicon = gens.lexicon
    with lexicon.wn.open("cntlist.rev") as f:
        lines = [line.split() for line in f.read().splitlines() if line]
    dog_nouns = sum(int(n) for key, _, n in lines if key.startswith("dog%1:"))
    assert dog_nouns > 0 and lexicon.count("dog", NOUN) == dog_nouns
    # Adjective satellites (type 5) count as adjectives; verbs are apart.
    small = sum(int(n) for key, _, n in lines if key.split("%")[0] == "small" and key.split("%")[1][0] in "35")
    assert lexicon.count("small", "a") == small > 0
    assert lexicon.count("no_such_word", NOUN) == 0


class _Everything:
    def __contains__(self, item):
        return True


@pytest.mark.parametrize("lemma,pos", [("dog", "n"), ("table", "n"), ("elephant", "n"), ("pizza", "n"),
                                       ("ride", "v"), ("walk", "v"), ("eat", "v"), ("sit", "v")])
def test_common_synset_filter_never_changes_the_replacements(gens, lemma, pos):
    from pipeline.perturb.lexicon import Lexicon

    unfiltered = Lexicon(gens.lexicon.wn)
    unfiltered.common_synsets = _Everything()  # every sibling and cousin synset loaded, as without the filter
    expected = unfiltered.replacements(lemma, pos)
    assert expected, (lemma, pos)
    assert gens.lexicon.replacements(lemma, pos) == expected


def test_shared_synsets_are_the_ones_wordnet_names(gens):
    wn = gens.lexicon.wn
    pairs = [("beach", "shore"), ("couch", "sofa"), ("big", "large"), ("hold", "grasp"), ("men", "man"),
             ("dogs", "dog"), ("bat", "racket"), ("red", "blue"), ("sitting", "seated"), ("quickly", "fast")]
    for a, b in pairs:
        by_name = bool({s.name() for s in wn.synsets(a)} & {s.name() for s in wn.synsets(b)})
        assert gens.lexicon.shares_synset(a, b) == by_name, (a, b)
        assert len(gens.lexicon.synsets(a)) == len(wn.synsets(a)), a
    assert gens.lexicon.shares_synset("couch", "sofa") and not gens.lexicon.shares_synset("red", "blue")


def test_tokens_read_from_arrays_are_spacys_own(nlp):
    """Tokens.of reads every attribute from one array; each must be what spaCy's Token objects say, spaces,
    double spaces and a leading space included."""
    for doc in nlp.pipe([*CAPTIONS, " A  dog on a  bench. ", "", "Two dogs,  a cat"]):
        tokens, lead = neg_replace.Tokens.of(doc), len(doc.text) - len(doc.text.lstrip())
        assert tokens.texts == [t.text for t in doc] and tokens.spaces == [t.whitespace_ for t in doc]
        assert tokens.lower == [t.lower_ for t in doc] and tokens.tags == [t.tag_ for t in doc]
        assert tokens.deps == [t.dep_ for t in doc] and tokens.heads == [t.head.i for t in doc]
        assert tokens.alpha == [t.is_alpha for t in doc] and tokens.stop == [t.is_stop for t in doc]
        assert tokens.starts == [t.idx - lead for t in doc] and tokens.caption == doc.text.strip()
        assert tokens.dependents == [[c.i for c in t.children] for t in doc]
        assert all(tokens.children(t.i, ("det", "amod")) == [c.i for c in t.children if c.dep_ in ("det", "amod")]
                   for t in doc)


def test_multiword_entries_are_the_ones_wordnet_finds_synsets_for(gens):
    pairs = [("fire", "hydrant"), ("hot", "dogs"), ("little", "league"), ("open", "air"), ("high", "up"),
             ("close", "up"), ("living", "room"), ("attorneys", "general"), ("red", "car"), ("a", "dog"),
             ("dog", "sitting"), ("men", "s"), ("on", "top"), ("in", "front")]
    found = {p: gens.lexicon.is_multiword(p) for p in pairs}
    assert found == {p: bool(gens.lexicon.wn.synsets("_".join(p))) for p in pairs}
    assert found[("fire", "hydrant")] and found[("hot", "dogs")] and not found[("red", "car")]


@pytest.mark.parametrize("word,expected", [("knife", "knives"), ("woman", "women"), ("dog", "dogs"),
                                           ("box", "boxes"), ("city", "cities"), ("child", "children")])
def test_plural(gens, word, expected):
    assert gens.inflector.plural(word) == expected


@pytest.mark.parametrize("base,tag,expected", [("run", "VBG", "running"), ("eat", "VBN", "eaten"),
                                               ("carry", "VBZ", "carries"), ("ride", "VBG", "riding"),
                                               ("lie", "VBG", "lying"), ("sit", "VBD", "sat"),
                                               ("walk", "VBD", "walked"), ("hold", "VB", "hold")])
def test_verb_forms(gens, base, tag, expected):
    assert gens.inflector.verb(base, tag) == expected


debian = pytest.mark.skipif(not all((wordnet.DEBIAN_DIR / n).is_file() for n in wordnet.NEEDED),
                            reason="Debian WordNet files not installed")


def test_lexnames_has_the_45_lexicographer_files():
    lines = wordnet.lexnames_text().splitlines()
    assert len(lines) == 45
    numbers, names, pos = zip(*(line.split("\t") for line in lines), strict=True)
    assert list(numbers) == [f"{i:02d}" for i in range(45)]
    assert names[0] == "adj.all" and "noun.animal" in names and names[-1] == "adj.ppl"
    pos_numbers = {(n.split(".")[0], p) for n, p in zip(names, pos, strict=True)}
    assert pos_numbers == {("adj", "3"), ("adv", "4"), ("noun", "1"), ("verb", "2")}


@debian
def test_build_from_debian_lays_out_nltks_folder(tmp_path):
    target = wordnet.build_from_debian(tmp_path)
    assert target == tmp_path / "corpora" / "wordnet"
    assert sorted(p.name for p in target.iterdir()) == sorted([*wordnet.NEEDED, "lexnames"])
    for name in wordnet.NEEDED:
        assert (target / name).read_bytes() == (wordnet.DEBIAN_DIR / name).read_bytes(), name
    assert (target / "lexnames").read_text() == wordnet.lexnames_text()
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".wordnet-")]  # no staging left
    stamp = (target / "lexnames").stat().st_mtime_ns
    assert wordnet.build_from_debian(tmp_path) == target  # already there: left alone
    assert (target / "lexnames").stat().st_mtime_ns == stamp


def test_lexnames_without_a_usable_man_page_are_the_same(tmp_path):
    partial = tmp_path / "lexnames.5WN.gz"
    with gzip.open(partial, "wt") as f:
        f.write("00\tadj.all\tall adjective clusters\n")
    expected = wordnet.lexnames_text()
    assert wordnet.lexnames_text(partial) == expected
    assert wordnet.lexnames_text(tmp_path / "no_such.gz") == expected


def test_build_from_debian_names_what_is_missing(tmp_path):
    empty = tmp_path / "debian"
    empty.mkdir()
    (empty / "index.noun").write_text("")
    with pytest.raises(wordnet.WordNetMissing, match="apt-get install wordnet-base") as raised:
        wordnet.build_from_debian(tmp_path / "out", debian_dir=empty)
    assert "data.noun" in str(raised.value) and "index.noun," not in str(raised.value)
    assert not (tmp_path / "out" / "corpora" / "wordnet").exists()


def test_swap_moves_a_colour_to_an_object_without_one(gens, nlp):
    def swaps(caption):
        return [c.text for c, _ in gens.propose(nlp(caption))["swap"]]
    assert "A cat sitting on a white chair." in swaps("A white cat sitting on a chair.")
    assert "A horse standing next to a brown fence." in swaps("A brown horse standing next to a fence.")
    assert "a cat sitting next to a white dog" in swaps("a white cat sitting next to a dog")  # a coat colour
    assert "an orange cat sitting next to a chair" not in swaps("a cat sitting next to an orange chair")  # not a coat
    assert "A man in a shirt sitting on a red bench." in swaps("A man in a red shirt sitting on a bench.")
    moved = {
        "A man in a red shirt sitting on a bench.": ("red man",),  # never onto a person; ...
        "A man in red shirt sitting on a bench.": ("red bench",),  # ... nor off a noun left bare ("in shirt")
        "A small bird with a brown beak sitting on a fence.": ("brown bird",),  # a thing and its part, ...
        "A small bird with brown feathers sitting on a fence.": ("feather with",),  # ... never exchanged either
        "A white refrigerator in a kitchen.": ("white kitchen",),  # a room takes its colour from its walls
        "A light green bowl on a table.": ("green table", "light table"),  # a shade stays with its colour
        "A plate with a green pepper next to a cup.": ("green cup", "green plate"),  # a fixed name
        "An all white bathroom with a mirror and a sink.": ("white mirror", "white sink"),  # "all white" stays
        "A scone with an orange slice on a plate.": ("orange plate",),  # the fruit, not the colour
    }
    for caption, never in moved.items():
        outs = swaps(caption)
        assert not [o for o in outs for phrase in never if phrase in o.lower()], (caption, outs)


def test_a_colour_move_is_told_from_an_exchange():
    from pipeline.perturb.guards import moved_word
    assert moved_word("A white cat sitting on a chair.", "A cat sitting on a white chair.") == "white"
    assert moved_word("a chair near a white cat", "a white chair near a cat") == "white"
    assert moved_word("an orange cat on a mat", "a cat on an orange mat") == "orange"  # a/an count as one
    assert moved_word("A white dog and a black cat", "A black dog and a white cat") is None  # an exchange
    assert moved_word("a dog chasing a cat", "a dog chasing a cat") is None


def test_an_adjective_left_in_place_must_suit_the_noun_that_moves_in(gens, nlp):
    """The exchange leaves "open" where it stands: "an open lamp" only where the input captions say it."""
    caption = "An open laptop sitting on a desk beside a lamp."
    bad = "An open lamp sitting on a desk beside a laptop."
    base = ["An open laptop on a table.", "A lamp on a desk."]
    assert bad not in [c.text for c, _ in gens.propose(nlp(caption), corpus_of(base))["swap"]]
    with_it = [c.text for c, _ in gens.propose(nlp(caption), corpus_of([*base, "An open lamp on a table."]))["swap"]]
    assert bad in with_it, with_it  # the same exchange, once "open lamp" is attested
    # Two adjectives exchanged: each must suit its new noun ("a sliced car" never).
    caption = "A parked car next to a table with a sliced cake."
    base = ["A parked car.", "A sliced cake.", "A table."]
    bad = "A sliced car next to a table with a parked cake."
    assert bad not in [c.text for c, _ in gens.propose(nlp(caption), corpus_of(base))["swap"]]
    attested = corpus_of([*base, "A sliced car. A parked cake."])
    assert bad in [c.text for c, _ in gens.propose(nlp(caption), attested)["swap"]]


@pytest.mark.parametrize("caption,bad", [
    # a symmetric relation between the two nouns: the phrases move with their modifiers, the scene stays
    ("An adult elephant is pictured walking with a baby elephant.",
     "A baby elephant is pictured walking with an adult elephant."),
    ("A tall monitor is near a keyboard and a mouse.", "A keyboard is near a tall monitor and a mouse."),
    # items of one list
    ("This desk has a desk top computer along with pictures and a lamp",
     "This desk has a lamp along with pictures and a desk top computer"),
    # one thing named twice, or a thing and what another is for
    ("a city bus with some art on the side of the bus", "the bus with some art on the side of a city bus"),
    ("A bird that is sitting on a bird feeder.", "A bird feeder that is sitting on a bird."),
    # named against the first one: "another" cannot come first
    ("One guy is showing another guy the intricacies of the Wii.",
     "Another guy is showing one guy the intricacies of the Wii."),
    ("Two giraffes looking at the other animals in the enclosure.",
     "The other animals looking at two giraffes in the enclosure."),
])
def test_negclip_never_exchanges_phrases_that_keep_the_scene(gens, nlp, caption, bad):
    """Each of these was an emitted negclip row before its rule (benchmarks/judged/, read as invalid)."""
    assert bad not in [c.text for c, _ in gens.propose(nlp(caption))["negclip"]]


def test_negclip_still_exchanges_phrases_in_a_directed_relation(gens, nlp):
    for caption, good in [("A small dog looking at a larger dog.", "A larger dog looking at a small dog."),
                          ("An antelope walking out of the bushes towards a baby antelope.",
                           "A baby antelope walking out of the bushes towards an antelope.")]:
        assert good in [c.text for c, _ in gens.propose(nlp(caption))["negclip"]]


def relations_of(captions, nlp, gens):
    from pipeline.perturb.relations import RelationCounts, caption_keys

    counts = RelationCounts()
    for doc in nlp.pipe(captions):
        counts.add(caption_keys(doc, gens.lexicon))
    return counts.table()


def test_swap_exchanges_two_things_only_into_roles_the_captions_know(gens, nlp):
    """"a cat eating a bird" -> "a bird eating a cat" only where some caption has a bird eating and a cat
    eaten: each relation the exchange makes new (subject, object, the verb describing a noun, a preposition's
    object) must be one the input captions have."""
    caption = "A cat eating a bird on a branch."
    plain = ["a cat eating a bird", "a bird on a branch", "a cat on a branch", "a bird eating seeds",
             "a dog eating a bird"] * 2
    known = plain + ["a bird eating a worm", "a snake eating a cat", "a cat on a branch"] * 2
    exchanged = "A bird eating a cat on a branch."
    for captions, made in ((plain, False), (known, True)):
        corpus = corpus_of(captions)
        corpus.relations = relations_of(captions, nlp, gens)
        found = [c.text for c, _ in gens.propose(nlp(caption), corpus)["swap"]]
        assert (exchanged in found) is made, (made, found)
    corpus.relations = None  # relations not counted (swap not asked for in the first pass): no check
    assert exchanged in [c.text for c, _ in gens.propose(nlp(caption), corpus_of(plain))["swap"]]
