import json

import pytest

from pipeline.perturb.outcomes import Reject
from pipeline.sources import aro, vl_checklist
from pipeline.sources.files import InputFileError, read_json_list, require_file


def vl(raw):
    return vl_checklist.normalise(raw, "Attribute/vg/color.json", 3, subset="attribute", category="color")


def vl_reason(raw):
    with pytest.raises(Reject) as info:
        vl(raw)
    return info.value.reason


def test_vl_checklist_record():
    record = vl(["VG_100K_2/2376832.jpg", {"POS": ["brown knob"], "NEG": ["teal knob"]}])
    assert record["caption"] == "brown knob" and record["hard_negative"] == "teal knob"
    assert record["image_id"] == 2376832 and record["source_index"] == 3
    assert record["example_id"] == vl(["other.jpg", {"POS": ["a"], "NEG": ["b"]}])["example_id"]  # key, not content
    assert len(record["example_id"]) == 16


@pytest.mark.parametrize("raw,reason", [
    ({"POS": ["a"], "NEG": ["b"]}, "not_a_pair"),
    (["x.jpg", {"POS": ["a"], "NEG": ["b"]}, "extra"], "not_a_pair"),
    ("x.jpg", "not_a_pair"),
    (["x.jpg"], "not_a_pair"),
    ([None, {"POS": ["a"], "NEG": ["b"]}], "bad_image_path"),
    (["x.jpg", ["a", "b"]], "bad_captions"),
    (["x.jpg", {"POS": ["a"]}], "bad_captions"),
    (["x.jpg", {"POS": ["a", "c"], "NEG": ["b"]}], "bad_captions"),
    (["x.jpg", {"POS": "a", "NEG": ["b"]}], "bad_captions"),
    (["x.jpg", {"POS": [""], "NEG": ["b"]}], "empty_caption"),
    (["x.jpg", {"POS": ["a"], "NEG": ["  "]}], "empty_caption"),
])
def test_vl_checklist_bad_records(raw, reason):
    assert vl_reason(raw) == reason


def test_non_utf8_bytes_fail_only_their_record(tmp_path):
    path = tmp_path / "color.json"
    path.write_bytes(b'[["a.jpg", {"POS": ["caf\xe9 table"], "NEG": ["red table"]}],\n'
                     b' ["b.jpg", {"POS": ["white table"], "NEG": ["red table"]}]]')
    bad, good = read_json_list(str(path))
    assert vl_reason(bad) == "invalid_utf8"
    assert vl(good)["caption"] == "white table"


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "color.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([["a.jpg", {"POS": ["x"], "NEG": ["y"]}]]).encode())
    assert len(read_json_list(str(path))) == 1


def test_file_level_errors_name_the_path(tmp_path):
    truncated = tmp_path / "spatial.json"
    truncated.write_text('[["a.jpg", {"POS": ["cat on mat"], "NEG": ["cat under mat"]}], ["b.jpg", {"POS": ["d')
    with pytest.raises(InputFileError, match=r"spatial\.json: not valid JSON .*truncated"):
        read_json_list(str(truncated))
    not_list = tmp_path / "obj.json"
    not_list.write_text('{"POS": []}')
    with pytest.raises(InputFileError, match="expected a JSON list"):
        read_json_list(str(not_list))
    with pytest.raises(InputFileError, match="no such file"):
        require_file(str(tmp_path / "missing.json"))
    with pytest.raises(InputFileError, match="no such directory"):
        vl_checklist.check_root(str(tmp_path / "nowhere"))
    with pytest.raises(InputFileError, match=r"Attribute/vg/action\.json: no such file"):
        vl_checklist.check_root(str(tmp_path))


def aro_record(**changes):
    raw = {"image_id": "2340001", "image_path": "VG_100K/2340001.jpg", "bbox_x": 1, "bbox_y": 2, "bbox_w": 3,
           "bbox_h": 4, "true_caption": "the crouched cat and the open door",
           "false_caption": "the open cat and the crouched door", "attributes": ["crouched", "open"]}
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not ...}


def test_aro_record():
    record = aro.normalise(aro_record(bbox_x="12.5", image_id=...), "visual_genome_attribution.json", 0)
    assert record["bbox_x"] == 12.5 and record["image_id"] == 2340001
    assert record["obj1_name"] is None
    assert aro.normalise(aro_record(obj1_name="cat", obj2_name="door"), "f.json", 0)["obj2_name"] == "door"


@pytest.mark.parametrize("changes,reason", [
    ({"bbox_h": ...}, "bad_bbox"),
    ({"bbox_w": 0}, "bad_bbox"),
    ({"bbox_x": "left"}, "bad_bbox"),
    ({"bbox_y": True}, "bad_bbox"),
    ({"attributes": ["crouched"]}, "bad_attributes"),
    ({"attributes": "crouched,open"}, "bad_attributes"),
    ({"attributes": ["crouched", " "]}, "bad_attributes"),
    ({"attributes": ["crouched", 7]}, "bad_attributes"),
    ({"attributes": ["caf\udce9", "open"]}, "invalid_utf8"),
    ({"true_caption": ""}, "empty_caption"),
    ({"false_caption": ...}, "bad_false_caption"),
    ({"image_path": ...}, "bad_image_path"),
    ({"true_caption": "the caf\udce9 and the door"}, "invalid_utf8"),
])
def test_aro_bad_records(changes, reason):
    with pytest.raises(Reject) as info:
        aro.normalise(aro_record(**changes), "f.json", 0)
    assert info.value.reason == reason


def test_aro_not_an_object():
    with pytest.raises(Reject) as info:
        aro.normalise(["a.jpg", "the cat"], "f.json", 0)
    assert info.value.reason == "not_an_object"
