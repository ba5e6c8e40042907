"""Issue 27 F16: every numeric flag of HardposOptions is range-checked before any work. A value outside its range
(--seed=2**63, --temperature=nan, --top_p=7, ...) is refused with one line naming the flag and exit 2, nothing
written; it was accepted, the whole run happened, and then the counts did not add up or every row recorded it."""
from __future__ import annotations

import argparse

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.options import HardposOptions
from pipeline.run import main, parse
from tests.conftest import ARO_SAMPLE

INT64_END = str(2**63)
# Per numeric flag, values outside its range: below it, above it, not finite.
OUT_OF_RANGE = {
    "negatives_per_caption": ["0", "101"],
    "ranker_batch_size": ["0", INT64_END],
    "seed": ["-1", INT64_END, "1.5"],
    "nlp_batch_size": ["0"],
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
    "max_caption_chars": ["0", INT64_END],
    "max_caption_words": ["0"],
    "max_json_depth": ["0", "201"],
    "max_failed_fraction": ["nan", "1.5"],
    "max_substitution_share": ["0", "1.5", "nan"],
    "dask_workers": ["-1", "1025"],
}


def numeric_flags() -> set[str]:
    """The flags of HardposOptions that take a number (their default is one)."""
    parser = argparse.ArgumentParser()
    HardposOptions._add_argparse_args(parser)
    return {a.dest for a in parser._actions
            if isinstance(a.default, (int, float)) and not isinstance(a.default, bool)}


def test_f16_the_table_covers_every_numeric_flag():
    assert numeric_flags() == set(OUT_OF_RANGE)


@pytest.mark.parametrize("flag,value", [(f, v) for f, values in OUT_OF_RANGE.items() for v in values])
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
    _, opts = parse(["--stage=eval_sets", f"--aro_vga={ARO_SAMPLE}", f"--output_dir={tmp_path}",
                     f"--seed={2**63 - 1}", "--temperature=0", "--top_p=1", "--gpu_memory_utilization=1",
                     "--image_size=65535", "--max_failed_fraction=0", "--progress_seconds=86400"])
    assert (opts.seed, opts.temperature, opts.top_p, opts.image_size) == (2**63 - 1, 0.0, 1.0, 65535)


def test_f16_defaults_are_inside_their_ranges():
    options = PipelineOptions([]).view_as(HardposOptions)
    parser = argparse.ArgumentParser()
    HardposOptions._add_argparse_args(parser)
    for action in parser._actions:
        if action.dest in OUT_OF_RANGE:
            assert action.type(str(getattr(options, action.dest))) == action.default, action.dest
