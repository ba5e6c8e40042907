"""Where the CPU of `--stage=all` goes, per stage and by part, against the parser's own cost (issue 44).

    .venv/bin/python benchmarks/cpu_breakdown.py [--captions 25014] [--work /tmp/hardpos-cpu] [--skip_chain]

1. The yardstick: one process parses the captions with the spaCy pipeline the stages load (tok2vec, tagger,
   parser; `generators.load_spacy`), `nlp.pipe` in batches of --nlp_batch_size, on one core. CPU-seconds.
2. The chain as users run it: `--stage=all` on the DirectRunner, 2 worker processes (multi_processing), its
   CPU-seconds summed over the launcher and every worker (the children's rusage).
3. Each stage of the chain again, in one process (`--direct_running_mode=in_memory`, where Beam runs the DoFns in
   the calling thread) under cProfile. Every function's own time goes to a part by the file it lives in; the
   time of builtins, NumPy and the standard library goes to the parts of their callers, in proportion to the
   time each caller spent in them. Parts: parse (spaCy, thinc), candidate generation (pipeline/perturb, the stage
   DoFns), ranking and statistics (perturb/corpus, rank, relations), WordNet (nltk, perturb/wordnet), validation
   (llm/validate, perturb/guards), I/O (pyarrow, pipeline/io, pipeline/sources, spill and JSON), the runner (Beam),
   start-up (imports, loading models), and the rest. It also counts the docs spaCy's parser made: parses per
   caption.
Prints the tables and writes <work>/cpu_breakdown.json. --captions above 25,014 uses the full-size rehearsal's
varied copies (benchmarks/full_size.py).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.full_size import VAL2017, build_captions  # noqa: E402

STAGES = ("train_negatives", "hard_positives", "train_set")
# (part, path fragments), first match wins; builtins ("~"), NumPy and the standard library go to their callers.
PARTS = (
    ("parse", ("spacy/", "thinc/", "cymem/", "preshed/", "srsly/", "blis/", "/catalogue/", "/confection/")),
    ("WordNet", ("/nltk/", "pipeline/perturb/wordnet.py")),
    ("validation", ("pipeline/llm/validate.py", "pipeline/perturb/guards.py")),
    ("ranking and statistics", ("pipeline/perturb/rank.py", "pipeline/perturb/corpus.py",
                                "pipeline/perturb/relations.py")),
    ("candidate generation", ("pipeline/perturb/", "pipeline/stages/", "pipeline/llm/", "pipeline/records.py")),
    ("I/O", ("/pyarrow/", "pipeline/io/", "pipeline/sources/", "pipeline/tables/", "/fastavro/", "/orjson")),
    ("runner", ("/apache_beam/", "/grpc/", "/google/protobuf/", "/dill/", "/cloudpickle/", "/objsize",
                "/crcmod/", "/dask/", "/distributed/")),
)
# spacy/tokens: a Doc's tokens read by the rules (Cython files are named relative: spacy/tokens/doc.pyx)
NEUTRAL = ("/numpy/", "<string>", "<frozen ", "spacy/tokens/")
STARTUP, OTHER = "start-up (imports, loading models)", "rest"
# Calls whose whole time is start-up, whatever they call: imports, and loading spaCy, WordNet, rules, validator.
STARTUP_ROOTS = (("importlib._bootstrap", "_find_and_load"), ("pipeline/", "setup"), ("pipeline/", "load"),
                 ("pipeline/perturb/generators.py", "load_spacy"), ("pipeline/llm/validate.py", "shared_validator"),
                 ("/spacy/__init__.py", "load"))
PROFILED = """
import cProfile, sys, time
sys.path.insert(0, {repo!r})
import spacy.language
parsed = [0]
_pipe = spacy.language.Language.pipe
def pipe(self, texts, *a, **k):
    counting = "parser" in self.pipe_names
    for doc in _pipe(self, texts, *a, **k):
        parsed[0] += counting
        yield doc
