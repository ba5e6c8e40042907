"""pipeline.checks.negatives catches each failure pattern of issue 12 (and so can fail), on hand-made rows."""
import pytest

from pipeline.checks.negatives import Context, check_row
from pipeline.perturb.corpus import CorpusCounts
from pipeline.perturb.guards import a_an_errors, conjunct_swaps, quantity_heads_moved


@pytest.fixture(scope="module")
def ctx():
    counts = CorpusCounts()
    for caption in ["a fire hydrant on a street", "a dog near a toilet", "a man in a park", "a boat on the ocean",
                    "a woman with an umbrella", "a sunny beach", "a red stop light at night", "a fire truck"]:
        counts.add(caption)
    return Context(counts.model())


def row(caption, negative, negative_type="replace"):
    start = 0
    while start < min(len(caption), len(negative)) and caption[start] == negative[start]:
        start += 1
    while start > 0 and caption[start - 1].isalnum():
        start -= 1
    end_c, end_n = len(caption), len(negative)
    while end_c > start and end_n > start and caption[end_c - 1] == negative[end_n - 1]:
        end_c, end_n = end_c - 1, end_n - 1
    while end_c < len(caption) and caption[end_c].isalnum():
        end_c, end_n = end_c + 1, end_n + 1
    return {"caption": caption, "hard_negative": negative, "negative_type": negative_type, "span_start": start,
            "span_end": end_c, "changed_span": caption[start:end_c], "new_span": negative[start:end_n]}


def names(problems):
    return {p.split(":", 1)[0] for p in problems}


def test_a_valid_replace_and_swap_pass(ctx):
    assert check_row(row("a dog near a toilet", "a man near a toilet"), ctx) == []
    assert check_row(row("a dog chasing a cat", "a cat chasing a dog", "swap"), ctx) == []


@pytest.mark.parametrize("caption,negative,check", [
    ("a red stop light at night", "a red stop light at scriptorium", "rare_word"),
    ("a fire hydrant on a street", "a fire toilet on a street", "broken_compound"),
    ("a sunny beach", "a sunny shore", "near_synonym"),
    ("a woman with an umbrella", "a woman with an sunshade", "a_an"),
    ("a boat on the ocean", "a boat under the ocean", "impossible_relation"),
    ("a man standing on a bench", "a man standing under a bench", "impossible_relation"),
    ("a dog near a toilet", "a dog near a can", "shares_synset"),  # WordNet: "can" is a toilet
    ("a dog near a toilet", "a cat near a sink", "replace_spans"),
])
def test_each_replace_failure_is_found(ctx, caption, negative, check):
    assert check in names(check_row(row(caption, negative), ctx)), check_row(row(caption, negative), ctx)


@pytest.mark.parametrize("caption,negative,negative_type,check", [
    ("A group of zebras are crossing a stream", "A stream of zebras are crossing a group", "swap",
     "quantity_head_moved"),
    ("Old and new airplane models", "New and old airplane models", "negclip", "conjunct_swap"),
    ("A grey and white cat", "A white and grey cat", "swap", "conjunct_swap"),
    ("A person sprays the inside of a toilet", "A toilet sprays the inside of a person", "swap", "unlike_exchange"),
    ("a dog chasing a cat", "a dog chasing a dog", "swap", "words_differ"),
    ("a dog chasing a cat", "A dog chasing a cat", "negclip", "equals_caption"),
    ("an old dog chasing a cat", "an dog chasing old a cat", "shuffle_trigrams", "a_an"),
])
def test_each_swap_failure_is_found(ctx, caption, negative, negative_type, check):
    assert check in names(check_row(row(caption, negative, negative_type), ctx))


def test_the_guards_themselves():
    assert a_an_errors("an apple", "an banana") == ["an banana"]
    assert a_an_errors("a apple", "a apple on a table") == []  # the caption's own error is not the negative's
    assert conjunct_swaps("a dog and a cat", "a cat and a dog") == []  # "a and a": nothing exchanged around it
    assert conjunct_swaps("black and white cat", "white and black cat") == ["black and white"]
    assert quantity_heads_moved("a plate of rice and a cup of tea", "a plate of tea and a cup of rice") == []
    assert quantity_heads_moved("a plate of food and a cup", "a cup of food and a plate") == ["plate"]
    assert quantity_heads_moved("a plate of food near a cup", "a cup near a plate of food") == []
    assert quantity_heads_moved("a group of zebras in a stream", "a stream of zebras in a group") == ["group"]


