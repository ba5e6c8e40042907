"""What a Dask worker holds during `--stage=all`, per worker and over time: its peak RSS and what the peak is made of.

    .venv/bin/python benchmarks/dask_worker_memory.py [--captions 100000] [--workers 2] [--memory_limit 2GiB]
        [--spill on|off] [--work /tmp/hardpos-dask-memory]

The benchmark starts a local Dask cluster of its own (worker processes of one thread, --memory_limit each) and runs
`python -m pipeline.run --stage=all --runner=DaskRunner --dask_client_address=...` on it, over the rehearsal's
captions (benchmarks/full_size.py: varied copies of val2017 with fresh caption and image ids). Every second it asks
each worker (Client.run) for:
- its RSS, its pid (a new pid under the same name is a restart) and its status (paused or running);
- Dask's managed memory: the bytes of the task results it holds (sizeof), in memory and spilled to disk, side inputs
  aside (Dask's sizeof takes a CorpusModel for about 100 bytes);
- the side inputs it holds: the results of the side-input tasks (a list of the one value of an AsSingleton), each
  measured once as its pickled size, by the type of the value (CorpusModel, dict, ...).
The fixed part of a worker (Python and Beam, spaCy with the components the stages keep, WordNet and the lexicon, the
rule data and validator) is measured in a fresh process, step by step. A worker's peak is then split into: fixed
parts, side inputs, the rest of Dask's managed memory, and the rest (what the stages' code holds while it runs,
allocator slack). Prints a table per worker and writes <work>/dask_worker_memory.json; with --baseline (that file
of another size) also the growth of each part per 100,000 captions.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.full_size import tables_of, train_is_the_intersection, write_inputs  # noqa: E402

MB = 2 ** 20
FIXED_PARTS = """
import gc, json, psutil
def rss(): gc.collect(); return psutil.Process().memory_info().rss
steps = [("python", rss())]
import apache_beam, pipeline.run  # noqa
steps.append(("Beam and the pipeline's modules", rss()))
from pipeline.perturb.generators import Generators, load_spacy
nlp = load_spacy(["replace", "exchange"], None)
steps.append(("spaCy (tok2vec, tagger, parser)", rss()))
generators = Generators.load(["replace", "exchange"])
steps.append(("WordNet, lexicon, inflector", rss()))
from pipeline.llm.validate import shared_validator
from pipeline.perturb.positives import RULE_POSITIVE_TYPES, RulePositives
rules = RulePositives.load(list(RULE_POSITIVE_TYPES)); validator = shared_validator(True)
steps.append(("rule data and validator", rss()))
print(json.dumps(steps))
"""


def fixed_parts() -> list[tuple[str, float]]:
    """(part, MB) of what every worker that runs the stages loads, measured in a fresh process, step by step."""
    done = subprocess.run([sys.executable, "-c", FIXED_PARTS], cwd=REPO, capture_output=True, text=True, check=True)
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    return [(name, (rss - steps[i - 1][1]) / MB if i else rss / MB) for i, (name, rss) in enumerate(steps)]


def _probe(dask_worker):
    """In a worker: RSS, pid, status, managed memory (in memory, spilled) and the side inputs held (pickled size,
    measured once per key)."""
    import os
    import pickle

    import psutil

    tasks, data = dask_worker.state.tasks, dask_worker.data

    def nbytes(key) -> int:
        task = tasks.get(key)
        return (task.nbytes or 0) if task is not None else 0

    fast = getattr(data, "fast", data)
    in_memory = sum(nbytes(k) for k in list(fast))
    spilled = sum(nbytes(k) for k in list(getattr(data, "slow", {})))
    sizes = dask_worker.__dict__.setdefault("_hardpos_side_sizes", {})
    sides, side_managed = {}, 0
    for key in list(fast):
        try:
            value = fast[key]
        except KeyError:
            continue
        # a side-input task's result: the list of the side input's values (runners/dask_runner: _all_values); Dask's
        # sizeof takes a CorpusModel for ~100 bytes, so its pickled size is measured here
        if isinstance(value, list) and str(key).startswith("_all_values"):
            if key not in sizes:
                sizes[key] = (type(value[0]).__name__ if value else "empty",
                              len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
            sides[str(key)] = sizes[key]
            side_managed += nbytes(key)
    kinds = {str(k)[:60]: (type(fast[k]).__name__ if k in fast else "?", nbytes(k),
                           [type(v).__name__ for v in fast[k][:2]] if isinstance(fast.get(k), list) else [])
             for k in list(fast)}
    running = sorted(str(t.key[0] if isinstance(t.key, tuple) else t.key).rsplit("-", 1)[0]
                     for t in list(getattr(dask_worker.state, "executing", ())))
    return {"pid": os.getpid(), "rss": psutil.Process().memory_info().rss, "status": str(dask_worker.status),
            "running": running,
            "keys": dict(sorted(kinds.items(), key=lambda kv: -kv[1][1])[:6]),
            "managed_in_memory": in_memory - side_managed, "managed_spilled": spilled, "side_inputs": sides}


class WorkerSampler(threading.Thread):
    """Samples every worker once a second (Client.run) until stopped; keeps per worker name its peak RSS with
    what was held at that moment, its pids (restarts), and the seconds it was seen paused."""

    def __init__(self, client, every: float = 1.0):
        super().__init__(daemon=True)
        self.client, self.every = client, every
        self.workers: dict[str, dict] = {}
        self.largest_side: dict[str, int] = {}
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            try:
                found = self.client.run(_probe, nanny=False, on_error="return")
                names = {w: info.get("name", w) for w, info in self.client.scheduler_info()["workers"].items()}
            except Exception:  # noqa: BLE001 - a worker restarting or the run ending: sample again
                self.stopped.wait(self.every)
                continue
            for address, sample in found.items():
                if not isinstance(sample, dict):
                    continue
                name = str(names.get(address, address))
                w = self.workers.setdefault(name, {"pids": [], "peak": None, "paused_samples": 0, "samples": 0})
                if sample["pid"] not in w["pids"]:
                    w["pids"].append(sample["pid"])
                w["samples"] += 1
                # the RSS a worker gained since its last sample, put down to the steps running now: what drives
                # its growth (RSS rarely shrinks, so the peak's own moment says less)
                last = w.get("last")
                if last is not None and last["pid"] == sample["pid"] and sample["rss"] > last["rss"]:
                    for step in set(sample.get("running", [])) or {"(between tasks)"}:
                        gained = w.setdefault("gained_by_step", {})
                        gained[step] = gained.get(step, 0) + (sample["rss"] - last["rss"]) / max(
                            1, len(set(sample.get("running", []))))
                w["last"] = {"pid": sample["pid"], "rss": sample["rss"]}
                w["paused_samples"] += "paused" in sample["status"].lower()
                if w["peak"] is None or sample["rss"] > w["peak"]["rss"]:
                    w["peak"] = sample
                for key, (kind, size) in sample["side_inputs"].items():
                    self.largest_side[f"{kind} {key[:40]}"] = max(self.largest_side.get(f"{kind} {key[:40]}", 0),
                                                                  size)
            self.stopped.wait(self.every)


def breakdown(peak: dict, fixed: list[tuple[str, float]]) -> dict:
    """A worker's peak RSS split into the fixed parts, side inputs, other managed memory and the rest (MB)."""
    side = sum(size for _, size in peak["side_inputs"].values()) / MB
    managed = peak["managed_in_memory"] / MB
    parts = {name: round(mb, 1) for name, mb in fixed}
    parts["side inputs held (pickled)"] = round(side, 1)
    parts["other Dask managed memory"] = round(managed, 1)
    parts["the rest"] = round(peak["rss"] / MB - sum(mb for _, mb in fixed) - side - managed, 1)
    return {"peak_rss_mb": round(peak["rss"] / MB, 1), "parts": parts, "running_at_peak": peak.get("running", []),
            "side_inputs": {k: [kind, round(size / MB, 2)] for k, (kind, size) in peak["side_inputs"].items()},
            "managed_spilled_mb": round(peak["managed_spilled"] / MB, 1)}


