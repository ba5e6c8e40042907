"""Throughput and memory of the train_negatives stage. Prints figures; asserts nothing.

    python benchmarks/negatives.py [--captions ../shared/data/coco/captions_val2017.json] [--skip_stage]
                                   [--types replace]

1. Each generator's core, one process, on every real caption of the file: spaCy parsing with only the
   components that generator needs (nlp.pipe, batch 256), then Generators.generate(n=1) per caption.
   Loading spaCy and the Generators (WordNet) is timed apart and left out of captions/s. The Generators
   load once and serve every generator; the WordNet lexicon caches fill during this first pass, so the
   replace figure includes that warm-up.
2. The whole stage through the DirectRunner, in a child process, on the full file and on its first 2,500
   captions: wall time and peak memory (max resident set size), and how the peak grows with the input.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.perturb.generators import NEGATIVE_TYPES, Generators, load_spacy  # noqa: E402
from pipeline.records import example_id  # noqa: E402
from pipeline.sources.coco import SOURCE, load_captions_file  # noqa: E402

BATCH_SIZE = 256  # the stage's default --nlp_batch_size
SUBSET = 2_500
CORE_TARGET = 600  # captions/s, replace core
STAGE_TARGET_S = 90  # full-file stage wall time
RSS_RATIO_TARGET = 1.5  # peak RSS full file / peak RSS subset
TIME = "/usr/bin/time"


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}" if seconds > 0 else "inf"


def read_captions(path: str) -> list[tuple[str, str]]:
    """(example_id, stripped caption) for every annotation, in file order."""
    _, annotations = load_captions_file(path)
    return [(example_id(SOURCE, str(a["id"])), a["caption"].strip()) for a in annotations]


def bench_core(captions: list[tuple[str, str]], types: list[str]) -> None:
    n = len(captions)
    texts = [text for _, text in captions]
    start = time.perf_counter()
    generators = Generators.load(list(NEGATIVE_TYPES))
    gen_load = time.perf_counter() - start
    print(f"Generator core, one process, {n:,} captions; nlp.pipe(batch_size={BATCH_SIZE}) + generate(seed=0, n=1).")
    print(f"One-off: Generators.load (WordNet lexicon + inflector, shared by all generators) {gen_load:.2f}s; "
          "spaCy load per generator in the table. Neither is in captions/s.")
    print("First pass: replace includes the WordNet lexicon cache warm-up.\n")
    header = (f"{'generator':<30} {'needs':<21} {'spacy load s':>12} {'parse c/s':>10} {'generate c/s':>12} "
              f"{'core c/s':>9} {'yield':>7}  target")
    print(header)
    print("-" * len(header))
    for name in types:
        start = time.perf_counter()
        nlp = load_spacy([name])
        spacy_load = time.perf_counter() - start
        needs = "+".join(p for p in nlp.pipe_names) or "tokenizer"

        start = time.perf_counter()
        docs = list(nlp.pipe(texts, batch_size=BATCH_SIZE))
        parse = time.perf_counter() - start

        hits = 0
        start = time.perf_counter()
        for (eid, _), doc in zip(captions, docs, strict=True):
            if generators.generate(name, doc, seed=0, example_id=eid, n=1):
                hits += 1
        generate = time.perf_counter() - start
        del docs

        core = parse + generate
        target = ""
        if name == "replace":
            target = f">= {CORE_TARGET} c/s: {'met' if n / core >= CORE_TARGET else 'NOT met'}"
        print(f"{name:<30} {needs:<21} {spacy_load:>12.2f} {_rate(n, parse):>10} {_rate(n, generate):>12} "
              f"{_rate(n, core):>9} {hits / n:>7.1%}  {target}")
    print("(c/s = captions per second; core = parse + generate time; yield = captions with >= 1 candidate)")


def write_subset(path: str, out_dir: str, size: int) -> str:
    """The first `size` annotations of the file, with the same images list, as a new captions file."""
    images, annotations = load_captions_file(path)
    subset = Path(out_dir) / f"captions_first{size}.json"
    subset.write_text(json.dumps({"images": images, "annotations": annotations[:size]}))
    return str(subset)


# Fallback without GNU time: the stage runs in a grandchild, so each measurement's peak is its own
# (RUSAGE_CHILDREN is a max over all children ever waited for).
_MEASURE = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "pipeline.run", *sys.argv[1:]], capture_output=True, text=True)
sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(done.returncode)
"""


def run_stage(captions_file: str, types: str) -> tuple[float, float, int, int]:
    """(wall s, peak RSS MB, captions read, rows written) of one train_negatives run."""
    with tempfile.TemporaryDirectory() as out:
        args = ["--stage=train_negatives", f"--coco_captions={captions_file}", f"--output_dir={out}",
                f"--negative_types={types}"]
        gnu_time = os.access(TIME, os.X_OK)
        if gnu_time:
            cmd = [TIME, "-v", sys.executable, "-m", "pipeline.run", *args]
        else:
            cmd = [sys.executable, "-c", _MEASURE, *args]
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"stage failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if gnu_time:
            found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
            peak_kb = int(found.group(1)) if found else 0
        else:
            peak_kb = int(done.stdout.split()[-1])
        table = json.loads((Path(out) / "report.json").read_text())["tables"]["train_negatives"]
    return wall, peak_kb / 1024, _total(table, "read"), _total(table, "rows")


def _total(table: dict, key: str) -> int:
    if isinstance(table.get(key), int):
        return table[key]
    files = table.get("files", {})
    return sum(f.get(key, 0) for f in files.values()) if isinstance(files, dict) else 0


def bench_stage(captions_file: str, types: str) -> None:
    how = f"{TIME} -v" if os.access(TIME, os.X_OK) else "getrusage(RUSAGE_CHILDREN)"
    print(f"\nStage train_negatives, DirectRunner defaults, --negative_types={types}; peak RSS from {how}.")
    tmp = tempfile.mkdtemp(prefix="negatives_bench_")
    try:
        subset_file = write_subset(captions_file, tmp, SUBSET)
        results = {}
        for label, path in ((f"first {SUBSET:,}", subset_file), ("full file", captions_file)):
            results[label] = run_stage(path, types)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    header = f"{'input':<14} {'captions':>9} {'rows':>9} {'wall s':>8} {'captions/s':>10} {'peak RSS MB':>12}"
    print(header)
    print("-" * len(header))
    for label, (wall, peak, read, rows) in results.items():
        print(f"{label:<14} {read:>9,} {rows:>9,} {wall:>8.1f} {_rate(read, wall):>10} {peak:>12,.0f}")
    full_wall, full_peak = results["full file"][:2]
    small_peak = results[f"first {SUBSET:,}"][1]
    ratio = full_peak / small_peak if small_peak else float("inf")
    print(f"full-file wall {full_wall:.1f}s (target <= {STAGE_TARGET_S}s: "
          f"{'met' if full_wall <= STAGE_TARGET_S else 'NOT met'}); "
          f"peak RSS ratio full/subset {ratio:.2f} (target <= {RSS_RATIO_TARGET}: "
          f"{'met' if ratio <= RSS_RATIO_TARGET else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", default=str(REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"))
    parser.add_argument("--types", default="replace",
                        help="--negative_types for the stage run (comma-separated, or all); default replace")
    parser.add_argument("--skip_stage", action="store_true", help="only the per-generator core figures")
    args = parser.parse_args()
    bench_core(read_captions(args.captions), list(NEGATIVE_TYPES))
    if not args.skip_stage:
        bench_stage(args.captions, args.types)


if __name__ == "__main__":
    main()