def test_the_output_check_counts_identical_swap_and_negclip(tmp_path, ctx):
    """A caption whose swap and negclip negatives are the same text is reported, with the count."""
    from pipeline.checks.negatives import check_output
    from pipeline.publish.layout import write_run_folder

    base = {"example_id": "e1", "caption_id": 1, "image_id": 1, "key": "1", "file_name": "1.jpg", "image_url": None,
            "source_file": "c.json", "caption": "a dog chasing a cat", "hard_negative": "a cat chasing a dog",
            "negative_index": 0, "atom": None, "changed_span": "dog chasing a cat", "new_span": "cat chasing a dog",
            "span_start": 2, "span_end": 19, "generator": "swap/2", "ranker": "ngram", "rank_score": 0.5,
            "candidates": 1, "seed": 0}
    rows = [{**base, "negative_type": "swap"}, {**base, "negative_type": "negclip", "generator": "negclip/2"}]
    out = write_run_folder(tmp_path, "train_negatives", rows)
    violations, figures = check_output(str(out), {"replace": 0.0}, ctx=ctx)
    assert figures["checks"]["swap_equals_negclip"] == 1
    assert any(v.startswith("swap_equals_negclip") for v in violations)


def test_a_swap_may_move_a_colour_and_nothing_else(ctx):
    assert names(check_row(row("A white cat sitting on a chair.", "A cat sitting on a white chair.", "swap"),
                           ctx)) == set()
    assert "moved_word" in names(check_row(row("A big dog on a mat.", "A dog on a big mat.", "swap"), ctx))
    # negclip exchanging "a young man" with "a man" reads as a move of "young": not swap's rule
    assert "moved_word" not in names(check_row(row("A young man watches a man.", "A man watches a young man.",
                                                   "negclip"), ctx))


def test_yield_targets_apply_to_full_size_runs_or_when_asked(tmp_path, capsys):
    """Two captions, one with a replace negative (yield 50%): the release's 95% means nothing on a cut."""
    import json

    from pipeline.checks.negatives import FULL_SIZE_CAPTIONS, main
    from pipeline.publish.layout import write_run_folder

    row = {"example_id": "e1", "caption_id": 1, "image_id": 1, "key": "1", "file_name": "1.jpg", "image_url": None,
           "source_file": "c.json", "caption": "a white dog on a bench", "hard_negative": "a black dog on a bench",
           "negative_index": 0, "atom": "attribute", "changed_span": "white", "new_span": "black", "span_start": 2,
           "span_end": 7, "generator": "replace/9", "ranker": "ngram", "rank_score": 0.5, "candidates": 1, "seed": 0,
           "negative_type": "replace"}
    out = write_run_folder(tmp_path, "train_negatives", [row])

    def with_read(n):
        report = json.loads((out / "report.json").read_text())
        report["tables"]["train_negatives"].update(read=n, negative_types={"replace": {}})
        (out / "report.json").write_text(json.dumps(report))

    with_read(2)
    assert main([str(out)]) == 0
    assert "release targets not applied (2 captions: not a full-size run" in capsys.readouterr().out
    assert main([str(out), "--yield_targets=release"]) == 1
    assert "VIOLATION replace yield 50.00% < 95%" in capsys.readouterr().out
    assert main([str(out), "--min_yield", "replace=0.4"]) == 0
    assert main([str(out), "--min_yield", "replace=0.6"]) == 1
    capsys.readouterr()
    with_read(FULL_SIZE_CAPTIONS)
    assert main([str(out)]) == 1
    assert "yield targets: replace >= 95%; release targets" in capsys.readouterr().out
    assert main([str(out), "--yield_targets=none"]) == 0
