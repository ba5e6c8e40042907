"""The train_negatives generators (replace, swap, negclip, ARO order, bi-gram shuffle) on hand-written captions.

spaCy and WordNet load once for the module. Every test asserts a property of the outputs (the words kept,
the span changed, what is never exchanged), over several seeds and several negatives per caption.
"""
import difflib
import gzip
import itertools
from collections import Counter

import pytest

from pipeline.perturb import neg_order, neg_replace, neg_swap, wordnet
from pipeline.perturb.candidates import record_rng, same_text
from pipeline.perturb.generators import NEGATIVE_TYPES, SPACY_MODELS, Generators, load_spacy
from pipeline.perturb.lexicon import NOUN
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
ARTICLE_CAPTIONS = ["an old man sitting on a bench", "An elephant standing near a large tree.",
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
}
OTHER = ["A woman talking on a cell phone in a kitchen.", "A cat sitting on top of a table next to a laptop.",
         "Man wearing a hat and a red shirt standing next to a large brown horse.",
         "A man holding a cell phone next to a cell tower.", "A white dog sitting next to a black cat.",
         "A train traveling down the tracks under a blue sky.", "A young boy throwing a frisbee in a park.",
         "A plate of food with broccoli and rice.", "Dogs chasing a ball near the old barn.",
         "A man riding a wave on top of a surfboard."]
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


@pytest.fixture(scope="module")
def outputs(gens, docs):
    """(caption, type) -> every (candidate, atom) over SEEDS, PER_CAPTION each."""
    found = {}
    for (caption, doc), negative_type in itertools.product(docs.items(), NEGATIVE_TYPES):
        found[caption, negative_type] = [
            pair for seed in SEEDS for pair in gens.generate(negative_type, doc, seed, f"id:{caption}", PER_CAPTION)]
    return found


@pytest.fixture(scope="module")
def swap_outputs(outputs, full_nlp):
    """(caption, type, parse) -> swap/negclip texts, from the generators' own parse and from the full one."""
    found = {(c, t, "own"): [cand.text for cand, _ in outputs[c, t]] for c in CAPTIONS for t in SWAP_TYPES}
    for caption, doc in zip(CAPTIONS, full_nlp.pipe(CAPTIONS), strict=True):
        for seed in SEEDS:
            found.setdefault((caption, "swap", "full"), []).extend(
                c.text for c in neg_swap.swap_negatives(doc, record_rng(seed, caption, "swap"), PER_CAPTION))
            found.setdefault((caption, "negclip", "full"), []).extend(
                c.text for c in neg_swap.negclip_negatives(doc, record_rng(seed, caption, "negclip"), PER_CAPTION))
    return found


def texts(outputs, negative_type, captions=CAPTIONS):
    return [(c, cand.text) for c in captions for cand, _ in outputs[c, negative_type]]


def non_equal_opcodes(a: str, b: str):
    return [op for op in difflib.SequenceMatcher(a=words(a), b=words(b), autojunk=False).get_opcodes()
            if op[0] != "equal"]


def articles_agree(text: str) -> bool:
    toks = [t.text for t in tokenize(text) if any(ch.isalnum() for ch in t.text)]
    return all(indefinite_article(nxt) == w.lower() for w, nxt in itertools.pairwise(toks) if w.lower() in ("a", "an"))


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
    assert len(without) <= 2, without


def test_replace_gives_distinct_negatives_per_call(gens, docs):
    for caption, doc in docs.items():
        got = [c.text for c, _ in gens.generate("replace", doc, 0, caption, PER_CAPTION)]
        assert len(got) == len(set(got)) <= PER_CAPTION


def test_replace_never_touches_misspelt_words(outputs):
    for caption, misspelt in MISSPELT.items():
        got = outputs[caption, "replace"]
        assert got, caption  # the correctly spelt words still give negatives
        for candidate, _ in got:
            assert not misspelt & set(words(candidate.changed_span)), candidate
            assert misspelt <= set(words(candidate.text))


def test_replace_keeps_plural_nouns_plural(outputs, gens):
    checked = 0
    for caption, plural in PLURAL_NOUNS.items():
        for candidate, atom in outputs[caption, "replace"]:
            if words(candidate.changed_span) != [plural]:
                continue
            checked += 1
            new = candidate.new_span.lower()
            assert atom == "object"
            # a plural of some WordNet noun other than itself ("men" is also a lemma, hence every base form)
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
    assert changed_article >= 2  # e.g. "an old man" -> "a young man", "An elephant" -> "A ..."


def test_replaced_prepositions_come_from_the_fixed_list(outputs):
    seen = Counter()
    for caption in CAPTIONS:
        for candidate, atom in outputs[caption, "replace"]:
            key = tuple(words(candidate.changed_span))
            if key in neg_replace.PREPOSITIONS:
                assert atom == "relation"
                assert candidate.new_span.lower() in neg_replace.PREPOSITIONS[key], candidate
                seen[key] += 1
    assert len(seen) >= 4, seen  # on, in, on top of, near, down, ...


