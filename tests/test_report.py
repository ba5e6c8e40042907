from pipeline.io.report import table_report


def test_reasons_that_tie_are_ordered_by_name_whatever_the_order_the_counts_came_in():
    letters = [("dead", "t", "f.json", "rejected", reason) for reason in ("b_reason", "a_reason", "c_reason")]
    counts = {("read", "t", "f.json"): 4, **{key: 1 for key in letters}}
    counts[("dead", "t", "f.json", "rejected", "c_reason")] = 2
    reversed_counts = dict(reversed(list(counts.items())))
    for c in (counts, reversed_counts):
        assert list(table_report("t", c, [])["reject_reasons"].items()) == [
            ("c_reason", 2), ("a_reason", 1), ("b_reason", 1)]
