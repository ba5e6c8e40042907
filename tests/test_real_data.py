"""Acceptance on the real VL-CheckList annotations in ../shared/data (skipped where they are absent)."""
import pytest
from conftest import SHARED_DATA, eval_sets_args

from pipeline.checks.eval_sets import check_output
from pipeline.run import main

VL_REAL = SHARED_DATA / "vl_checklist"

pytestmark = pytest.mark.skipif(not (VL_REAL / "Relation/vg/spatial.json").exists(),
                                reason=f"real VL-CheckList data not found at {VL_REAL}")


def test_replace_on_the_real_vl_checklist(tmp_path):
    import json

    assert main(eval_sets_args(tmp_path, VL_REAL, None)) == 0
    t = json.loads((tmp_path / "report.json").read_text())["tables"]["replace"]
    assert 16_000 <= t["subsets"]["relation"] <= 16_900
    assert 10_400 <= t["subsets"]["attribute"] <= 11_300
    assert t["categories"]["attribute/material"] == 0
    assert t["rejected"] == 0 and t["balanced"]
    assert all(f["balanced"] for f in t["files"].values()) and len(t["files"]) == 7
    checked, problems = check_output(str(tmp_path), str(VL_REAL))
    assert problems == [] and checked["replace"] == t["rows"]
