"""Stage train_set: every COCO caption joined with one hard positive and one hard negative.

Read from the hard_positives and train_negatives tables on disk (in --stage=all, the ones the chain just
staged), as their folder's report.json records them: only tables made from the same captions file (its sha256),
seed and input bounds are joined, and a shard is read only once it has the sha256 recorded for it (a changed one
fails the run, naming it). The positive is the first of --positive_types the caption has, the
negative the first of --negative_types (its negative 0). A caption with neither, or only one, is a discarded
dead letter with the reason, so read = rows + discarded + rejected holds per captions file.

The rows written are scored for the shortcut they offer (pipeline/checks/separability.py): how often a text-only
bag-of-words model picks the positive out of (positive, negative), and each out of its caption; the report's
"separability" section.
"""
from __future__ import annotations

import functools

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipeline.checks import separability
from pipeline.io import spill
from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.io.outputs import WriteTableOutputs
from pipeline.io.parquet import VERIFY_PAGES
from pipeline.io.recorded import RecordedTable, read_recorded, recorded_table
from pipeline.io.report import REPORT_FILE, table_report
from pipeline.io.schema import load_schema
from pipeline.options import HardposOptions, UsageError
from pipeline.perturb.outcomes import Discard
from pipeline.records import CAPTION_FIELDS
from pipeline.sources import corpus
from pipeline.sources.files import InputBounds, input_record
from pipeline.stages import hard_positives, llm_negatives, train_negatives
from pipeline.tables.folders import PublishError

STAGE = "train_set"
TABLE = "train"


def _choose(rows: list[dict], type_field: str, order: list[str]) -> dict | None:
    ranked = [r for r in rows if r[type_field] in order]
    if not ranked:
        return None
    return min(ranked, key=lambda r: (order.index(r[type_field]), r.get("negative_index", 0)))


JOINED = ("caption", "positive", "negative")
JOINED_COUNTS = "joined_counts"


def join_balance(counts: dict) -> dict:
    """{side: {"sent", "received"}} for the join's three inputs. A runner that loses elements in its shuffle
    (Beam's multi-process DirectRunner did at 591,753 captions) makes them differ: the per-table accounting alone
    would see the lost positives only as more no_hard_positive discards."""
    return {side: {"sent": counts.get(("join_sent", TABLE, side), 0),
                   "received": counts.get(("join_received", TABLE, side), 0)} for side in JOINED}


class _Join(beam.DoFn):
    def __init__(self, positive_order: list[str], negative_order: list[str], seed: int):
        self.positive_order, self.negative_order, self.seed = positive_order, negative_order, seed

    def process(self, item):
        _, grouped = item
        for side in JOINED:  # what reached the join, against what was sent to it (join_balance)
            yield beam.pvalue.TaggedOutput(JOINED_COUNTS, (("join_received", TABLE, side), len(list(grouped[side]))))
        for record in grouped["caption"]:
            positive = _choose(list(grouped["positive"]), "positive_type", self.positive_order)
            negative = _choose(list(grouped["negative"]), "negative_type", self.negative_order)
            if positive is None or negative is None:
                reason = ("no_hard_positive_or_negative" if positive is None and negative is None
                          else "no_hard_positive" if positive is None else "no_hard_negative")
                yield beam.pvalue.TaggedOutput(DISCARDED, dead_letter(
                    STAGE, TABLE, record["source"], record["source_file"], record["source_index"],
                    Discard(reason, f"positive types {self.positive_order}, negative types {self.negative_order}"),
                    record))
                continue
            yield {
                **{k: record[k] for k in CAPTION_FIELDS},
                "hard_positive": positive["hard_positive"],
                "positive_type": positive["positive_type"],
                "hard_negative": negative["hard_negative"],
                "negative_type": negative["negative_type"],
                "positive_generator": positive.get("generator"),
                "positive_model": positive.get("model"),
                "positive_prompt_sha256": positive.get("prompt_sha256"),
                # An LLM negative (llm_negatives) names its model where a rule-based one names its generator.
                "negative_generator": negative.get("generator") or f"{negative['negative_type']}/{negative['model']}",
                "seed": negative.get("seed", self.seed),
            }


class _CountWords(beam.CombineFn):
    """Train rows -> the separability classifier's fold models (word counts per fold and class)."""

    def __init__(self, seed: int):
        self.seed = seed

    def create_accumulator(self):
        return separability.WordCounts(self.seed)

    def add_input(self, counts, row):
        return counts.add(row)

    def merge_accumulators(self, accumulators):
        return functools.reduce(separability.WordCounts.merge, accumulators)

    def extract_output(self, counts):
        return counts.model()


SEPARABILITY = "separability"


def _separability_counts(row: dict, model: separability.SeparabilityModel):
    for name, outcome in model.outcomes(row).items():
        yield (SEPARABILITY, TABLE, name, row["positive_type"], row["negative_type"], outcome), 1


