"""The chain's parse table: each caption parsed once in `--stage=all` (issue 44).

train_negatives parses every caption it reads with spaCy's tagger and parser; hard_positives' rules need the same
parse. In a chain, train_negatives' parsing DoFn also writes each batch it parsed (its records and their docs as one
DocBin: 70-odd bytes a caption, a twentieth of a parse's time to write and read) into files in the chain's staging
folder, and hard_positives reads those batches instead of parsing again. Only the files of bundles that finished
are read: each bundle writes a file of its own, under a random name, and the pipeline lists the files its bundles
reported (a retried bundle's file is left out). The table is sealed: the launcher makes a random key for the chain,
which only the pipelines' DoFns hold (never a file); each file's sha256 and size go into the listing, and the listing
carries an HMAC of them under that key. hard_positives reads only a listing whose HMAC checks, and each file only
as the listing describes it (its size before reading, its sha256 at the end), so a table changed, swapped, grown or
reordered between the stages fails the run (exit 2) instead of handing the rules another caption's parse. It then
checks that the table holds exactly the records it read itself (their number and a sum of the hashes of the records
whole), so a parse table that does not match its input fails the run instead of losing captions. The folder is
removed before the chain commits.

Files go through Beam's FileSystems: the staging folder is local, or on the cloud storage Dataflow's workers share.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import uuid
from dataclasses import dataclass, field

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



@dataclass(frozen=True)
class Table:
    """A chain's parse table: its folder, and the key its listing is sealed with (made by the launcher, handed to
    the DoFns in the pipeline graph; never written to a file, never shown)."""
    folder: str
    key: str = field(repr=False)


_tables: dict[str, Table | None] = {"keeping": None, "reading": None}
_made: dict[str, Table] = {}  # folder -> the table this launcher made there


@contextlib.contextmanager
def _set(role: str, table: Table | None):
    before, _tables[role] = _tables[role], table
    try:
        yield
    finally:
        _tables[role] = before


def keeping(table: Table | None):
    """Graphs built inside keep their parses in `table` (train_negatives in a chain)."""
    return _set("keeping", table)


def reading(table: Table | None):
    """Graphs built inside read their parses from `table` (hard_positives in a chain)."""
    return _set("reading", table)


def keeping_table() -> Table | None:
    return _tables["keeping"]


def reading_table() -> Table | None:
    return _tables["reading"]


def made(folder: str) -> Table | None:
    """The table this launcher made in folder (make_table), if any."""
    return _made.get(folder)


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


def from_bytes(data: bytes, vocab, records: list | None = None) -> list:
    """The docs of a DocBin; with `records`, one for each, each the parse of its record's caption (else
    ParseTableMismatch)."""
    from spacy.tokens import DocBin

    docs = list(DocBin().from_bytes(data).get_docs(vocab))
    if records is not None and (len(docs) != len(records) or any(
            doc.text != record.get("caption") for doc, record in zip(docs, records))):
        raise ParseTableMismatch(f"a batch of the parse table holds {len(docs)} parses for {len(records)} captions, "
                                 f"or another caption's: {CHANGED}")
    return docs


def make_table(folder: str) -> Table:
    """The table's folder, made by the launcher before the pipeline that writes it (locally: never an existing
    entry, a link planted at its name included), and its key."""
    if not has_scheme(folder):
        try:
            os.mkdir(folder)
        except FileExistsError:
            raise ParseTableMismatch(f"{folder} is there before train_negatives made it: {CHANGED}") from None
    _made[folder] = Table(folder, secrets.token_hex(32))
    return _made[folder]


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
    except (OSError, ValueError) as e:  # ValueError: a NUL in the name
        raise ParseTableMismatch(f"{path!r} cannot be read ({getattr(e, 'strerror', None) or e}): {CHANGED}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ParseTableMismatch(f"{path} is not a file train_negatives wrote: {CHANGED}")
    return os.fdopen(fd, "rb")


class Writer:
    """One bundle's file of (records, DocBin bytes) batches, a JSON line each: plain data, so that a file planted
    in the folder can at worst fail a check, never run code as a pickle would. close() gives its path, sha256 and
    size, for the listing."""

    def __init__(self, folder: str):
        name = f"parses-{uuid.uuid4().hex}.jsonl"
        self.path = FileSystems.join(folder, name)
        self.file = _create(folder, name)
        self.digest, self.size = hashlib.sha256(), 0

    def add(self, records: list[dict], docs) -> None:
        line = {"records": records, "docs": base64.b64encode(to_bytes(docs)).decode("ascii")}
        data = (json.dumps(line) + "\n").encode("utf-8")
        self.file.write(data)
        self.digest.update(data)
        self.size += len(data)

    def close(self) -> tuple[str, str, int]:
        self.file.close()
        return self.path, self.digest.hexdigest(), self.size


class Keeper:
    """A DoFn's bundle of kept parses: add() per parsed batch, finish() in finish_bundle yields the file's (path,
    sha256, size) as the `tag` output (nothing for a bundle that kept none)."""

    def __init__(self, table: Table):
        self.folder, self.writer = table.folder, None

    def add(self, records: list[dict], docs) -> None:
        if self.writer is None:
            self.writer = Writer(self.folder)
        self.writer.add(records, docs)

    def finish(self, tag: str):
        from pipeline.io.spill import global_value

        if self.writer is not None:
            yield beam.pvalue.TaggedOutput(tag, global_value(self.writer.close()))
            self.writer = None


LISTING_LIMIT = 1 << 24


def _seal(table: Table, files: list) -> str:
    return hmac.new(bytes.fromhex(table.key), json.dumps(files).encode("utf-8"), hashlib.sha256).hexdigest()


def _write_listing(files: list, table: Table) -> None:
    files = sorted([path, sha256, size] for path, sha256, size in files)
    with _create(table.folder, LISTING) as f:
        f.write((json.dumps({"files": files, "hmac": _seal(table, files)}) + "\n").encode("utf-8"))


def write_listing(files, table: Table):
    """The files the bundles reported -> the table's sealed listing (written once every bundle has finished)."""
    return (files | "ParseFilesListed" >> beam.combiners.ToList()
            | "WriteParseListing" >> beam.Map(_write_listing, table))


