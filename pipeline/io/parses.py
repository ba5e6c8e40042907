"""The chain's parse table: each caption parsed once in `--stage=all` (issue 44).

train_negatives parses every caption it reads with spaCy's tagger and parser; hard_positives' rules need the same
parse. In a chain, train_negatives' parsing DoFn also writes each batch it parsed (its records and their docs as one
DocBin: 70-odd bytes a caption, a twentieth of a parse's time to write and read) into files in the chain's staging
folder, and hard_positives reads those batches instead of parsing again. Only the files of bundles that finished
are read: each bundle writes a file of its own, under a random name, and the pipeline lists the files its bundles
reported (a retried bundle's file is left out). hard_positives then checks that the table holds exactly the records
it read itself (their number and a sum of their ids' hashes), so a parse table that does not match its input fails
the run instead of losing captions. The folder is removed before the chain commits.

Files go through Beam's FileSystems: the staging folder is local, or on the cloud storage Dataflow's workers share.
"""
from __future__ import annotations

import contextlib
import base64
import json
import os
import shutil
import stat
import uuid
import zlib

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.urls import has_scheme

FOLDER = ".hardpos-parses"
# run.input_changed makes an error holding "changed since the run began" the run's one line (exit 2)
CHANGED = "the run's staging folder changed since the run began"
LISTING = "files.json"
# What the rules read of a token: text and spacing, tag, dependency and head, sentence starts (POS, MORPH and LEMMA
# are empty without the attribute ruler, kept so that a model with it round-trips too).
ATTRS = ["ORTH", "SPACY", "TAG", "POS", "MORPH", "LEMMA", "DEP", "HEAD", "SENT_START"]

_folders: dict[str, str | None] = {"keeping": None, "reading": None}


@contextlib.contextmanager
def _set(role: str, folder: str | None):
    before, _folders[role] = _folders[role], folder
    try:
        yield
    finally:
        _folders[role] = before


def keeping(folder: str | None):
    """Graphs built inside keep their parses in `folder` (train_negatives in a chain)."""
    return _set("keeping", folder)


def reading(folder: str | None):
    """Graphs built inside read their parses from `folder` (hard_positives in a chain)."""
    return _set("reading", folder)


def keeping_folder() -> str | None:
    return _folders["keeping"]


def reading_folder() -> str | None:
    return _folders["reading"]


def folder_of(staging: str) -> str:
    return FileSystems.join(staging, FOLDER)


def listed(folder: str) -> bool:
    """Whether a pipeline finished writing the parse table in folder."""
    return FileSystems.exists(FileSystems.join(folder, LISTING))


def remove(folder: str) -> None:
    """The table's files and folder (on cloud storage a folder is only its files' common prefix)."""
    if not has_scheme(folder):
        shutil.rmtree(folder, ignore_errors=True)
        return
    found = FileSystems.match([FileSystems.join(folder, "*")])[0].metadata_list
    if found:
        FileSystems.delete([m.path for m in found])


def to_bytes(docs) -> bytes:
    from spacy.tokens import DocBin

    found = DocBin(attrs=ATTRS, store_user_data=False)
    for doc in docs:
        found.add(doc)
    return found.to_bytes()


def from_bytes(data: bytes, vocab) -> list:
    from spacy.tokens import DocBin

    return list(DocBin().from_bytes(data).get_docs(vocab))


def make_folder(folder: str) -> None:
    """The table's folder, made by the launcher before the pipeline that writes it (locally: never an existing
    entry, a link planted at its name included)."""
    if has_scheme(folder):
        return
    try:
        os.mkdir(folder)
    except FileExistsError:
        raise ParseTableMismatch(f"{folder} is there before train_negatives made it: {CHANGED}") from None


def _create(folder: str, name: str):
    """A new file in the folder, for writing. Locally the folder is opened without following a link and the file
    is made there with O_EXCL|O_NOFOLLOW after removing whatever has its name: nothing planted in the staging folder
    is written through."""
    if has_scheme(folder):
        return FileSystems.create(FileSystems.join(folder, name))
    where = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            os.unlink(name, dir_fd=where)
        except FileNotFoundError:
            pass
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=where)
    finally:
        os.close(where)
    return os.fdopen(fd, "wb")


