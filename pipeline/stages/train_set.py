"""Stage train_set: every COCO caption joined with one hard positive and one hard negative.

Read from the hard_positives and train_negatives tables on disk (in --stage=all, the ones the chain just
staged), as their folder's report.json records them: only tables made from the same captions file (its sha256),
seed and input bounds are joined, and a shard is read only once it has the sha256 recorded for it (a changed one
fails the run, naming it). The positive is the first of --positive_types the caption has. The negative, with
--negative_from=hard_positive (the default), is the caption's negative carried over to that positive
(perturb/transfer.py), so that the two differ only by the negative's change: an exchange first (the positive's very
words, only the structure differs), else an edit of the first of --negative_types, picked in two passes so that no
word is brought in by the triples' negatives more often than taken out (pick_negative); where nothing carries over,
or with --negative_from=caption, the first of --negative_types as written (its negative 0). A caption with neither,
or only one, is a discarded dead letter with the reason, so read = rows + discarded + rejected holds per captions
file.

The rows written are scored for the shortcut they offer (pipeline/checks/separability.py): how often a text-only
bag-of-words model picks the positive out of (positive, negative), and each out of its caption; the report's
"separability" section.
"""
from __future__ import annotations

import functools
import hashlib
from collections import Counter

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
from pipeline.io.report import REPORT_FILE, SumCounts, table_report
from pipeline.io.schema import load_schema
from pipeline.options import HardposOptions, UsageError, type_list
from pipeline.perturb import transfer
from pipeline.perturb.candidates import same_text
from pipeline.perturb.neg_exchange import EXCHANGE
from pipeline.perturb.neg_swap import keeps_words as same_words
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


# Negative types made by exchanging two of the caption's phrases (carried to the positive as an exchange), and by
# changing its words in place (carried as an edit); the rest (order shuffles, an LLM's) only as written.
EXCHANGES = frozenset({EXCHANGE, "swap", "negclip"})
EDITS = frozenset({"replace"})
CAPTION, POSITIVE = "caption", "hard_positive"
# How a triple's negative was picked (the report's "triples"): the positive's words in another structure; an edit
# of the positive its word balance admitted, or the first edit where none was; the caption's negative as written.
STRUCTURE, BALANCED, UNBALANCED, AS_WRITTEN = "structure", "balanced_edit", "unbalanced_edit", "as_written"
NEGATIVE_KEPT = ("negative_type", "generator", "model", "seed")


def negative_options(caption: str, positive: str, negatives: list[dict], order: list[str],
                     from_positive: bool) -> list[dict]:
    """A triple's possible negatives, in the order preferred, each {"negative": its row's provenance, "text",
    "source": what it is a change of, "edit": for an edit carried to the positive, the words it takes out and
    brings in ("man -> woman"), else None}. With from_positive, the caption's negatives carried over to the positive
    where that is sure (perturb/transfer.py): first an exchange (the positive's very words: only the structure
    differs), then the caption's own exchange where the positive keeps the caption's words, then each edit of the
    first type of `order` the caption has; last, and alone without from_positive, that type's first negative as
    written."""
    ranked = sorted((r for r in negatives if r["negative_type"] in order),
                    key=lambda r: (order.index(r["negative_type"]), r.get("negative_index", 0)))
    if not ranked:
        return []

    def option(row, text, source, edit=None):
        return {"negative": {k: row.get(k) for k in NEGATIVE_KEPT}, "text": text, "source": source, "edit": edit}
    options = []
    if from_positive:
        exchanges = [r for r in ranked if r["negative_type"] in EXCHANGES]
        for row in exchanges:
            phrases = transfer.exchanged_phrases(caption, row["hard_negative"])
            text = transfer.exchange_in(positive, *phrases) if phrases else None
            if text is not None and not same_text(text, positive):
                options.append(option(row, text, POSITIVE))
        if exchanges and same_words(caption, positive):
            options.append(option(exchanges[0], exchanges[0]["hard_negative"], CAPTION))
        for row in ranked:  # the first type's edits: a later type is the user's fallback, not a preference
            if row["negative_type"] in EDITS and row["negative_type"] == ranked[0]["negative_type"]:
                text = transfer.edit_in(caption, row["hard_negative"], positive, row.get("atom"))
                edit = transfer.edit_key(positive, text) if text is not None else None
                if edit is not None:
                    options.append(option(row, text, POSITIVE, edit))
    options.append(option(ranked[0], ranked[0]["hard_negative"], CAPTION))
    return options


def reverse_edit(edit: str) -> str:
    old, new = edit.split(" -> ")
    return f"{new} -> {old}"