spacy.language.Language.pipe = pipe
from pipeline.run import main
profile = cProfile.Profile(time.process_time)  # CPU, not the waits of a thread
profile.enable()
code = main({argv!r})
profile.disable()
profile.dump_stats({stats!r})
print("PARSED", parsed[0], "EXIT", code)
"""


def part_of(filename: str) -> str | None:
    """The part a function's own time belongs to by its file; None where it goes to its callers (builtins, NumPy,
    the standard library)."""
    if filename.startswith("~") or any(n in filename for n in NEUTRAL) or (
            "/lib/python3." in filename and "site-packages" not in filename):
        return None
    for part, fragments in PARTS:
        if any(f in filename for f in fragments):
            return part
    return OTHER


def breakdown(stats_path: Path) -> dict[str, float]:
    """CPU-seconds per part from a cProfile dump. A function's own time is split over its callers by the time it
    spent for each: the share its callers owe to start-up is start-up, the rest its file's part (or, for a neutral
    function, its callers' parts)."""
    import pstats

    sys.setrecursionlimit(20_000)
    stats = pstats.Stats(str(stats_path)).stats
    shares: dict = {}

    def share(func) -> dict[str, float]:
        if func in shares:
            return shares[func]
        own = part_of(func[0])
        if any(f in func[0] and func[2] == name for f, name in STARTUP_ROOTS):
            shares[func] = {STARTUP: 1.0}
            return shares[func]
        shares[func] = {own or OTHER: 1.0}  # a call cycle back to this function counts as its own part
        callers = stats.get(func, (0, 0, 0, 0, {}))[4]
        total = sum(edge[3] for edge in callers.values())
        if not total:
            return shares[func]
        mixed: dict[str, float] = {}
        for caller, edge in callers.items():
            weight = edge[3] / total
            caller_share = share(caller)
            startup = caller_share.get(STARTUP, 0.0)
            mixed[STARTUP] = mixed.get(STARTUP, 0.0) + weight * startup
            if own:
                mixed[own] = mixed.get(own, 0.0) + weight * (1.0 - startup)
            else:
                for p, s in caller_share.items():
                    if p != STARTUP:
                        mixed[p] = mixed.get(p, 0.0) + weight * s
        shares[func] = mixed
        return mixed

    seconds: dict[str, float] = {}
    for func, (_, _, own_time, _, _) in stats.items():
        for p, s in share(func).items():
            seconds[p] = seconds.get(p, 0.0) + own_time * s
    return seconds


def yardstick(captions: list[str], batch_size: int) -> dict:
    """One core, the stages' spaCy pipeline over the captions: CPU-seconds and docs."""
    from pipeline.perturb.generators import load_spacy

    nlp = load_spacy(["replace", "exchange"], None)
    started = time.process_time()
    docs = sum(1 for _ in nlp.pipe(captions, batch_size=batch_size))
    cpu = time.process_time() - started
    return {"captions": docs, "cpu_s": round(cpu, 2), "ms_per_caption": round(1000 * cpu / docs, 3),
            "components": [name for name in nlp.pipe_names]}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_chain(captions_path: Path, out: Path, log: Path) -> dict:
    """--stage=all as users run it: 2 worker processes; wall and CPU-seconds of all processes."""
    subprocess.run(["rm", "-rf", str(out)], check=True)
    before, started = children_cpu(), time.monotonic()
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "-m", "pipeline.run", "--runner=DirectRunner", "--stage=all",
                               f"--coco_captions={captions_path}", f"--output_dir={out}",
                               "--direct_num_workers=2", "--direct_running_mode=multi_processing",
                               "--progress_seconds=0"], cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
    return {"exit": code, "wall_s": round(time.monotonic() - started, 1), "cpu_s": round(children_cpu() - before, 1)}


