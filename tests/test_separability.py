"""pipeline/checks/separability.py: the text-only classifier whose accuracy is the train table's shortcut figure."""
import random

from pipeline.checks.separability import (FOLDS, WordCounts, changed_bags, fold_of, separate, summary, tally,
                                          text_bags)

SEED = 3


def row(i, caption, positive, negative, image=None, positive_type="rule_replace", negative_type="replace"):
    return {"example_id": f"e{i}", "caption_id": i, "image_id": i if image is None else image, "caption": caption,
            "hard_positive": positive, "hard_negative": negative, "positive_type": positive_type,
            "negative_type": negative_type}


def accuracies(figures):
    return {name: figures[name]["accuracy"] for name in ("p_vs_n", "c_vs_p", "c_vs_n")}


def test_words_that_only_one_class_has_separate_every_pair():
    rows = [row(i, f"a dog number {i} on the grass", f"a dog number {i} on the lawn",
                f"a cat number {i} on the grass") for i in range(60)]
    figures = separate(rows, SEED)
    assert accuracies(figures) == {"p_vs_n": 1.0, "c_vs_p": 1.0, "c_vs_n": 1.0}
    assert figures["p_vs_n"]["pairs"] == 60 and figures["p_vs_n"]["ties"] == 0
    assert figures["p_vs_n"]["correct_halves"] == 120


def test_identical_texts_tie_and_score_half():
    rows = [row(i, f"two men {i} ride bikes", f"two men {i} ride bikes", f"two men {i} ride bikes")
            for i in range(30)]
    figures = separate(rows, SEED)
    assert accuracies(figures) == {"p_vs_n": 0.5, "c_vs_p": 0.5, "c_vs_n": 0.5}
    assert figures["c_vs_n"]["ties"] == 30


def test_the_same_words_in_another_order_tie():
    """A swap keeps the caption's bag of words: C vs N cannot tell them apart, however the sum is ordered."""
    rows = [row(i, f"a red cup and a blue plate {i}", f"a red mug and a blue plate {i}",
                f"a blue cup and a red plate {i}") for i in range(40)]
    figures = separate(rows, SEED)
    assert figures["c_vs_n"]["ties"] == 40 and figures["c_vs_n"]["accuracy"] == 0.5
    assert figures["c_vs_p"]["accuracy"] == 1.0


def test_the_rows_of_one_image_share_a_fold_and_images_spread_over_all_folds():
    folds = {image: {fold_of(SEED, row(i, "", "", "", image=image)) for i in range(image * 10, image * 10 + 5)}
             for image in range(50)}
    assert all(len(f) == 1 for f in folds.values())
    assert set().union(*folds.values()) == set(range(FOLDS))
    assert fold_of(SEED, {"image_id": None, "caption_id": 4, "example_id": "x"}) == \
        fold_of(SEED, {"image_id": None, "caption_id": 4, "example_id": "y"})  # the caption stands in
    assert len({fold_of(seed, row(0, "", "", "", image=7)) for seed in range(40)}) > 1  # the seed moves them


def test_a_row_is_never_scored_by_a_model_that_saw_its_image():
    """Five captions of one photo whose positives alone say "striped": scored out of fold the word is unknown (a
    tie); had the other captions of the photo been in the training folds, it would give the positive away."""
    rows = [row(i, f"a horse {i} in a field", f"a horse {i} in a meadow", f"a cow {i} in a field")
            for i in range(40)]
    photo = [row(100 + i, "a horse in a field", "a striped horse in a field", "a horse in a field", image=999)
             for i in range(5)]
    counts = WordCounts(SEED)
    for r in rows + photo:
        counts.add(r)
    model = counts.model()
    assert all(model.outcomes(r)["p_vs_n"] == "tie" for r in photo)
    # the same word on rows of other photos is learnt, and then does give the positive away
    spread = [{**r, "image_id": 1000 + i} for i, r in enumerate(photo)]
    counts = WordCounts(SEED)
    for r in rows + spread:
        counts.add(r)
    assert [counts.model().outcomes(r)["p_vs_n"] for r in spread].count("correct") >= 3


def random_rows(n, rng):
    words = "man woman dog cat red blue small large sits stands on under near table bench street".split()
    types = ["rule_replace", "rule_swap", "replace"]

    def text():
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 8)))

    return [row(i, text(), text() + " " + rng.choice(words[:4]), text(), image=rng.randrange(n // 3),
                positive_type=rng.choice(types), negative_type=rng.choice(["replace", "swap"])) for i in range(n)]


def test_shuffled_and_resharded_rows_give_identical_figures():
    rows = random_rows(300, random.Random(1))
    figures = separate(rows, SEED)
    assert 0.5 < figures["p_vs_n"]["accuracy"] < 1  # a figure with something to lose
    shuffled = rows[:]
    random.Random(2).shuffle(shuffled)
    assert separate(shuffled, SEED) == figures
    # counted in three shards merged in another order, scored in another order
    shards = [WordCounts(SEED) for _ in range(3)]
    for i, r in enumerate(shuffled):
        shards[i % 3].add(r)
    merged = shards[2].merge(shards[0]).merge(shards[1])
    counts = tally(merged.model(), rows[::-1])
    assert summary(dict(reversed(list(counts.items()))), SEED) == figures
    by_type = figures["p_vs_n"]["by_positive_type"]
    assert sum(f["pairs"] for f in by_type.values()) == 300 and set(by_type) == {"rule_replace", "rule_swap", "replace"}
    assert separate(rows, SEED + 1) != figures  # the seed is the folds'


def test_the_changed_words_view_scores_only_what_the_perturbation_changed():
    """Caption words a positive keeps are no evidence in the changed view: with every positive keeping a word
    that all negatives drop, the full texts separate and the changed words do not."""
    rows = [row(i, f"a photo of a {w} on a table", f"a photo of a {w} on a desk", f"a {w} on a desk")
            for i, w in enumerate(["cup", "vase", "book", "lamp", "plate", "phone"] * 8)]
    assert separate(rows, SEED)["p_vs_n"]["accuracy"] == 1.0
    changed = separate(rows, SEED, bags=changed_bags, names=["p_vs_n"])
    assert set(changed) == {"p_vs_n", "classifier"} and changed["p_vs_n"]["accuracy"] == 0.5
    assert changed_bags(rows[0]) == {"positive": text_bags(rows[0])["positive"] - text_bags(rows[0])["caption"],
                                     "negative": {"desk": 1}}