def pick_negative(options: list[dict], example_id: str, seed: int, edits: dict) -> tuple[dict, str]:
    """(the option, how it was picked). A structure-only option first. Then the first edit the word balance admits:
    an edit "a -> b" is admitted by a seeded draw in as many triples as could take "b -> a" (edits: per edit, the
    triples that could take it), so that no word is brought in by negatives more often than taken out and a
    text-only model cannot pick the positive by which word it has; where none is admitted, the first edit. Last,
    the caption's negative as written."""
    structure = [o for o in options[:-1] if o["edit"] is None]  # the last option is the caption's, as written
    if structure:
        return structure[0], STRUCTURE
    carried = [o for o in options if o["edit"] is not None]
    for o in carried:
        if draw(seed, example_id, o["edit"]) * edits.get(o["edit"], 0) < edits.get(reverse_edit(o["edit"]), 0):
            return o, BALANCED
    if carried:
        return carried[0], UNBALANCED
    return options[-1], AS_WRITTEN


def draw(seed: int, example_id: str, edit: str) -> float:
    """A number in [0, 1) fixed by (seed, caption, edit): the balance's draw."""
    digest = hashlib.sha256(f"{seed}\x00{example_id}\x00{edit}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


JOINED = ("caption", "positive", "negative")
JOINED_COUNTS = "joined_counts"


def join_balance(counts: dict) -> dict:
    """{side: {"sent", "received"}} for the join's three inputs. A runner that loses elements in its shuffle
    (Beam's multi-process DirectRunner did at 591,753 captions) makes them differ: the per-table accounting alone
    would see the lost positives only as more no_hard_positive discards."""
    return {side: {"sent": counts.get(("join_sent", TABLE, side), 0),
                   "received": counts.get(("join_received", TABLE, side), 0)} for side in JOINED}


class _Options(beam.DoFn):
    """A caption's group -> an item {record, positive, options} (negative_options) for the second pass, or a
    discarded dead letter where it has no positive or no negative; and what reached the join."""

    def __init__(self, positive_order: list[str], negative_order: list[str], from_positive: bool):
        self.positive_order, self.negative_order, self.from_positive = positive_order, negative_order, from_positive

    def process(self, item):
        _, grouped = item
        for side in JOINED:  # what reached the join, against what was sent to it (join_balance)
            yield beam.pvalue.TaggedOutput(JOINED_COUNTS, (("join_received", TABLE, side), len(list(grouped[side]))))
        for record in grouped["caption"]:
            positive = _choose(list(grouped["positive"]), "positive_type", self.positive_order)
            negatives = list(grouped["negative"])
            options = negative_options(record["caption"], positive["hard_positive"], negatives, self.negative_order,
                                       self.from_positive) if positive is not None else []
            negative = bool(options) or _choose(negatives, "negative_type", self.negative_order) is not None
            if positive is None or not negative:
                reason = ("no_hard_positive_or_negative" if positive is None and not negative
                          else "no_hard_positive" if positive is None else "no_hard_negative")
                yield beam.pvalue.TaggedOutput(DISCARDED, dead_letter(
                    STAGE, TABLE, record["source"], record["source_file"], record["source_index"],
                    Discard(reason, f"positive types {self.positive_order}, negative types {self.negative_order}"),
                    record))
                continue
            yield {"record": {k: record[k] for k in CAPTION_FIELDS},
                   "positive": {k: positive.get(k) for k in POSITIVE_KEPT}, "options": options}


POSITIVE_KEPT = ("hard_positive", "positive_type", "generator", "model", "prompt_sha256")


def edit_counts(item: dict):
    """(edit, 1) for every edit a triple could take (each once): the balance's counts."""
    for edit in sorted({o["edit"] for o in item["options"] if o["edit"] is not None}):
        yield edit, 1


class _Triple(beam.DoFn):
    """An item -> its train row, the negative picked by pick_negative against the corpus's edit counts; and a
    count of how it was picked."""

    def __init__(self, seed: int):
        self.seed = seed

    def process(self, item, edits: dict):
        record, positive = item["record"], item["positive"]
        option, how = pick_negative(item["options"], record["example_id"], self.seed, edits)
        negative = option["negative"]
        yield beam.pvalue.TaggedOutput(PICKED, ((PICKED, TABLE, how), 1))
        yield {
            **record,
            "hard_positive": positive["hard_positive"],
            "positive_type": positive["positive_type"],
            "hard_negative": option["text"],
            "negative_type": negative["negative_type"],
            "negative_source": option["source"],
            "positive_generator": positive["generator"],
            "positive_model": positive["model"],
            "positive_prompt_sha256": positive["prompt_sha256"],
            # An LLM negative (llm_negatives) names its model where a rule-based one names its generator.
            "negative_generator": negative["generator"] or f"{negative['negative_type']}/{negative['model']}",
            "seed": negative["seed"] if negative["seed"] is not None else self.seed,
        }


PICKED = "negative_picked"


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
                          "negative_type", "negative_index", "hard_negative", "generator", "seed", "atom"})


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