def test_replace_uses_multiword_prepositions_whole(outputs):
    caption = "A cat sitting on top of a table next to a laptop."
    spans = {tuple(words(c.changed_span)) for c, atom in outputs[caption, "replace"] if atom == "relation"}
    assert spans & {("on", "top", "of"), ("next", "to")}, spans
    assert ("top",) not in spans and ("of",) not in spans and ("next",) not in spans


# --- swap and negclip ------------------------------------------------------------------------------------

@pytest.mark.parametrize("negative_type", SWAP_TYPES)
def test_swaps_keep_the_words_and_change_the_order(swap_outputs, negative_type):
    found = 0
    for (caption, t, _), outs in swap_outputs.items():
        if t != negative_type:
            continue
        for out in outs:
            found += 1
            assert sorted(words(out)) == sorted(words(caption)), (caption, out)
            assert words(out) != words(caption), (caption, out)
            assert not same_text(out, caption)
    assert found > len(CAPTIONS)


@pytest.mark.parametrize("negative_type", SWAP_TYPES)
def test_swaps_never_exchange_coordinated_conjuncts(swap_outputs, negative_type):
    for caption, forbidden in COORDINATED.items():
        for parse in ("own", "full"):
            outs = swap_outputs[caption, negative_type, parse]
            assert not set(forbidden) & set(outs), (caption, parse, outs)
            assert not any(same_text(o, f) for o in outs for f in forbidden)


def test_the_coordination_rule_is_not_vacuous(swap_outputs):
    """Captions with a coordination still give swaps of other pairs (the rule removes pairs, not captions)."""
    assert swap_outputs["A dog and a person on a beach.", "swap", "own"]
    assert swap_outputs["A black and white photo of a street.", "swap", "own"]
    assert swap_outputs["there is a man wearing glasses and holding a wine bottle", "negclip", "full"]


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


def test_no_swap_in_noun_phrases_with_nothing_to_exchange(swap_outputs):
    for caption in ("a red double decker bus", "black and white photo", "A dog and a person"):
        for t, parse in itertools.product(SWAP_TYPES, ("own", "full")):
            assert swap_outputs[caption, t, parse] == [], (caption, t, parse)


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


def test_swaps_keep_the_sentence_capital_first(swap_outputs):
    moved = 0
    for (caption, _, _), outs in swap_outputs.items():
        for out in outs:
            moved += check_sentence_capital(caption, out)
    assert moved >= 2  # "Man wearing a hat ..." -> "Hat wearing a man ..."


def test_negclip_fires_with_the_generators_own_parse(outputs):
    """load_spacy() runs no attribute_ruler (Token.pos_ is empty): the rules must work from the Penn tags."""
    with_negclip = [c for c in CAPTIONS if outputs[c, "negclip"]]
    assert len(with_negclip) >= len(CAPTIONS) // 2, with_negclip


def test_swap_exchanges_attributes_of_two_objects_with_the_generators_own_parse(outputs):
    got = [c.text for c, _ in outputs["A white dog sitting next to a black cat.", "swap"]]
    assert "A black dog sitting next to a white cat." in got


def test_swap_rules_on_a_full_parse_exchange_attributes_and_phrases(swap_outputs):
    assert "A black dog sitting next to a white cat." in swap_outputs["A white dog sitting next to a black cat.",
                                                                      "swap", "full"]
    negclip = swap_outputs["Man wearing a hat and a red shirt standing next to a large brown horse.", "negclip", "full"]
    # a noun phrase of 3+ tokens exchanged with another
    assert "Man wearing a hat and a large brown horse standing next to a red shirt." in negclip


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
        got = [c.text for c, _ in gens.generate(negative_type, doc, 0, caption, 3)]
        assert len(got) == len(set(got)) <= 3


def test_order_perturbation_returns_none_where_nothing_can_move(nlp):
    import random

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

def run_all(gens, docs_by_caption, seed):
    return {(c, t): [(cand, atom) for cand, atom in gens.generate(t, doc, seed, f"id:{c}", 3)]
            for c, doc in docs_by_caption.items() for t in NEGATIVE_TYPES}


def test_same_seed_and_example_id_give_the_same_negatives(gens, docs):
    first, again = run_all(gens, docs, 7), run_all(gens, docs, 7)
    assert first == again
    assert any(first[k] != v for k, v in run_all(gens, docs, 8).items())  # the seed is actually used
    shuffled = dict(reversed(list(docs.items())))
    assert run_all(gens, shuffled, 7) == first  # no state carried from one caption to the next


def test_batch_size_does_not_change_the_negatives(nlp, gens):
    one = dict(zip(CAPTIONS, nlp.pipe(CAPTIONS, batch_size=1), strict=True))
    many = dict(zip(CAPTIONS, nlp.pipe(CAPTIONS, batch_size=64), strict=True))
    assert run_all(gens, one, 3) == run_all(gens, many, 3)


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