def run(ns) -> dict:
    import dask.distributed as ddist

    ns.work.mkdir(parents=True, exist_ok=True)
    captions_path, _, made = write_inputs(ns.work, ns.captions, False)
    fixed = fixed_parts()
    out, spill = ns.work / "out", ns.work / "spill"
    subprocess.run(["rm", "-rf", str(out), str(spill)], check=True)
    cluster = ddist.LocalCluster(n_workers=ns.workers, threads_per_worker=1, memory_limit=ns.memory_limit,
                                 dashboard_address=None, processes=True)
    client = ddist.Client(cluster)
    sampler = WorkerSampler(client)
    sampler.start()
    command = [sys.executable, "-m", "pipeline.run", "--stage=all", f"--coco_captions={captions_path}",
               f"--output_dir={out}", "--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}",
               "--progress_seconds=60", *([f"--spill_dir={spill}"] if ns.spill == "on" else [])]
    started = time.monotonic()
    with open(ns.work / "run.log", "w") as log:
        code = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - started
    sampler.stopped.set()
    sampler.join()
    client.close()
    cluster.close()
    result = {"captions": made["captions"], "workers": ns.workers, "memory_limit": ns.memory_limit, "spill": ns.spill,
              "exit": code, "wall_s": round(wall, 1), "fixed_parts_mb": fixed,
              "largest_side_input_mb": {k: round(v / MB, 2) for k, v in
                                        sorted(sampler.largest_side.items(), key=lambda kv: -kv[1])[:8]},
              "per_worker": {name: {**breakdown(w["peak"], fixed), "restarts": len(w["pids"]) - 1,
                                    "gained_mb_by_step": {k: round(v / MB, 1) for k, v in sorted(
                                        w.get("gained_by_step", {}).items(), key=lambda kv: -kv[1])[:8]},
                                    "paused_seconds": w["paused_samples"], "samples": w["samples"]}
                             for name, w in sorted(sampler.workers.items()) if w["peak"]}}
    if code == 0:
        tables = tables_of(out)
        result["tables_balanced"] = {name: t["balanced"] for name, t in tables.items()}
        result["train_is_the_intersection"] = train_is_the_intersection(out)["equal"]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captions", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory_limit", default="2GiB")
    parser.add_argument("--spill", choices=("on", "off"), default="on",
                        help="--spill_dir, a folder the workers share (on), or Dask's own shuffles (off)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/hardpos-dask-memory"))
    parser.add_argument("--baseline", type=Path, default=None, help="dask_worker_memory.json of another size")
    ns = parser.parse_args(argv)
    result = run(ns)
    print(f"{result['captions']:,} captions, {ns.workers} workers of {ns.memory_limit}, spill {ns.spill}: exit "
          f"{result['exit']}, wall {result['wall_s']:,} s")
    print("fixed parts of a worker (a fresh process): " + ", ".join(f"{n} {mb:,.0f} MB"
                                                                  for n, mb in result["fixed_parts_mb"]))
    print("largest side inputs (pickled MB): " + json.dumps(result["largest_side_input_mb"]))
    for name, w in result["per_worker"].items():
        print(f"worker {name}: peak {w['peak_rss_mb']:,} MB, restarts {w['restarts']}, paused {w['paused_seconds']} s "
              f"of {w['samples']} s; spilled by Dask at the peak {w['managed_spilled_mb']:,} MB")
        for part, mb in w["parts"].items():
            print(f"    {part:<40} {mb:>9,.1f} MB")
        print(f"    running at the peak: {', '.join(w['running_at_peak']) or '(between tasks)'}")
        print("    RSS gained while each step ran (MB): " + ", ".join(
            f"{step} {mb:,.0f}" for step, mb in w["gained_mb_by_step"].items()))
    if "tables_balanced" in result:
        print(f"tables balanced: {result['tables_balanced']}; train = captions with both: "
              f"{result['train_is_the_intersection']}")
    if ns.baseline:
        base = json.loads(ns.baseline.read_text())
        per = (result["captions"] - base["captions"]) / 1e5
        for name, w in result["per_worker"].items():
            b = base["per_worker"].get(name)
            if b:
                growth = {p: round((mb - b["parts"].get(p, 0)) / per, 1) for p, mb in w["parts"].items()}
                print(f"worker {name} against {base['captions']:,} captions: peak {b['peak_rss_mb']:,} -> "
                      f"{w['peak_rss_mb']:,} MB ({w['peak_rss_mb'] / b['peak_rss_mb']:.3f}x); per 100,000 more "
                      f"captions: {growth}")
        result["baseline"] = str(ns.baseline)
    (ns.work / "dask_worker_memory.json").write_text(json.dumps(result, indent=2))
    return result["exit"]


if __name__ == "__main__":
    sys.exit(main())
