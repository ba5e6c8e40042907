"""The release checks catch what they promise to catch (and so can fail)."""
import shutil

import pyarrow.parquet as pq

from pipeline.checks.eval_sets import check_output, check_replace_row, check_swap_row, main


def replace_row(**changes):
    row = {"caption": "white clouds in blue sky", "hard_negative": "white clouds in green sky",
           "hard_positive": "white clouds in sapphire sky", "category": "color", "span_start": 16,
           "original_span": "blue", "positive_span": "sapphire", "replaced_to": "sapphire"}
    row.update(changes)
    return row


def test_replace_row_violations():
    assert check_replace_row(replace_row()) == []
    assert any("neither" in p for p in check_replace_row(replace_row(
        hard_positive="white clouds in covecrimson sky", positive_span="covecrimson")))
    assert any("2 spans" in p for p in check_replace_row(replace_row(hard_positive="ivory clouds in sapphire sky")))
    assert any("equals hard negative" in p for p in check_replace_row(replace_row(
        hard_positive="white clouds in green sky", positive_span="green", replaced_to="green")))
    assert any("equals caption" in p for p in check_replace_row(replace_row(
        hard_positive="white clouds in blue sky", positive_span="blue")))
    assert any("material" in p for p in check_replace_row(replace_row(category="material")))
    # an article is allowed only where the replacement needs it
    ok = replace_row(caption="a white sheep", hard_negative="a yellow sheep", hard_positive="an ivory sheep",
                     span_start=0, original_span="a white", positive_span="an ivory", replaced_to="ivory")
    assert check_replace_row(ok) == []
    assert check_replace_row({**ok, "hard_positive": "an ivory an sheep", "positive_span": "an ivory an"})


def swap_row(**changes):
    row = {"caption": "the crouched cat and the open door", "hard_negative": "the open cat and the crouched door",
           "hard_positive": "the open door and the crouched cat", "attributes": ["crouched", "open"],
           "objects": ["cat", "door"]}
    row.update(changes)
    return row


def test_swap_row_violations():
    assert check_swap_row(swap_row()) == []
    assert any("multiset" in p for p in check_swap_row(swap_row(hard_positive="the open door and the crouched dog")))
    assert any("equals hard negative" in p for p in check_swap_row(swap_row(
        hard_positive="the open cat and the crouched door")))
    assert any("order reversed" in p for p in check_swap_row(swap_row(
        hard_positive="the crouched door and the open cat")))
    assert any("does not read" in p for p in check_swap_row(swap_row(objects=["dog", "door"])))


def test_accounting_mismatch_is_found(sample_output, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_output, out)
    assert check_output(str(out))[1] == []
    (out / "discarded" / "swap-00000-of-00001.parquet").unlink()
    table = pq.read_table(out / "replace" / "test-00000-of-00001.parquet")
    pq.write_table(table.slice(1), out / "replace" / "test-00000-of-00001.parquet")
    problems = check_output(str(out))[1]
    assert any("swap visual_genome_attribution.json: 0 discarded on disk, report says 2" in p for p in problems)
    assert any(p.startswith("replace Attribute/vg/action.json: 4 rows on disk, report says 5") for p in problems)
    assert main([str(out)]) == 1


def test_captions_are_checked_against_the_source(sample_output, tmp_path):
    from conftest import VL_SAMPLE

    root = tmp_path / "vl"
    shutil.copytree(VL_SAMPLE, root)
    color = root / "Attribute/vg/color.json"
    original = color.read_text()
    # Another casing: the verbatim columns differ, the lower-cased captions still agree.
    color.write_text(original.replace("brown knob", "Brown knob"))
    assert check_output(str(sample_output), str(root))[1] == [
        "Attribute/vg/color.json:0: source captions differ from the source"]
    # Another word: both differ.
    color.write_text(original.replace("brown knob", "black knob"))
    assert check_output(str(sample_output), str(root))[1] == [
        "Attribute/vg/color.json:0: source captions differ from the source",
        "Attribute/vg/color.json:0: captions are not the source single-spaced in lower case"]
