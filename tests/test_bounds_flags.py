"""Issue 27 F16: every numeric flag of HardposOptions is range-checked before any work. A value outside its range
(--seed=2**63, --temperature=nan, --top_p=7, ...) is refused with one line naming the flag and exit 2, nothing
written; it was accepted, the whole run happened, and then the counts did not add up or every row recorded it.
Issue 35: the ranges end where the flag's consumer breaks (spaCy, Beam's local runner), Beam's own flags too."""
from __future__ import annotations

import argparse
import json

import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from pipeline.options import HardposOptions
from pipeline.run import main, parse
from tests.conftest import ARO_SAMPLE, SAMPLES

INT64_END = str(2**63)
# Per numeric flag, values outside its range: below it, above it, not finite.
OUT_OF_RANGE = {
    "negatives_per_caption": ["0", "101"],
    "ranker_batch_size": ["0", INT64_END],
    "seed": ["-1", INT64_END, "1.5"],
    "nlp_batch_size": ["0", str(2**31)],
    "temperature": ["nan", "inf", "-0.1"],
    "top_p": ["7", "0", "nan"],
    "llm_retries": ["-1", "101"],
    "retry_temperature": ["nan", "-1"],
    "llm_batch_size": ["0"],
    "llm_concurrency": ["0", "1025"],
    "llm_timeout": ["0", "nan", "1e300"],
    "llm_max_reply_bytes": ["0", "1023", "100000001", INT64_END],
    "tensor_parallel_size": ["0", "1025"],
    "max_num_seqs": ["0"],
    "gpu_memory_utilization": ["0", "1.5", "nan"],
    "image_size": ["-1", "65536"],
    "images_per_shard": ["0"],
    "image_processes": ["0", "1025"],
    "image_threads": ["0", "100000"],
    "image_timeout": ["0", "nan", "1e300"],
    "image_deadline": ["inf", "-5"],
    "image_max_bytes": ["0", INT64_END],
    "image_max_pixel_values": ["0", INT64_END],
    "image_retries": ["-1", "101"],
    "progress_seconds": ["-1", "nan", "1e300"],
    "rows_per_shard": ["0"],
    "max_caption_chars": ["0", "1000001", INT64_END],
    "max_caption_words": ["0"],
    "max_json_depth": ["0", "201"],
    "max_record_bytes": ["1023", str(2**30 + 1), INT64_END],
    "max_failed_fraction": ["nan", "1.5"],
    "max_substitution_share": ["0", "1.5", "nan"],
    "dask_workers": ["-1", "1025"],
}


# Beam's own numeric flags that a local run reads: checked with the same one line.
BEAM_OUT_OF_RANGE = {"direct_num_workers": ["-3", "1025", "x"]}


def numeric_flags() -> set[str]:
    """The flags of HardposOptions that take a number (their default is one)."""
    parser = argparse.ArgumentParser()
    HardposOptions._add_argparse_args(parser)
    return {a.dest for a in parser._actions
            if isinstance(a.default, (int, float)) and not isinstance(a.default, bool)}


def test_f16_the_table_covers_every_numeric_flag():
    assert numeric_flags() == set(OUT_OF_RANGE)


@pytest.mark.parametrize("flag,value", [(f, v) for table in (OUT_OF_RANGE, BEAM_OUT_OF_RANGE)
                                        for f, values in table.items() for v in values])
def test_f16_an_out_of_range_flag_is_refused_before_any_work(flag, value, tmp_path, capsys):
    out = tmp_path / "out"
    try:
        code = main(["--stage=eval_sets", f"--aro_vga={ARO_SAMPLE}", f"--output_dir={out}", "--progress_seconds=0",
                     f"--{flag}={value}"])
    except SystemExit as e:  # argparse's own refusal: usage text and exit
        code = e.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines[:3]
    assert lines[0].startswith(f"error: --{flag}: must be ") and value in lines[0]
    assert not out.exists()  # refused before any work


def test_f16_the_ends_of_the_ranges_are_accepted(tmp_path):
    options, opts = parse(["--stage=eval_sets", f"--aro_vga={ARO_SAMPLE}", f"--output_dir={tmp_path}",
                           f"--seed={2**63 - 1}", "--temperature=0", "--top_p=1", "--gpu_memory_utilization=1",
                           "--image_size=65535", "--max_failed_fraction=0", "--progress_seconds=86400",
                           "--max_caption_chars=1000000", f"--nlp_batch_size={2**31 - 1}", "--direct_num_workers=0",
                           "--direct_running_mode=multi_processing"])  # threads as many as the cores: refused
    assert (opts.seed, opts.temperature, opts.top_p, opts.image_size) == (2**63 - 1, 0.0, 1.0, 65535)
    assert (opts.max_caption_chars, opts.nlp_batch_size) == (1_000_000, 2**31 - 1)
    assert options.view_as(DirectOptions).direct_num_workers == 0


def test_the_caption_bound_is_the_longest_text_spacy_parses():
    import spacy

    from pipeline.options import SPACY_MAX_LENGTH

    assert spacy.blank("en").max_length == SPACY_MAX_LENGTH


def test_f16_defaults_are_inside_their_ranges():
    options = PipelineOptions([]).view_as(HardposOptions)
    parser = argparse.ArgumentParser()
    HardposOptions._add_argparse_args(parser)
    for action in parser._actions:
        if action.dest in OUT_OF_RANGE:
            assert action.type(str(getattr(options, action.dest))) == action.default, action.dest


def captions_with_a_long_one(folder) -> str:
    """The sample captions and one of 1.12 MB in 2 words, past spaCy's longest text but not --max_caption_words."""
    coco = json.loads((SAMPLES / "coco" / "captions_sample.json").read_text())
    coco["annotations"].append({"image_id": coco["images"][0]["id"], "id": 99_999, "caption": "A " + "x" * 1_120_000})
    path = folder / "captions.json"
    path.write_text(json.dumps(coco))
    return str(path)


@pytest.mark.parametrize("flag", ["--max_caption_chars=2000000", "--nlp_batch_size=99999999999",
                                  "--direct_num_workers=-3"], ids=["n3", "n22b", "n22c"])
def test_a_flag_past_where_its_consumer_breaks_is_one_line(flag, tmp_path, capsys):
    """Issue 35: each was accepted and the run crashed in its consumer, with a traceback: spaCy's E088 on a 1.12 MB
    caption (N3), an OverflowError in spaCy's parser (N22b), an IndexError in Beam's FnApiRunner (N22c)."""
    out = tmp_path / "out"
    code = main(["--stage=train_negatives", f"--coco_captions={captions_with_a_long_one(tmp_path)}",
                 f"--output_dir={out}", "--progress_seconds=0", flag])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines[:3]
    assert lines[0].startswith(f"error: {flag.split('=')[0]}: must be from ")
    assert not out.exists()
