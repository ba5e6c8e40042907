"""Throughput and memory of the eval_sets stage. Prints figures; asserts nothing.

    python benchmarks/eval_sets.py [--vl_checklist_root ../shared/data/vl_checklist] [--skip_pipeline]

1. The REPLACE rule alone (source normalisation + replacement) on every real VL-CheckList record, one core.
2. The SWAP rule alone on an ARO-sized set (28,748 records) made by cycling the embedded ARO sample
   (the real ARO file is not available here).
3. The whole stage through the DirectRunner, in a child process: wall time and peak memory.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.perturb.eval_replace import ReplaceTable, replace_hard_positive  # noqa: E402
from pipeline.perturb.eval_swap import swap_hard_positive  # noqa: E402
from pipeline.perturb.outcomes import Skip  # noqa: E402
from pipeline.sources import aro, vl_checklist  # noqa: E402
from pipeline.sources.files import read_json_list  # noqa: E402

ARO_SAMPLE = REPO / "samples" / "aro" / "visual_genome_attribution.json"
ARO_SIZE = 28_748  # rows of ARO VG-Attribution, as in the paper


def bench_replace(root: str) -> None:
    table = ReplaceTable.load()
    files = {key: read_json_list(f"{root}/{rel}") for key, rel in vl_checklist.FILES.items()}
    n = rows = 0
    start = time.perf_counter()
    for (subset, category), records in files.items():
        for i, raw in enumerate(records):
            n += 1
            try:
                r = vl_checklist.normalise(raw, vl_checklist.FILES[(subset, category)], i, subset, category)
                replace_hard_positive(r["caption"], r["hard_negative"], subset, category, table)
                rows += 1
            except Skip:
                pass
    elapsed = time.perf_counter() - start
    print(f"REPLACE rule: {n} records in {elapsed:.2f}s = {n / elapsed:,.0f} records/s on one core ({rows} rows)")


def bench_swap() -> None:
    raw = json.loads(ARO_SAMPLE.read_text())
    records = list(islice(cycle(raw), ARO_SIZE))
    n = rows = 0
    start = time.perf_counter()
    for i, record in enumerate(records):
        n += 1
        try:
            r = aro.normalise(record, "visual_genome_attribution.json", i)
            swap_hard_positive(r["caption"], r["hard_negative"], tuple(r["attributes"]), r["obj1_name"], r["obj2_name"])
            rows += 1
        except Skip:
            pass
    elapsed = time.perf_counter() - start
    print(f"SWAP rule:    {n} records in {elapsed:.2f}s = {n / elapsed:,.0f} records/s on one core ({rows} rows)")


# Runs the stage in a grandchild, so each measurement's peak memory is its own (RUSAGE_CHILDREN is a max).
_MEASURE = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-m", "pipeline.run", *sys.argv[1:]], check=True, capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def bench_pipeline(root: str, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as out:
        args = ["--stage=eval_sets", f"--vl_checklist_root={root}", f"--output_dir={out}", *extra]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _MEASURE, *args], cwd=REPO, check=True, capture_output=True,
                              text=True)
        elapsed = time.perf_counter() - start
        read = json.loads((Path(out) / "report.json").read_text())["tables"]["replace"]["read"]
    peak_mb = int(done.stdout.split()[-1]) / 1024
    label = " ".join(extra) or "default DirectRunner"
    print(f"stage eval_sets ({label}): {read} records in {elapsed:.1f}s wall = {read / elapsed:,.0f} records/s, "
          f"peak memory {peak_mb:,.0f} MB (largest process)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vl_checklist_root", default=str(REPO.parent / "shared" / "data" / "vl_checklist"))
    parser.add_argument("--skip_pipeline", action="store_true")
    args = parser.parse_args()
    bench_replace(args.vl_checklist_root)
    bench_swap()
    if not args.skip_pipeline:
        bench_pipeline(args.vl_checklist_root, [])
        bench_pipeline(args.vl_checklist_root, ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])


if __name__ == "__main__":
    main()
