import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.io.dead_letters import dead_letter
from pipeline.io.parquet import WriteParquetTable, write_shard
from pipeline.io.schema import SchemaViolation, load_schema
from pipeline.perturb.outcomes import Reject
from pipeline.records import example_id


def swap_row(i):
    return {"example_id": example_id("aro_vga", f"f.json:{i}"), "source": "aro_vga", "source_file": "f.json",
            "source_index": i, "subset": "swap", "image_path": f"VG_100K/{i}.jpg", "image_id": i if i % 3 else None,
            "bbox_x": 1.0, "bbox_y": 2.0, "bbox_w": 3.0, "bbox_h": 4.5, "caption": f"the red car {i} and the blue bus",
            "hard_negative": "x", "hard_positive": "y", "attributes": ["red", "blue"], "objects": ["car", "bus"],
            "generator": "swap_phrases_v1"}


def write(rows, directory, rows_per_shard):
    schema = load_schema("swap_eval")
    with TestPipeline() as p:
        written = p | beam.Create(rows) | WriteParquetTable(str(directory), schema, rows_per_shard=rows_per_shard)
        assert_that(written | beam.Map(lambda path_n: path_n[1]) | beam.CombineGlobally(sum), equal_to([len(rows)]))
    return {f.name: f.read_bytes() for f in sorted(directory.iterdir())}


def test_same_rows_give_byte_identical_shards_in_any_order(tmp_path):
    rows = [swap_row(i) for i in range(50)]
    first = write(rows, tmp_path / "a", rows_per_shard=20)
    second = write(rows[::-1], tmp_path / "b", rows_per_shard=20)
    assert list(first) == [f"test-{i:05d}-of-00003.parquet" for i in range(3)]
    assert first == second
    read_back = [r for name in first for r in pq.read_table(tmp_path / "a" / name).to_pylist()]
    assert sorted(read_back, key=lambda r: r["source_index"]) == rows


def test_rows_are_sorted_inside_a_shard(tmp_path):
    write([swap_row(i) for i in (5, 3, 9, 1)], tmp_path, rows_per_shard=100)
    assert pq.read_table(tmp_path / "test-00000-of-00001.parquet").column("source_index").to_pylist() == [1, 3, 5, 9]


def test_empty_table_still_has_a_shard_with_the_schema(tmp_path):
    write([], tmp_path, rows_per_shard=10)
    table = pq.read_table(tmp_path / "test-00000-of-00001.parquet")
    assert table.num_rows == 0
    assert table.schema.equals(load_schema("swap_eval").arrow(), check_metadata=False)


def test_schema_check():
    schema = load_schema("swap_eval")
    schema.check_row(swap_row(1))
    for change, message in [({"bbox_x": "1"}, "bbox_x"), ({"attributes": "red"}, "attributes"),
                            ({"caption": None}, "caption is null"), ({"extra": 1}, "unexpected"),
                            ({"source_index": 2**63}, "source_index"), ({"bbox_w": float("nan")}, "bbox_w")]:
        with pytest.raises(SchemaViolation, match=message):
            schema.check_row({**swap_row(1), **change})
    row = swap_row(1)
    del row["generator"]
    with pytest.raises(SchemaViolation, match="missing column generator"):
        schema.check_row(row)


def test_dead_letters_keep_undecodable_bytes_readable():
    letter = dead_letter("eval_sets", "replace", "vl_checklist", "a.json", 4, Reject("invalid_utf8", "caf\udce9"),
                         ["x.jpg", {"POS": ["caf\udce9"]}])
    load_schema("dead_letters").check_row(letter)
    assert letter["record_key"] == "a.json:4" and letter["kind"] == "rejected"
    assert "\\udce9" in letter["record"] and letter["detail"] == "caf\\udce9"
    letter["record"].encode("utf-8")


def test_case16_dead_letters_of_one_record_sort_by_content_not_by_arrival(tmp_path):
    """One record can give several dead letters with the same sort key (hard_positives: one per prompt); after a
    cache resume they arrive in another order, and the shard must still be byte for byte the same."""
    schema = load_schema("dead_letters")
    letters = [dead_letter("hard_positives", "hard_positives", "coco", "captions.json", 901, Reject(reason, detail),
                           {"positive_type": kind})
               for kind, reason, detail in (("replace", "request_failed", "HTTP 503"),
                                            ("swap", "words_changed", "missing ['dog']"),
                                            ("replace_verb", "identical", "the caption itself"))]
    written = set()
    for order in (letters, letters[::-1], letters[1:] + letters[:1]):
        path = tmp_path / f"{len(written)}.parquet"
        write_shard(order, str(path), schema)
        written.add(path.read_bytes())
    assert len(written) == 1
