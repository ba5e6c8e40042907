import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.publish.layout import write_run_folder  # noqa: F401  (the tests build run folders with it)

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
VL_SAMPLE = SAMPLES / "vl_checklist"
ARO_SAMPLE = SAMPLES / "aro" / "visual_genome_attribution.json"
SHARED_DATA = Path(os.environ.get("HARDPOS_SHARED_DATA", REPO.parent / "shared" / "data"))


# a progress line: "[<stage>   12.3s] ..."
PROGRESS_LINE = re.compile(r"^\[\w+ +[\d.]+s\] ")


def run_cli(*args: str, module: str = "pipeline.run", env: dict | None = None) -> subprocess.CompletedProcess:
    """The command as a user types it, in a fresh interpreter (`env`: its environment, default this one's)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)


def run_without_pipeline(code: str, *args: str) -> subprocess.CompletedProcess:
    """`python -c code args` in a fresh interpreter where apache_beam, spacy and nltk cannot be found, installed or
    not, as on a machine with only the train or eval extra (tests/not_installed.py)."""
    prelude = "from tests.not_installed import hide; hide()\n"
    return subprocess.run([sys.executable, "-c", prelude + code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def as_main(module: str) -> str:
    """The code that runs `module` as `python -m module` does."""
    return f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"


def setup_arguments() -> dict:
    """The keyword arguments setup.py passes to setuptools.setup, computed ones (the extras) included."""
    import runpy

    import setuptools

    captured = {}
    original = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        runpy.run_path(str(REPO / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = original
    return captured


def one_error_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    """The single line a refused command prints (and its exit code must be `code`)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def eval_sets_args(output_dir, vl=VL_SAMPLE, aro=ARO_SAMPLE, *extra):
    args = ["--stage=eval_sets", f"--output_dir={output_dir}"]
    if vl:
        args.append(f"--vl_checklist_root={vl}")
    if aro:
        args.append(f"--aro_vga={aro}")
    return [*args, *extra]


@pytest.fixture(scope="session")
def sample_output(tmp_path_factory):
    """One run of the eval_sets stage on the embedded samples, shared by the tests that only read it."""
    from pipeline.run import main

    out = tmp_path_factory.mktemp("sample_out")
    assert main(eval_sets_args(out)) == 0
    return out


def report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def visible_files(out: Path) -> dict[str, bytes]:
    """What a user or a plain glob sees: every file but those in dot-folders and the dot-files (the lock), with its
    bytes."""
    files = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            files[relative.as_posix()] = path.read_bytes()
    return files


def rows_of(out: Path, folder: str) -> list[dict]:
    """Every row of the Parquet files in out/folder, in file order."""
    import pyarrow.parquet as pq

    return [r for p in sorted((out / folder).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


# The heaviest test files first (in this order: their seconds on 2 cores, one process). `make test` runs the suite
# in two processes, a file in one of them: started last, a heavy file runs alone at the end.
HEAVY_FIRST = ("test_dask_runner.py", "test_hard_positives_stage.py", "test_commit_recovery.py", "test_real_model.py",
               "test_round4.py", "test_corpus.py", "test_train_negatives_stage.py", "test_commit_chain.py",
               "test_publish.py", "test_spill.py", "test_commit_protocol.py", "test_commit_inputs.py",
               "test_commit_links.py", "test_corpus_rank.py", "test_commit_disk_full.py", "test_images_stage.py",
               "test_progress.py", "test_llm_negatives.py", "test_cli.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept
