"""What the COCO-caption stages (train_negatives, order_eval) share: batched spaCy parsing in a DoFn whose
heavy resources load once per worker, the first pass that counts the input captions' own vocabulary and
trigrams and, for swap, parses them for their relations (a side input), the join by photo of what its captions
name (replace), dead letters for captions with no output, and the samples file."""
from __future__ import annotations

import dataclasses
import hashlib

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.io import parses, spill
from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.options import HardposOptions, UsageError
from pipeline.perturb.corpus import CorpusCounts, image_key, photo_words
from pipeline.perturb.generators import NEEDS, PARSER, TAGGER, Generators, ResourceMissing, check_resources, \
    load_spacy
from pipeline.perturb.outcomes import Skip
from pipeline.perturb.relations import RelationCounts, caption_keys
from pipeline.sources import corpus
from pipeline.sources.files import InputBounds

EMITTED = "emitted"
PARSE_FILES = "parse_files"


class CaptionRowsFn(beam.DoFn):
    """Batch of COCO records -> rows (main), EMITTED source_file per record with rows, dead letters.

    Subclasses set `stage`, `table` and implement rows(record, doc) -> list of rows, raising Skip. One that sets
    `photo_words` gets (record, the word_keys its photo's captions name, or None) pairs (make_rows joins them).
    With `keep_parses` (a chain's parse table, io/parses.py) every batch it parsed is written there too,
    and each bundle's file is a PARSE_FILES output.
    """

    stage = table = ""
    photo_words = False
    keep_parses: parses.Table | None = None

    def __init__(self, negative_types: list[str], spacy_model: str | None, batch_size: int):
        self.negative_types = negative_types
        self.spacy_model = spacy_model
        self.batch_size = batch_size

    def setup(self):
        self.nlp = load_spacy(self.negative_types, self.spacy_model)
        self.generators = Generators.load(self.negative_types)
        self.row_counter = Metrics.counter(f"{self.stage}.{self.table}", "rows")
        self.caption_counter = Metrics.counter(f"{self.stage}.{self.table}", "captions")

    def rows(self, record: dict, doc) -> list[dict]:
        raise NotImplementedError

    def batch_rows(self, records: list[dict], docs: list, corpus, named: list | None = None) -> list:
        """Per record, its rows or the Skip that explains why it has none (`named`: per record, its photo's
        word_keys, when photo_words)."""
        out = []
        for record, doc in zip(records, docs, strict=True):
            try:
                out.append(self.rows(record, doc))
            except Skip as skip:
                out.append(skip)
        return out

    def start_bundle(self):
        self.keeper = parses.Keeper(self.keep_parses) if self.keep_parses else None

    def process(self, batch, corpus=None):
        docs = None
        if isinstance(batch, tuple):  # parsed already (ParseCaptions): the batch and its DocBin
            records = [item[0] if isinstance(item, tuple) else item for item in batch[0]]  # (record, named)
            batch, docs = batch[0], parses.from_bytes(batch[1], self.nlp.vocab, records)
        named = None
        if self.photo_words:
            batch, named = [r for r, _ in batch], [words for _, words in batch]
        if docs is None:
            docs = list(self.nlp.pipe((r["caption"] for r in batch), batch_size=self.batch_size))
            if self.keeper:
                self.keeper.add(batch, docs)
        for record, rows in zip(batch, self.batch_rows(batch, docs, corpus, named), strict=True):
            self.caption_counter.inc()
            if isinstance(rows, Skip):
                Metrics.counter(f"{self.stage}.{self.table}", rows.reason).inc()
                yield beam.pvalue.TaggedOutput(rows.kind, dead_letter(
                    self.stage, self.table, record["source"], record["source_file"], record["source_index"], rows,
                    record))
                continue
            yield beam.pvalue.TaggedOutput(EMITTED, record["source_file"])
            self.row_counter.inc(len(rows))
            yield from rows

    def finish_bundle(self):
        if self.keeper:
            yield from self.keeper.finish(PARSE_FILES)


def _merged(accumulators):
    """The first accumulator with every other merged into it (CorpusCounts, RelationCounts)."""
    accumulators = iter(accumulators)
    merged = next(accumulators)
    for other in accumulators:
        merged.merge(other)
    return merged


class CountCorpus(beam.CombineFn):
    """Caption records -> the CorpusModel of their captions (vocabulary, trigram counts, words per image)."""

    def create_accumulator(self):
        return CorpusCounts()

    def add_input(self, counts, record):
        counts.add(record["caption"])
        return counts

    def merge_accumulators(self, accumulators):
        return _merged(accumulators)

    def extract_output(self, counts):
        return counts.model()


class ParseRelations(beam.DoFn):
    """Batch of caption records -> the RelationCounts of their captions (perturb/relations.py)."""

    def __init__(self, spacy_model: str | None, batch_size: int):
        self.spacy_model, self.batch_size = spacy_model, batch_size

    def setup(self):
        self.nlp = load_spacy(["swap"], self.spacy_model)
        self.lexicon = Generators.load(["swap"]).lexicon

    def process(self, batch):
        keys = RelationCounts()
        for doc in self.nlp.pipe((r["caption"] for r in batch), batch_size=self.batch_size):
            keys.add(caption_keys(doc, self.lexicon))
        yield keys


