"""Issue 44: `--stage=all` parses each caption once. train_negatives keeps its parses in the chain's staging folder
and hard_positives' rules read them (pipeline/io/parses.py); the tables are those of the stages run apart."""
from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest

from conftest import SAMPLES

CAPTIONS = SAMPLES / "coco" / "captions_sample.json"
TABLES = ("train_negatives", "hard_positives", "train", "discarded", "rejected")


def _count_parses(monkeypatch) -> list[int]:
    import spacy.language

    parsed = [0]
    original = spacy.language.Language.pipe

    def pipe(self, texts, *args, **kwargs):
        for doc in original(self, texts, *args, **kwargs):
            parsed[0] += "parser" in self.pipe_names
            yield doc

    monkeypatch.setattr(spacy.language.Language, "pipe", pipe)
    return parsed


def _run(*args: str) -> int:
    from pipeline.run import main

    return main(["--runner=DirectRunner", "--progress_seconds=0", f"--coco_captions={CAPTIONS}", *args])


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for t in TABLES for p in sorted((folder / t).rglob("*"))
            if p.is_file()}


def test_the_chain_parses_each_caption_once_and_writes_the_stages_own_tables(tmp_path, monkeypatch):
    parsed = _count_parses(monkeypatch)
    assert _run("--stage=all", "--negative_types=all", f"--output_dir={tmp_path / 'chain'}") == 0
    report = json.loads((tmp_path / "chain" / "report.json").read_text())
    section = report["tables"]["train_negatives"]
    captions = section["read"] - section["rejected"]
    assert captions > 30 and parsed[0] == captions  # the sample's 37 good records, once each
    assert not list((tmp_path / "chain").rglob(".hardpos-parses*"))

    parsed[0] = 0
    apart = tmp_path / "apart"
    # the same flags (K9: train_set alone takes the hard_positives table's types; its dead letters' detail differed)
    for stage in ("train_negatives", "hard_positives", "train_set"):
        assert _run(f"--stage={stage}", "--negative_types=all", f"--output_dir={apart}") == 0
    assert parsed[0] == 2 * captions  # each stage parses for itself
    chain, alone = _files(tmp_path / "chain"), _files(apart)
    assert chain.keys() == alone.keys() and len(chain) > 5
    assert [name for name in chain if chain[name] != alone[name]] == []


def test_a_parse_table_that_does_not_hold_the_records_read_fails_the_run(tmp_path, monkeypatch, capsys):
    from pipeline.io import parses

    original = parses.read_batches
    monkeypatch.setattr(parses, "read_batches",
                        lambda pipeline, table: original(pipeline, table) | beam.Filter(lambda batch: False))
    out = tmp_path / "out"
    code = _run("--stage=all", f"--output_dir={out}")
    err = capsys.readouterr().err
    assert code == 2 and "the parse table train_negatives kept holds 0 captions, hard_positives read 37" in err
    assert "Traceback" not in err
    assert not (out / "hard_positives").exists() and not (out / "train_negatives").exists()
    assert not list(tmp_path.rglob(".hardpos-parses*"))


def test_a_parse_survives_its_round_trip_as_the_rules_read_it():
    from pipeline.io import parses
    from pipeline.perturb.generators import load_spacy

    nlp = load_spacy(["replace", "exchange"])
    captions = [a["caption"] for a in json.loads(CAPTIONS.read_text())["annotations"]
                if isinstance(a, dict) and isinstance(a.get("caption"), str)]
    docs = list(nlp.pipe(captions))
    back = parses.from_bytes(parses.to_bytes(docs), nlp.vocab)

    def seen(doc):
        return [(t.text, t.whitespace_, t.tag_, t.pos_, t.dep_, t.head.i, t.lemma_, str(t.morph), t.is_sent_start)
                for t in doc]

    assert len(back) == len(docs) > 30 and [seen(d) for d in back] == [seen(d) for d in docs]


@pytest.mark.parametrize("planted", ["line", "listing"])
def test_a_parse_table_changed_between_the_stages_fails_the_run_in_one_line(planted, tmp_path, monkeypatch, capsys):
    """The table is plain data (JSON lines, a DocBin): a planted line or listing fails the record check, never runs."""
    from pipeline.io import parses

    original = parses.read_batches

    def planting(pipeline, table):
        listing = Path(table.folder) / parses.LISTING
        if planted == "line":
            for name, _, _ in json.loads(listing.read_text())["files"]:
                with open(name, "a") as f:
                    f.write('{"records": "not a list", "docs": ""}\n')
        else:
            listing.write_text(json.dumps([str(tmp_path / "elsewhere.jsonl")]))
        return original(pipeline, table)

    monkeypatch.setattr(parses, "read_batches", planting)
    out = tmp_path / "out"
    code = _run("--stage=all", f"--output_dir={out}")
    err = capsys.readouterr().err
    assert code == 2 and "changed since the run began" in err and "Traceback" not in err
    assert not (out / "hard_positives").exists()


def test_nothing_planted_in_the_parse_tables_folder_is_written_through_or_waited_on(tmp_path, monkeypatch, capsys):
    """A link planted at files.json is replaced, its target untouched; a FIFO planted as a parse file fails the run
    in one line instead of hanging it."""
    import os

    from pipeline.io import parses

    victim = tmp_path / "victim.txt"
    victim.write_text("precious user data")
    original = parses._write_listing

    def planting(paths, table):
        os.symlink(victim, Path(table.folder) / parses.LISTING)
        return original(paths, table)

    monkeypatch.setattr(parses, "_write_listing", planting)
    assert _run("--stage=all", f"--output_dir={tmp_path / 'linked'}") == 0
    assert victim.read_text() == "precious user data"
    monkeypatch.setattr(parses, "_write_listing", original)

    before = parses.read_batches

    def fifo(pipeline, table):
        name = json.loads((Path(table.folder) / parses.LISTING).read_text())["files"][0][0]
        os.unlink(name)
        os.mkfifo(name)
        return before(pipeline, table)

    monkeypatch.setattr(parses, "read_batches", fifo)
    code = _run("--stage=all", f"--output_dir={tmp_path / 'fifo'}")
    err = capsys.readouterr().err
    assert code == 2 and "is not a file train_negatives wrote" in err and "Traceback" not in err
