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