def _batches(entry):
    """A listed file's (records, DocBin bytes) batches, read only as the listing describes it: its size before any
    line is read (no line longer than the file the listing names), its sha256 once read (the run fails there, before
    anything is committed). ParseTableMismatch for a line that is not one Writer writes."""
    path, sha256, size = entry
    with _open(path) as f:
        found = size if has_scheme(path) else os.fstat(f.fileno()).st_size
        if found != size:
            raise ParseTableMismatch(f"the parse table's file {path} has {found:,} bytes, not the {size:,} "
                                     f"train_negatives wrote: {CHANGED}")
        digest, left, number = hashlib.sha256(), size, 0
        while left > 0:
            line = f.readline(left)
            if not line:
                break
            number, left = number + 1, left - len(line)
            digest.update(line)
            try:
                found = json.loads(line)
                records, docs = found["records"], base64.b64decode(found["docs"], validate=True)
                if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise ParseTableMismatch(f"the parse table's file {path}, line {number}, is not one train_negatives "
                                         f"wrote: {CHANGED}") from None
            yield records, docs
        if left or f.read(1) or not hmac.compare_digest(digest.hexdigest(), sha256):
            raise ParseTableMismatch(f"the parse table's file {path} is not the one train_negatives wrote (its "
                                     f"sha256): {CHANGED}")


def _listing(table: Table) -> list:
    """The files the sealed listing names (path, sha256, size): each in the folder, named as Writer names them,
    the whole listing as train_negatives' pipeline sealed it with the chain's key."""
    where = FileSystems.join(table.folder, LISTING)
    with _open(where) as f:
        try:
            listing = json.loads(f.read(LISTING_LIMIT).decode("utf-8"))
            files = listing["files"]
            sealed = hmac.compare_digest(str(listing["hmac"]), _seal(table, files))
        except (ValueError, KeyError, TypeError):
            sealed, files = False, None
    prefix = FileSystems.join(table.folder, "parses-")
    if not sealed or not isinstance(files, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and e[0].startswith(prefix)
            and e[0].endswith(".jsonl") and "/" not in e[0][len(table.folder) + 1:] and isinstance(e[1], str)
            and isinstance(e[2], int) and not isinstance(e[2], bool) and e[2] >= 0 for e in files):
        raise ParseTableMismatch(f"{where} is not the listing train_negatives wrote: {CHANGED}")
    return files


def read_batches(pipeline, table: Table):
    """The table's (records, DocBin bytes) batches; the files are read in the workers, one file an element."""
    return (pipeline | "ParseFiles" >> beam.Create(_listing(table)) | "ReshuffleParseFiles" >> beam.Reshuffle()
            | "ReadParses" >> beam.FlatMap(_batches))


def _record_hash(record: dict) -> int:
    """A record whole (every field, as JSON: the table's copy went through JSON) as 64 bits of its sha256."""
    text = json.dumps(record, sort_keys=True, default=repr)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")


class RecordsDigest(beam.CombineFn):
    """Records' hashes -> (how many, their sum mod 2^64): equal for the same records in any order."""

    def create_accumulator(self):
        return 0, 0

    def add_input(self, acc, record_hash):
        return acc[0] + 1, (acc[1] + record_hash) % (1 << 64)

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


def check_same(records, batches, table: Table):
    """Fails the pipeline unless the batches hold exactly the records read (count and the records whole); an empty
    PCollection to depend on."""
    read = (records | "ReadHashes" >> beam.Map(_record_hash)
            | "ReadDigest" >> beam.CombineGlobally(RecordsDigest()))
    parsed = (batches | "ParsedHashes" >> beam.FlatMap(lambda b: [_record_hash(r) for r in b[0]])
              | "ParsedDigest" >> beam.CombineGlobally(RecordsDigest()))
    return read | "SameRecords" >> beam.FlatMap(_same, beam.pvalue.AsSingleton(parsed), table.folder)
