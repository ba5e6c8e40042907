"""Throughput and memory of the train_negatives stage. Prints figures; asserts nothing.

    python benchmarks/negatives.py [--captions ../shared/data/coco/captions_val2017.json] [--skip_stage]
                                   [--types replace] [--ranker ngram|lm|none] [--baseline_seconds 67.7]
                                   [--lm_captions 500]

1. Each generator's core, one process, on every real caption of the file: spaCy parsing with only the
   components that generator needs (nlp.pipe, batch 256), then proposing every candidate and ranking them
   with the trigram model of the same captions (replace, swap, negclip), or drawing (order perturbations).
   Loading spaCy and the Generators (WordNet) and counting the corpus are timed apart and left out of
   captions/s. The WordNet lexicon caches fill during this first pass, so the replace figure includes that
   warm-up.
2. The whole stage through the DirectRunner, in a child process, on the full file and on its first 2,500
   captions: wall time and peak memory (max resident set size), how the peak grows with the input, and the
   full-file time against --baseline_seconds (issue 12's budget: at most 1.5x the replace stage before ranking).
3. With --lm_captions N > 0: the core with --negative_ranker=lm (the embedded SmolLM2-135M-Instruct on this
   machine's device) on the first N captions, in captions/s.
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

from pipeline.perturb.corpus import CorpusCounts  # noqa: E402
from pipeline.perturb.generators import NEGATIVE_TYPES, RANKED, Generators, load_spacy  # noqa: E402
from pipeline.perturb.rank import NgramScorer  # noqa: E402
from pipeline.records import example_id  # noqa: E402
from pipeline.sources.coco import SOURCE, load_captions_file  # noqa: E402

BATCH_SIZE = 256  # the stage's default --nlp_batch_size
SUBSET = 2_500
STAGE_RATIO_TARGET = 1.5  # full-file stage wall time / the stage's time before ranking (issue 12)
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
    ids = [eid for eid, _ in captions]
    start = time.perf_counter()
    generators = Generators.load(list(NEGATIVE_TYPES))
    gen_load = time.perf_counter() - start
    start = time.perf_counter()
    counts = CorpusCounts()
    for text in texts:
        counts.add(text)
    corpus = counts.model()
    corpus_s = time.perf_counter() - start
    print(f"Generator core, one process, {n:,} captions; nlp.pipe(batch_size={BATCH_SIZE}) + every candidate, "
          "ranked by the trigram model (replace, swap, negclip) or drawn (order perturbations), n=1.")
    print(f"One-off: Generators.load (WordNet lexicon + inflector) {gen_load:.2f}s; corpus first pass "
          f"{corpus_s:.2f}s ({len(corpus.vocabulary):,} words, {len(corpus.keys3):,} trigrams); spaCy load per "
          "generator in the table. None of these is in captions/s.")
    print("First pass: replace includes the WordNet lexicon cache warm-up.\n")
    header = (f"{'generator':<30} {'needs':<21} {'spacy load s':>12} {'parse c/s':>10} {'generate c/s':>12} "
              f"{'core c/s':>9} {'yield':>7}")
    print(header)
    print("-" * len(header))
    scorer = NgramScorer(corpus)
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
        if name in RANKED:
            one = Generators(list(dict.fromkeys([name, *(["swap"] if name == "negclip" else [])])),
                             generators.lexicon, generators.inflector)
            for at in range(0, n, BATCH_SIZE):
                found = one.negatives(docs[at:at + BATCH_SIZE], ids[at:at + BATCH_SIZE], 0, 1, corpus, scorer)
                hits += sum(bool(f[name]) for f in found)
        else:
            hits = sum(bool(generators.order(name, doc, 0, eid, 1)) for eid, doc in zip(ids, docs, strict=True))
        generate = time.perf_counter() - start
        del docs

        core = parse + generate
        print(f"{name:<30} {needs:<21} {spacy_load:>12.2f} {_rate(n, parse):>10} {_rate(n, generate):>12} "
              f"{_rate(n, core):>9} {hits / n:>7.1%}")
    print("(c/s = captions per second; core = parse + generate time; yield = captions with >= 1 candidate;\n"
          " negclip's core proposes swap too, as the stage does, to exclude swap's texts)")


def bench_lm(captions: list[tuple[str, str]], count: int) -> None:
    from pipeline.llm.scoring import LMScorer

    captions = captions[:count]
    texts, ids = [t for _, t in captions], [e for e, _ in captions]
    start = time.perf_counter()
    scorer = LMScorer()
    load = time.perf_counter() - start
    nlp = load_spacy(list(RANKED))
    generators = Generators.load(list(RANKED))
    counts = CorpusCounts()
    for text in texts:
        counts.add(text)
    docs = list(nlp.pipe(texts, batch_size=BATCH_SIZE))
    start = time.perf_counter()
    found = generators.negatives(docs, ids, 0, 1, counts.model(), scorer)
    took = time.perf_counter() - start
    scored = sum(len(f[t]) for f in found for t in RANKED)
    print(f"\n--negative_ranker=lm ({scorer.model_name}, {scorer.device}): model load {load:.1f}s; "
          f"replace+swap+negclip on {len(captions):,} captions in {took:.1f}s = {_rate(len(captions), took)} "
          f"captions/s ({scored:,} negatives emitted).")


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


def run_stage(captions_file: str, types: str, ranker: str = "ngram") -> tuple[float, float, int, int]:
    """(wall s, peak RSS MB, captions read, rows written) of one train_negatives run."""
    with tempfile.TemporaryDirectory() as out:
        args = ["--stage=train_negatives", f"--coco_captions={captions_file}", f"--output_dir={out}",
                f"--negative_types={types}", f"--negative_ranker={ranker}", "--progress_seconds=0"]
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


def bench_stage(captions_file: str, types: str, ranker: str, baseline_s: float) -> None:
    how = f"{TIME} -v" if os.access(TIME, os.X_OK) else "getrusage(RUSAGE_CHILDREN)"
    print(f"\nStage train_negatives, DirectRunner defaults, --negative_types={types} --negative_ranker={ranker}; "
          f"peak RSS from {how}.")
    tmp = tempfile.mkdtemp(prefix="negatives_bench_")
    try:
        subset_file = write_subset(captions_file, tmp, SUBSET)
        results = {}
        for label, path in ((f"first {SUBSET:,}", subset_file), ("full file", captions_file)):
            results[label] = run_stage(path, types, ranker)
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
    print(f"full-file wall {full_wall:.1f}s = {full_wall / baseline_s:.2f}x the {baseline_s:.1f}s baseline (target "
          f"<= {STAGE_RATIO_TARGET}x: {'met' if full_wall <= STAGE_RATIO_TARGET * baseline_s else 'NOT met'}); "
          f"peak RSS ratio full/subset {ratio:.2f} (target <= {RSS_RATIO_TARGET}: "
          f"{'met' if ratio <= RSS_RATIO_TARGET else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", default=str(REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"))
    parser.add_argument("--types", default="replace",
                        help="--negative_types for the stage run (comma-separated, or all); default replace")
    parser.add_argument("--ranker", default="ngram", choices=("ngram", "lm", "none"),
                        help="--negative_ranker of the stage run (default ngram)")
    parser.add_argument("--baseline_seconds", type=float, default=67.7,
                        help="the replace stage's wall time before ranking, on the same machine (issue 12: 67.7)")
    parser.add_argument("--lm_captions", type=int, default=0, help="also time the lm ranker on this many captions")
    parser.add_argument("--skip_core", action="store_true", help="skip the per-generator core figures")
    parser.add_argument("--skip_stage", action="store_true", help="only the per-generator core figures")
    args = parser.parse_args()
    captions = read_captions(args.captions)
    if not args.skip_core:
        bench_core(captions, list(NEGATIVE_TYPES))
    if args.lm_captions > 0:
        bench_lm(captions, args.lm_captions)
    if not args.skip_stage:
        bench_stage(args.captions, args.types, args.ranker, args.baseline_seconds)


if __name__ == "__main__":
    main()