class Separability(beam.PTransform):
    """Written train rows -> (("separability", table, comparison, positive_type, negative_type, outcome), 1):
    a first pass counts the words of every row (a global combine), the fold models it makes go to a second
    pass as a side input, and that pass scores each row with the model that did not train on its fold."""

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed

    def expand(self, rows):
        model = rows | "CountWords" >> beam.CombineGlobally(_CountWords(self.seed))
        # the scoring pass waits on the model: a spilling run reads the rows back from files meanwhile
        rows = spill.unspill(spill.spill(rows, "SeparabilityRows"), "SeparabilityRows", beam.pvalue.AsSingleton(model))
        return rows | "ScorePairs" >> beam.FlatMap(_separability_counts, beam.pvalue.AsSingleton(model))


def separability_section(counts: dict, seed: int) -> dict:
    """The report's separability figures from the stage's count keys."""
    cells = {key[2:]: n for key, n in counts.items() if key[0] == SEPARABILITY and key[1] == TABLE}
    return separability.summary(cells, seed)


def tables(opts: HardposOptions) -> list[str]:
    return [TABLE]


def check_inputs(opts: HardposOptions) -> None:
    """Before any work: the flags and the captions files. The tables it joins are checked by build(), once the run
    holds the folder's lock and has finished a commit cut short there (pipeline/run.py)."""
    from pipeline.stages.captions import check_captions

    check_captions(opts)  # the captions the other tables were made from
    hard_positives.positive_types(opts)
    train_negatives.negative_types(opts)


def _stage_of(table: str) -> str:
    return "train_negatives" if table == llm_negatives.TABLE else table


def _joined_tables(opts: HardposOptions) -> dict[str, RecordedTable]:
    """The tables the join reads, as their folders' report.json record them, each made from this run's captions
    file with its seed and input bounds: UsageError (one line) naming what differs otherwise. The join key is
    the caption id, so a table made from other captions would pair a caption with another one's rewrites."""
    own = input_record({"coco_captions": opts.coco_captions} if opts.coco_captions else {}, opts)
    found = {}
    for flag, folder, table in _inputs(opts):
        folder = folder or opts.output_dir
        try:
            recorded = recorded_table(folder, table)
        except PublishError as e:
            raise UsageError(str(e)) from None
        if recorded is None:
            raise UsageError(f"no {table} table recorded in {FileSystems.join(folder, REPORT_FILE)}: run "
                             f"--stage={_stage_of(table)} first or set {flag}")
        _check_made_from(table, recorded, own, opts)
        found[table] = recorded
    return found


def _check_made_from(table: str, recorded: RecordedTable, own: dict, opts: HardposOptions) -> None:
    made = recorded.section.get("made_from")
    where = f"table {table} of {recorded.report_path}"
    if not made:
        raise UsageError(f"{where} records no sha256 of its inputs (made before hardpos recorded them): run "
                         f"--stage={_stage_of(table)} again")
    flag = "coco_captions" if opts.coco_captions else "captions"
    theirs, ours = made.get("sha256", {}).get(flag), own["sha256"][flag]
    if theirs != ours:
        made_path = recorded.section.get("inputs", {}).get(flag)
        given = opts.coco_captions if opts.coco_captions else ",".join(opts.captions)
        raise UsageError(f"--{flag}={given} (sha256 {ours[:12]}) is not the captions {where} was made from "
                         f"({made_path}, sha256 {str(theirs)[:12]}); train_set joins by caption key, so give those, "
                         f"or make the tables again from these (--stage=all)")
    for name, value in own["options"].items():
        if made.get("options", {}).get(name) != value:
            raise UsageError(f"--{name}={value} differs from --{name}={made.get('options', {}).get(name)}, with which "
                             f"{where} was made; give the same, or make the tables again (--stage=all)")


def _inputs(opts: HardposOptions) -> list[tuple[str, str | None, str]]:
    """(flag, folder, table) of each table the join reads: llm_negatives too when --negative_types asks for
    an LLM type, the rule-based table when it asks for a rule-based one."""
    found = [("--hard_positives_dir", opts.hard_positives_dir, "hard_positives")]
    if train_negatives.rule_types(opts):
        found.append(("--train_negatives_dir", opts.train_negatives_dir, "train_negatives"))
    if llm_negatives.llm_types(train_negatives.negative_types(opts)):
        found.append(("--train_negatives_dir", opts.train_negatives_dir, llm_negatives.TABLE))
    return found


# What the join needs of the tables it reads (their rows carry every released column).
JOIN_COLUMNS = frozenset({"example_id", "positive_type", "hard_positive", "model", "prompt_sha256",
                          "negative_type", "negative_index", "hard_negative", "generator", "seed"})