def run_profiled(stage: str, captions_path: Path, out: Path, work: Path) -> dict:
    """One stage in one process under cProfile: its CPU-seconds, parts and parses."""
    stats = work / f"{stage}.prof"
    argv = ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory",
            f"--stage={stage}", f"--coco_captions={captions_path}", f"--output_dir={out}", "--progress_seconds=0"]
    script = PROFILED.format(repo=str(REPO), argv=argv, stats=str(stats))
    before, started = children_cpu(), time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    cpu, wall = children_cpu() - before, time.monotonic() - started
    last = [line for line in done.stdout.splitlines() if line.startswith("PARSED ")]
    if done.returncode or not last or not last[-1].endswith("EXIT 0"):
        raise SystemExit(f"{stage} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    parts = breakdown(stats)
    return {"cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "profiled_s": round(sum(parts.values()), 1),
            "parsed_docs": int(last[-1].split()[1]), "parts_s": {k: round(v, 2) for k, v in sorted(parts.items())}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", type=int, default=0, help="0: val2017 as it is (25,014)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/hardpos-cpu"))
    parser.add_argument("--nlp_batch_size", type=int, default=256)
    parser.add_argument("--skip_chain", action="store_true", help="no 2-worker --stage=all run")
    ns = parser.parse_args(argv)
    ns.work.mkdir(parents=True, exist_ok=True)
    source = json.loads(VAL2017.read_text())
    data = build_captions(source, ns.captions) if ns.captions else source
    captions_path = ns.work / "captions.json"
    captions_path.write_text(json.dumps(data))
    texts = [a["caption"].strip() for a in data["annotations"]]
    n = len(texts)
    results = {"captions": n, "yardstick": yardstick(texts, ns.nlp_batch_size)}
    y = results["yardstick"]
    print(f"yardstick: spaCy {'+'.join(y['components'])} over {n:,} captions on one core: {y['cpu_s']} CPU-s, "
          f"{y['ms_per_caption']} ms per caption", flush=True)
    if not ns.skip_chain:
        chain = results["chain"] = run_chain(captions_path, ns.work / "chain", ns.work / "chain.log")
        print(f"--stage=all, 2 workers: exit {chain['exit']}, wall {chain['wall_s']} s, CPU {chain['cpu_s']} s = "
              f"{1000 * chain['cpu_s'] / n:.2f} ms per caption = {chain['cpu_s'] / y['cpu_s']:.2f}x the yardstick",
              flush=True)
    out = ns.work / "profiled"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    results["stages"] = {}
    for stage in STAGES:  # each stage alone (hard_positives then parses for itself), then the chain
        results["stages"][stage] = run_profiled(stage, captions_path, out, ns.work)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    results["stages"]["all"] = run_profiled("all", captions_path, out, ns.work)
    names = [p for p, _ in PARTS] + [STARTUP, OTHER]
    columns = [*STAGES, "all"]
    print("\none process under cProfile, ms per caption (cProfile slows Python code more than C); the stages run "
          "apart, then --stage=all, and the chain against the yardstick:")
    print(f"{'part':<36}" + "".join(f"{s:>16}" for s in columns) + f"{'x yardstick':>13}")

    def line(label, values, ratio=True):
        print(f"{label:<36}" + "".join(f"{v:>16.3f}" for v in values) +
              (f"{values[-1] / y['ms_per_caption']:>13.2f}" if ratio else ""))

    for part in names:
        line(part, [1000 * results["stages"][s]["parts_s"].get(part, 0.0) / n for s in columns])
    line("profiled total", [1000 * results["stages"][s]["profiled_s"] / n for s in columns])
    line("process CPU, profiled", [1000 * results["stages"][s]["cpu_s"] / n for s in columns])
    line("parses per caption", [results["stages"][s]["parsed_docs"] / n for s in columns], ratio=False)
    results["parses_per_caption"] = round(results["stages"]["all"]["parsed_docs"] / n, 3)
    (ns.work / "cpu_breakdown.json").write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {ns.work / 'cpu_breakdown.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