def _open(path: str):
    """A file of the table, for reading: locally only a regular file, not through a link, never blocking (a FIFO
    planted there fails the run instead of hanging it)."""
    if has_scheme(path):
        return FileSystems.open(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise ParseTableMismatch(f"{path} cannot be read ({e.strerror}): {CHANGED}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ParseTableMismatch(f"{path} is not a file train_negatives wrote: {CHANGED}")
    return os.fdopen(fd, "rb")


class Writer:
    """One bundle's file of (records, DocBin bytes) batches, a JSON line each: plain data, so that a file planted
    in the folder can at worst fail the record check, never run code as a pickle would."""

    def __init__(self, folder: str):
        name = f"parses-{uuid.uuid4().hex}.jsonl"
        self.path = FileSystems.join(folder, name)
        self.file = _create(folder, name)

    def add(self, records: list[dict], docs) -> None:
        line = {"records": records, "docs": base64.b64encode(to_bytes(docs)).decode("ascii")}
        self.file.write((json.dumps(line) + "\n").encode("utf-8"))

    def close(self) -> str:
        self.file.close()
        return self.path


class Keeper:
    """A DoFn's bundle of kept parses: add() per parsed batch, finish() in finish_bundle yields the file's path as
    the `tag` output (nothing for a bundle that kept none)."""

    def __init__(self, folder: str):
        self.folder, self.writer = folder, None

    def add(self, records: list[dict], docs) -> None:
        if self.writer is None:
            self.writer = Writer(self.folder)
        self.writer.add(records, docs)

    def finish(self, tag: str):
        from pipeline.io.spill import global_value

        if self.writer is not None:
            yield beam.pvalue.TaggedOutput(tag, global_value(self.writer.close()))
            self.writer = None


def _write_listing(paths: list[str], folder: str) -> None:
    with _create(folder, LISTING) as f:
        f.write((json.dumps(sorted(paths)) + "\n").encode("utf-8"))


def write_listing(paths, folder: str):
    """The files the bundles reported -> the table's listing (written once every bundle has finished)."""
    return (paths | "ParseFilesListed" >> beam.combiners.ToList()
            | "WriteParseListing" >> beam.Map(_write_listing, folder))


def _batches(path: str):
    """A file's (records, DocBin bytes) batches; ParseTableMismatch for a line that is not one Writer writes."""
    with _open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                found = json.loads(line)
                records, docs = found["records"], base64.b64decode(found["docs"], validate=True)
                if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise ParseTableMismatch(f"the parse table's file {path}, line {number}, is not one train_negatives "
                                         f"wrote: {CHANGED}") from None
            yield records, docs


def _listing(folder: str) -> list[str]:
    """The files the listing names: each in the folder, named as Writer names them."""
    with _open(FileSystems.join(folder, LISTING)) as f:
        try:
            paths = json.loads(f.read(1 << 24).decode("utf-8"))
        except ValueError:
            paths = None
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith(FileSystems.join(folder, "parses-"))
                                              and p.endswith(".jsonl") and "/" not in p[len(folder) + 1:]
                                              for p in paths):
        raise ParseTableMismatch(f"{FileSystems.join(folder, LISTING)} is not the listing train_negatives wrote: "
                                 f"{CHANGED}")
    return paths


def read_batches(pipeline, folder: str):
    """The table's (records, DocBin bytes) batches; the files are read in the workers, one file an element."""
    return (pipeline | "ParseFiles" >> beam.Create(_listing(folder)) | "ReshuffleParseFiles" >> beam.Reshuffle()
            | "ReadParses" >> beam.FlatMap(_batches))


def _id_hash(example_id) -> int:
    return zlib.crc32(repr(example_id).encode("utf-8", "surrogatepass"))


class RecordsDigest(beam.CombineFn):
    """Records -> (how many, the sum of their ids' CRC32 mod 2^64): equal for the same records in any order."""

    def create_accumulator(self):
        return 0, 0

    def add_input(self, acc, example_id):
        return acc[0] + 1, (acc[1] + _id_hash(example_id)) % (1 << 64)

    def merge_accumulators(self, accumulators):
        n = total = 0
        for count, digest in accumulators:
            n, total = n + count, (total + digest) % (1 << 64)
        return n, total

    def extract_output(self, acc):
        return acc


class ParseTableMismatch(RuntimeError):
    """The parse table does not hold the records the stage read."""


def _same(read_digest, parsed_digest, folder: str):
    if tuple(read_digest) != tuple(parsed_digest):
        # "changed since the run began": run.input_changed makes it the run's one line (exit 2)
        raise ParseTableMismatch(f"the parse table train_negatives kept holds {parsed_digest[0]:,} captions, "
                                 f"hard_positives read {read_digest[0]:,} (or other ones): the input changed since "
                                 f"the run began")
    return []


def check_same(records, batches, folder: str):
    """Fails the pipeline unless the batches hold exactly the records read (count and ids); an empty PCollection
    to depend on."""
    read = (records | "ReadIds" >> beam.Map(lambda r: r["example_id"])
            | "ReadDigest" >> beam.CombineGlobally(RecordsDigest()))
    parsed = (batches | "ParsedIds" >> beam.FlatMap(lambda b: [r["example_id"] for r in b[0]])
              | "ParsedDigest" >> beam.CombineGlobally(RecordsDigest()))
    return read | "SameRecords" >> beam.FlatMap(_same, beam.pvalue.AsSingleton(parsed), folder)