RELATIONS = "relations"


class ParseCaptions(beam.DoFn):
    """Batch of caption records (or (record, named) pairs) -> (the batch, its parses as a DocBin), and the batch's
    RelationCounts (RELATIONS): the one parse of each caption when the statistics need the parses (swap) before the
    rows are made; `keep_parses` as CaptionRowsFn's."""

    def __init__(self, negative_types: list[str], spacy_model: str | None, batch_size: int,
                 keep_parses: parses.Table | None):
        self.negative_types, self.spacy_model, self.batch_size = negative_types, spacy_model, batch_size
        self.keep_parses = keep_parses

    def setup(self):
        self.nlp = load_spacy(self.negative_types, self.spacy_model)
        self.lexicon = Generators.load(["swap"]).lexicon

    def start_bundle(self):
        self.keeper = parses.Keeper(self.keep_parses) if self.keep_parses else None

    def process(self, batch):
        records = [item[0] if isinstance(item, tuple) else item for item in batch]
        docs = list(self.nlp.pipe((r["caption"] for r in records), batch_size=self.batch_size))
        keys = RelationCounts()
        for doc in docs:
            keys.add(caption_keys(doc, self.lexicon))
        yield beam.pvalue.TaggedOutput(RELATIONS, keys)
        if self.keeper:
            self.keeper.add(records, docs)
        yield batch, parses.to_bytes(docs)

    def finish_bundle(self):
        if self.keeper:
            yield from self.keeper.finish(PARSE_FILES)


class CountRelations(beam.CombineFn):
    """RelationCounts of the batches -> the sorted table of distinct relation digests."""

    def create_accumulator(self):
        return RelationCounts()

    def add_input(self, counts, batch_counts):
        return counts.merge(batch_counts)

    def merge_accumulators(self, accumulators):
        return _merged(accumulators)

    def extract_output(self, counts):
        return counts.table()


def _caption_words(record):
    found = photo_words(record["caption"], record.get("image_id"))
    return [] if found is None else [found]


def _by_photo(record):
    """(the join's key, record): a record with no photo is a group of its own."""
    image = record.get("image_id")
    return (image_key(image) if image is not None else ("no photo", record["example_id"])), record


def _with_named(item):
    """(photo, {records, words}) -> (record, the word_keys some caption of its photo names) per record."""
    key, found = item
    named = frozenset().union(*found["words"]) if isinstance(key, int) else None
    for record in found["records"]:
        yield record, named


def join_photo_words(records, counted):
    """records -> (record, the word_keys the captions of its photo name: None for a record with no image_id),
    through a join by photo: what the photos name is never held whole. `counted`: every caption whose words
    count (the input's and --reference_captions')."""
    keyed = records | "ByPhoto" >> beam.Map(_by_photo)
    words = counted | "CaptionWords" >> beam.FlatMap(_caption_words)
    joined = spill.co_group_by_key({"records": keyed, "words": words}, "JoinPhotoWords")
    return joined | "WithNamed" >> beam.FlatMap(_with_named)


def _with_relations(model, relations):
    return dataclasses.replace(model, relations=relations)  # a new model: Beam's inputs are not to be changed


def check_coco(opts: HardposOptions, negative_types: list[str]) -> None:
    """The caption inputs (--captions or --coco_captions, and --reference_captions) and what parsing them needs."""
    check_captions(opts)
    try:
        check_resources(negative_types, opts.spacy_model)
    except ResourceMissing as e:
        raise UsageError(str(e)) from None


def check_captions(opts: HardposOptions) -> None:
    if opts.captions and opts.coco_captions:
        raise UsageError("--captions and --coco_captions: give one (--coco_captions=FILE is --captions=FILE "
                         "--captions_format=coco)")
    if not corpus.requested(opts):
        raise UsageError(f"--stage={opts.stage} needs --captions=PATTERN (or --coco_captions=FILE)")
    corpus.input_files(opts)
    if opts.reference_captions:
        corpus.reference_files(opts)