CHANGED_INPUTS = "changed_inputs"


class _ReadShard(beam.DoFn):
    """One Parquet shard -> its rows, the join's columns only, a row group at a time, once the shard has the sha256
    its report recorded; one that has not gives no row but a count naming it, which fails the run. Not
    beam.io.ReadFromParquet: Beam's DaskRunner cannot run its splittable read."""

    def __init__(self, columns: list[str], report_path: str):
        self.columns, self.report_path = columns, report_path

    def process(self, shard: tuple[str, str]):
        path, sha256 = shard
        try:
            data = read_recorded(path, sha256, self.report_path)
        except PublishError as e:
            yield beam.pvalue.TaggedOutput(CHANGED_INPUTS, ((CHANGED_INPUTS, TABLE, str(e)), 1))
            return
        for batch in pq.ParquetFile(pa.BufferReader(data), **VERIFY_PAGES).iter_batches(columns=self.columns):
            yield from batch.to_pylist()


def _read_table(pipeline: beam.Pipeline, table: str, recorded: RecordedTable):
    columns = [c for c in load_schema(table).column_names if c in JOIN_COLUMNS]
    read = (pipeline | f"{table}Shards" >> beam.Create(sorted(recorded.shards.items()))
            | f"Spread{table}Shards" >> beam.Reshuffle()
            | f"Read{table}" >> beam.ParDo(_ReadShard(columns, recorded.report_path)).with_outputs(
                CHANGED_INPUTS, main="rows"))
    return read.rows, read[CHANGED_INPUTS]


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    tables = {table: _read_table(pipeline, table, recorded) for table, recorded in _joined_tables(opts).items()}
    read = {table: rows for table, (rows, _) in tables.items()}
    changed = [counts for _, counts in tables.values()]
    negatives = [pcoll for table, pcoll in read.items() if table != "hard_positives"]
    if len(negatives) > 1:
        negatives = negatives | "AllNegatives" >> beam.Flatten()
    else:
        negatives = negatives[0]
    return (join(pipeline, opts, read["hard_positives"], negatives), *changed) | "AllTrainCounts" >> beam.Flatten()


def join(pipeline: beam.Pipeline, opts: HardposOptions, positives, negatives):
    read = corpus.read_captions(pipeline, opts, STAGE, TABLE, InputBounds.of(opts))
    by_id = lambda label, pcoll: pcoll | label >> beam.Map(lambda r: (r["example_id"], r))  # noqa: E731
    joined = spill.co_group_by_key({"caption": by_id("KeyCaptions", read["records"]),
                                    "positive": by_id("KeyPositives", positives),
                                    "negative": by_id("KeyNegatives", negatives)}, "JoinTrain")
    built = joined | "ChooseTriples" >> beam.ParDo(_Join(hard_positives.positive_types(opts),
                                                         train_negatives.negative_types(opts), opts.seed)).with_outputs(
        DISCARDED, JOINED_COUNTS, main="rows")
    discarded = (read[DISCARDED], built[DISCARDED])  # parts: WriteTableOutputs writes them as one
    written = {"rows": built.rows, "read": read["read"], REJECTED: read[REJECTED], DISCARDED: discarded} | \
        "WriteTrain" >> WriteTableOutputs(STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard,
                                          group=lambda r: (r["positive_type"], r["negative_type"]),
                                          row_counts=Separability(opts.seed))
    sent = [pcoll | f"CountSent{side.title()}" >> beam.Map(lambda _, s: (("join_sent", TABLE, s), 1), side)
            for side, pcoll in zip(JOINED, (read["records"], positives, negatives))]
    # summed where made: a count per row would cross a local runner one element each
    summed = [c | f"SumTrainCounts{i}" >> beam.CombinePerKey(sum) for i, c in enumerate((built[JOINED_COUNTS], *sent))]
    return (written, *summed) | "TrainCounts" >> beam.Flatten()


def expected_units(opts: HardposOptions) -> dict[str, tuple[int, str]]:
    """Progress totals: a record per caption (None where not known before reading the input)."""
    captions = corpus.expected_records(opts)
    return {TABLE: (captions, "captions") if captions is not None else None}


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    section = table_report(TABLE, counts, ["positive_type", "negative_type"])
    section["join"] = join_balance(counts)
    section[CHANGED_INPUTS] = sorted(key[2] for key in counts if key[:2] == (CHANGED_INPUTS, TABLE))
    if any(side["sent"] != side["received"] for side in section["join"].values()) or section[CHANGED_INPUTS]:
        section["balanced"] = False
    section["texts"] = 3 * section["rows"]
    section["positive_types"] = hard_positives.positive_types(opts)
    section["negative_types"] = train_negatives.negative_types(opts)
    section[SEPARABILITY] = separability_section(counts, opts.seed)
    return {TABLE: section}