def _recorded_positive_types(opts: HardposOptions, recorded: RecordedTable) -> None:
    """--positive_types not given (train_set alone): the types the hard_positives table was made with, in its order,
    as its report records them, so that the stages run one by one give the chain's tables (with the same flags)."""
    asked = recorded.section.get("positive_types_asked")
    if opts.positive_types is None and isinstance(asked, list) and asked and all(isinstance(t, str) for t in asked):
        try:
            type_list("positive_types_asked", ",".join(asked), hard_positives.ALL_TYPES)
        except UsageError as e:  # the report's, not a flag the user gave
            raise UsageError(f"table hard_positives of {recorded.report_path}: {e}; give --positive_types") from None
        opts.positive_types = ",".join(asked)


def build(pipeline: beam.Pipeline, opts: HardposOptions):
    joined = _joined_tables(opts)
    _recorded_positive_types(opts, joined["hard_positives"])
    tables = {table: _read_table(pipeline, table, recorded) for table, recorded in joined.items()}
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
    built = joined | "TripleOptions" >> beam.ParDo(_Options(hard_positives.positive_types(opts),
                                                          train_negatives.negative_types(opts),
                                                          opts.negative_from == POSITIVE)).with_outputs(
        DISCARDED, JOINED_COUNTS, main="items")
    edits = (built.items | "EditCounts" >> beam.FlatMap(edit_counts)
             | "SumEditCounts" >> beam.CombineGlobally(SumCounts()))
    # the second pass waits on the corpus's edit counts: a spilling run reads the items back from files meanwhile
    items = spill.unspill(spill.spill(built.items, "TripleItems"), "TripleItems", beam.pvalue.AsSingleton(edits))
    triples = items | "ChooseTriples" >> beam.ParDo(_Triple(opts.seed), beam.pvalue.AsSingleton(edits)).with_outputs(
        PICKED, main="rows")
    discarded = (read[DISCARDED], built[DISCARDED])  # parts: WriteTableOutputs writes them as one
    written = {"rows": triples.rows, "read": read["read"], REJECTED: read[REJECTED], DISCARDED: discarded} | \
        "WriteTrain" >> WriteTableOutputs(STAGE, TABLE, TABLE, opts.output_dir, opts.rows_per_shard,
                                          group=triple_group,
                                          row_counts=Separability(opts.seed))
    sent = [pcoll | f"CountSent{side.title()}" >> beam.Map(lambda _, s: (("join_sent", TABLE, s), 1), side)
            for side, pcoll in zip(JOINED, (read["records"], positives, negatives))]
    # summed where made: a count per row would cross a local runner one element each
    summed = [c | f"SumTrainCounts{i}" >> beam.CombinePerKey(sum)
              for i, c in enumerate((built[JOINED_COUNTS], triples[PICKED], *sent))]
    return (written, *summed) | "TrainCounts" >> beam.Flatten()


def expected_units(opts: HardposOptions) -> dict[str, tuple[int, str]]:
    """Progress totals: a record per caption (None where not known before reading the input)."""
    captions = corpus.expected_records(opts)
    return {TABLE: (captions, "captions") if captions is not None else None}


GROUP_FIELDS = ["positive_type", "negative_type", "negative_source", "same_words"]


def triple_group(row: dict) -> tuple:
    """The report's group of a train row: its types, what its negative was made from, and whether positive and
    negative have the same words (they differ only in structure)."""
    return (row["positive_type"], row["negative_type"], row["negative_source"],
            same_words(row["hard_positive"], row["hard_negative"]))


def triples(section: dict, counts: dict) -> dict:
    """The shares of matched triples: negatives made from the positive, those with the positive's very words (only
    the structure differs); and how each negative was picked (pick_negative)."""
    rows = section["rows"] or 1
    by = Counter()
    for *fields, n in section["groups"]["rows"]:
        group = dict(zip(GROUP_FIELDS, fields, strict=True))
        by["from_positive"] += n if group["negative_source"] == POSITIVE else 0
        by["same_words"] += n if group["same_words"] else 0
    return {"negative_from_positive": by["from_positive"], "same_words": by["same_words"],
            "share_negative_from_positive": round(by["from_positive"] / rows, 4),
            "share_same_words": round(by["same_words"] / rows, 4),
            "picked": {how: counts.get((PICKED, TABLE, how), 0) for how in (STRUCTURE, BALANCED, UNBALANCED,
                                                                          AS_WRITTEN)}}


def report_tables(counts: dict, opts: HardposOptions) -> dict:
    section = table_report(TABLE, counts, GROUP_FIELDS)
    section["triples"] = triples(section, counts)
    section["join"] = join_balance(counts)
    section[CHANGED_INPUTS] = sorted(key[2] for key in counts if key[:2] == (CHANGED_INPUTS, TABLE))
    if any(side["sent"] != side["received"] for side in section["join"].values()) or section[CHANGED_INPUTS]:
        section["balanced"] = False
    section["texts"] = 3 * section["rows"]
    section["positive_types"] = hard_positives.positive_types(opts)
    section["negative_types"] = train_negatives.negative_types(opts)
    section[SEPARABILITY] = separability_section(counts, opts.seed)
    return {TABLE: section}