def make_rows(pipeline: beam.Pipeline, opts: HardposOptions, stage: str, table: str, fn: CaptionRowsFn,
              with_corpus: bool = False, with_relations: bool = False):
    """Read the captions, batch them, apply `fn`: the inputs WriteTableOutputs takes. With `with_corpus`, a
    first pass counts the captions' vocabulary and trigrams, handed to `fn` as a side input and returned as
    "corpus" too; with `with_relations` that pass also parses the captions for their relations (swap)."""
    bounds = InputBounds.of(opts)
    read = corpus.read_captions(pipeline, opts, stage, table, bounds)
    batch = lambda: beam.BatchElements(min_batch_size=opts.nlp_batch_size,  # noqa: E731
                                       max_batch_size=opts.nlp_batch_size * 4)
    extra, outputs, batches = [], {}, None
    records = read["records"]
    # a chain's hard_positives reads this parse instead of parsing again, where it is the parse its rules need
    keep = parses.keeping_table() if {TAGGER, PARSER} <= set().union(*(NEEDS[t] for t in fn.negative_types)) \
        else None
    if with_corpus:
        # the statistics' captions: the input's, and --reference_captions' (never rows)
        counted = read["records"]
        reference = corpus.read_reference(pipeline, opts, bounds) if opts.reference_captions else None
        if reference is not None:
            counted = spill.unspill(spill.spill_each((read["records"], reference), "WithReference"), "Counted")
        model = counted | "CountCorpus" >> beam.CombineGlobally(CountCorpus())
        if fn.photo_words:  # the join's grouping keeps the records in spill files meanwhile, when spilling
            records = join_photo_words(read["records"], counted)
        if with_relations:
            # each caption parsed once: the parse gives the relations' statistics and is kept for the rows
            parsed = (records | "BatchForParse" >> batch() | "ParseCaptions" >> beam.ParDo(ParseCaptions(
                fn.negative_types, opts.spacy_model, opts.nlp_batch_size, keep)).with_outputs(
                RELATIONS, PARSE_FILES, main="batches"))
            found = [parsed[RELATIONS]]
            if reference is not None:
                parse = ParseRelations(opts.spacy_model, opts.nlp_batch_size)
                found.append(reference | "BatchReference" >> batch() | "ParseReference" >> beam.ParDo(parse))
            found = found | "AllRelations" >> beam.Flatten() if len(found) > 1 else found[0]
            relations = found | "CountRelations" >> beam.CombineGlobally(CountRelations())
            model = model | "WithRelations" >> beam.Map(_with_relations, beam.pvalue.AsSingleton(relations))
            extra = [beam.pvalue.AsSingleton(model)]
            # the parsed batches wait for the statistics in spill files, when spilling
            batches = spill.unspill(spill.spill(parsed.batches, "Parsed"), "Parsed", *extra)
            if keep:
                parses.write_listing(parsed[PARSE_FILES], keep)
            keep = None
        else:
            extra = [beam.pvalue.AsSingleton(model)]
            if not fn.photo_words:
                # the rows wait for the statistics: a spilling run writes the records to files meanwhile and reads
                # them back once the statistics are made (a local runner would hold them all)
                records = spill.unspill(spill.spill(read["records"], "Captions"), "Captions", *extra)
        outputs = {"corpus": model}
    if batches is None:
        batches = records | "Batch" >> batch()
    fn.keep_parses = keep
    built = batches | "ParseAndGenerate" >> beam.ParDo(fn, *extra).with_outputs(REJECTED, DISCARDED, EMITTED,
                                                                                   PARSE_FILES, main="rows")
    if keep:
        parses.write_listing(built[PARSE_FILES], keep)
    # parts, not a Flatten (which a local runner keeps whole): WriteTableOutputs writes them as one
    return {"rows": built.rows, "read": read["read"], REJECTED: (read[REJECTED], built[REJECTED]),
            DISCARDED: (read[DISCARDED], built[DISCARDED]),
            EMITTED: built[EMITTED], **outputs}


def sample_key(seed: int, row: dict) -> str:
    """A row's place in the random sample: a hash, so the sample does not depend on worker order."""
    text = f"{seed}\x1f{row['example_id']}\x1f{row.get('negative_index', 0)}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _cell(text: str) -> str:
    """A markdown table cell: pipes escaped, control and invisible characters (newline, ESC, NUL, bidi overrides)
    written as escapes, so a caption can neither break the table nor act on a terminal."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)
    return text.replace("|", "\\|")


def samples_markdown(title: str, groups: list[tuple[str, list[dict]]], columns: list[str], seed: int) -> str:
    lines = [f"# {title}", "", f"Up to 100 rows per type, chosen by a hash of (seed={seed}, example id).", ""]
    for name, rows in sorted(groups):
        rows = sorted(rows, key=lambda r: sample_key(seed, r))
        lines += [f"## {name} ({len(rows)})", "", "| # | " + " | ".join(columns) + " |",
                  "|---|" + "---|" * len(columns)]
        lines += [f"| {i} | " + " | ".join(_cell(str(r[c])) for c in columns) + " |" for i, r in enumerate(rows, 1)]
        lines.append("")
    return "\n".join(lines)


class WriteSamples(beam.PTransform):
    """Rows -> <path>: a markdown file of up to `per_group` hashed-random rows per group, for reading."""

    def __init__(self, path: str, title: str, group_of, columns: list[str], seed: int, per_group: int = 100):
        super().__init__()
        self.path, self.title, self.group_of, self.columns = path, title, group_of, columns
        self.seed, self.per_group = seed, per_group

    def expand(self, rows):
        seed = self.seed
        return (
            rows
            | "ByGroup" >> beam.Map(lambda r, g: (g(r), r), self.group_of)
            | "Sample" >> beam.combiners.Top.PerKey(self.per_group, key=lambda r: sample_key(seed, r))
            | "AllGroups" >> beam.combiners.ToList()
            | "Write" >> beam.Map(self._write)
        )

    def _write(self, groups):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(self.path) as f:
            f.write(samples_markdown(self.title, groups, self.columns, self.seed).encode("utf-8"))
        return self.path
