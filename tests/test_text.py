from pipeline.perturb.text import has_surrogates, indefinite_article, match_case, printable, tokenize, words


def test_tokenize_keeps_offsets_and_inner_hyphens():
    tokens = tokenize("beer IN half-full glass, man's hat")
    assert [t.text for t in tokens] == ["beer", "IN", "half-full", "glass", ",", "man's", "hat"]
    assert all("beer IN half-full glass, man's hat"[t.start:t.end] == t.text for t in tokens)


def test_words_are_casefolded_and_ignore_spacing():
    assert words("  The  Cat ") == ["the", "cat"]


def test_match_case():
    assert match_case("IN", "within") == "WITHIN"
    assert match_case("ON TOP OF", "on") == "ON"
    assert match_case("Silver", "metallic") == "Metallic"
    assert match_case("white", "ivory") == "ivory"
    assert match_case("A", "an") == "An"  # one capital letter is a capitalised word, not all caps


def test_indefinite_article():
    for word, article in [("ivory", "an"), ("upright", "an"), ("unclouded", "an"), ("emerald", "an"),
                          ("big", "a"), ("useful", "a"), ("unicorn", "a"), ("hour", "an"), ("one", "a"),
                          ("unusual", "an"), ("utensil", "a")]:
        assert indefinite_article(word) == article, word


def test_surrogates():
    bad = b"caf\xe9 table".decode("utf-8", "surrogateescape")
    assert has_surrogates(bad) and not has_surrogates("café table")
    assert printable(bad) == "caf\\udce9 table"
