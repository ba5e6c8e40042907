"""The stage's Beam graph on small in-memory inputs (TestPipeline + assert_that)."""
import json

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import ARO_SAMPLE, VL_SAMPLE

from pipeline.io.report import SumCounts
from pipeline.options import HardposOptions
from pipeline.sources import aro, vl_checklist
from pipeline.stages import eval_sets


def vl_record(i, caption, negative, subset="attribute", category="color"):
    return vl_checklist.normalise(["VG_100K/1.jpg", {"POS": [caption], "NEG": [negative]}],
                                  f"{subset.title()}/vg/{category}.json", i, subset=subset, category=category)


def test_replace_rows_and_dead_letters():
    records = [vl_record(0, "brown knob", "teal knob"), vl_record(1, "purple flower", "yellow flower"),
               vl_record(2, "wooden bench", "metal bench", category="material")]
    with TestPipeline() as p:
        out = (p | beam.Create(records)
               | beam.ParDo(eval_sets.MakeReplaceRows(str(eval_sets.eval_replace.DEFAULT_TABLE)))
               .with_outputs("rejected", "discarded", main="rows"))
        assert_that(out.rows | beam.Map(lambda r: (r["source_index"], r["hard_positive"], r["replaced_from"])),
                    equal_to([(0, "chestnut knob", "brown")]), label="rows")
        assert_that(out.discarded | beam.Map(lambda d: (d["source_index"], d["kind"], d["reason"])),
                    equal_to([(1, "discarded", "changed_words_not_in_table"),
                              (2, "discarded", "category_has_no_replacements")]), label="discarded")
        assert_that(out.rejected, equal_to([]), label="rejected")


def test_swap_rows():
    raw = json.loads(ARO_SAMPLE.read_text())
    records = [aro.normalise(raw[i], "visual_genome_attribution.json", i) for i in (0, 25, 27)]
    with TestPipeline() as p:
        out = (p | beam.Create(records) | beam.ParDo(eval_sets.MakeSwapRows())
               .with_outputs("rejected", "discarded", main="rows"))
        assert_that(out.rows | beam.Map(lambda r: r["hard_positive"]),
                    equal_to(["the open door and the crouched cat"]), label="rows")
        assert_that(out.rejected | beam.Map(lambda d: d["reason"]), equal_to(["ambiguous_phrase_split"]),
                    label="rejected")
        assert_that(out.discarded | beam.Map(lambda d: d["reason"]), equal_to(["positive_equals_negative"]),
                    label="discarded")


def test_counts_add_up_per_file(tmp_path):
    """The whole stage graph: for every input file, read = rows + discarded + rejected in the counts."""
    opts = PipelineOptions([f"--output_dir={tmp_path}", f"--vl_checklist_root={VL_SAMPLE}",
                            f"--aro_vga={ARO_SAMPLE}"]).view_as(HardposOptions)

    def balance(counts):
        per_file = {}
        for key, n in counts.items():
            if key[0] in ("read", "rows", "dead"):
                sign = 1 if key[0] == "read" else -1
                per_file[(key[1], key[2])] = per_file.get((key[1], key[2]), 0) + sign * n
        return sorted((k, v) for k, v in per_file.items())

    with TestPipeline() as p:
        counts = eval_sets.build(p, opts) | beam.CombineGlobally(SumCounts())
        files = [("replace", f) for f in vl_checklist.FILES.values()] + [("swap", ARO_SAMPLE.name)]
        assert_that(counts | beam.Map(balance), equal_to([sorted((f, 0) for f in files)]))


def test_replace_rows_are_single_spaced_alike():
    """Issue 28 (6): VL-CheckList keeps double or leading spaces in some c and not in their c_n, a cue
    a model could use alone. c, c_n and c_p are single-spaced; the source columns keep the raw text; span_start
    indexes the replaced words in the single-spaced c."""
    from pipeline.checks.eval_sets import check_replace_row

    caption, negative = " ceiling  has Hanging  hanging lights ", "ceiling has talking hanging lights"
    fn = eval_sets.MakeReplaceRows(str(eval_sets.eval_replace.DEFAULT_TABLE))
    fn.setup()
    row = fn.make_row(vl_record(0, caption, negative, category="action"))
    assert (row["caption"], row["hard_positive"], row["hard_negative"]) == (
        "ceiling has hanging hanging lights", "ceiling has dangling hanging lights", negative)
    assert (row["source_caption"], row["source_negative"]) == (caption, negative)
    start, original = row["span_start"], row["original_span"]
    assert (start, original) == (12, "hanging")
    assert row["caption"][start:start + len(original)] == original
    assert row["hard_positive"][start:start + len(row["positive_span"])] == row["positive_span"] == "dangling"
    assert row["generator"] == "replace_table_v2"
    assert check_replace_row(row) == []
    # The check catches the cue: the row as the old code wrote it (c and c_p with the source's spacing).
    old = {**row, "caption": caption.lower(), "hard_positive": " ceiling  has dangling  hanging lights "}
    assert "caption, hard_positive not single-spaced (double, leading or trailing spaces)" in check_replace_row(old)


def test_swap_rows_are_single_spaced_alike():
    """c_p's phrases carry their spacing: the sample's "the tall  man" (c and c_n) stood at the end of c_p alone."""
    from pipeline.checks.eval_sets import check_swap_row

    raw = json.loads(ARO_SAMPLE.read_text())
    i = next(i for i, r in enumerate(raw)
             if isinstance(r, dict) and r.get("true_caption") == "the tall  man and the short woman")
    row = eval_sets.MakeSwapRows().make_row(aro.normalise(raw[i], "visual_genome_attribution.json", i))
    assert (row["caption"], row["hard_negative"], row["hard_positive"]) == (
        "the tall man and the short woman", "the short man and the tall woman", "the short woman and the tall man")
    assert row["generator"] == "swap_phrases_v2"
    assert check_swap_row(row) == []
    old = {**row, "caption": raw[i]["true_caption"], "hard_negative": raw[i]["false_caption"],
           "hard_positive": "the short woman and the tall  man"}
    assert "caption, hard_negative, hard_positive not single-spaced (double, leading or trailing spaces)" in \
        check_swap_row(old)
