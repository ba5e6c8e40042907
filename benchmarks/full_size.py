"""The full-size rehearsal: --stage=all on 591,753 COCO captions (the size of COCO train), the LLM left out.

    .venv/bin/python benchmarks/full_size.py [--captions 591753] [--work /tmp/hardpos-full] [--mode all|stages]
        [--positives rules|replay]

1. Input: the real val2017 captions (../shared/data/coco/captions_val2017.json, 25,014) copied until there are
   --captions of them. Every copy has fresh caption and image ids and a light, deterministic variation of the text
   (one of 12 openings times a toggled final period; copy 0 as it is, stripped), so no two copies share a text.
2. The hard positives: --positives=rules (default) makes them with the rules rule_replace and rule_swap, as
   `--stage=all` does by default on a machine without a GPU. --positives=replay instead writes a replay file
   answering every LLM prompt (replace and swap): a synonym from the paper's REPLACE table where the validator
   accepts one, the two sides of an "and" exchanged where it accepts that, else the caption itself (rejected as
   `identical`, as a model's echo would be). The LLM's cost is measured elsewhere (benchmarks/llm_server.py).
3. Runs `python -m pipeline.run --stage=all` (default negative types) on the DirectRunner,
   --direct_num_workers=2 --direct_running_mode=multi_processing, and samples the memory of the launcher and of
   every worker process twice a second. --mode=stages runs train_negatives, hard_positives and train_set as three
   pipelines instead (a wall time per stage; train_set then reads the other two tables back).
4. Prints per run: wall time, peak RSS of the launcher, of each worker and of all together (for --stage=all also
   per stage of its chain, from the line pipeline.run prints as each stage commits); per table rows, shards,
   bytes, rows per shard (min/max against --rows_per_shard) and whether the report balances; and writes it all
   to <work>/full_size.json; and whether the train table holds exactly the captions with both a hard positive
   and a hard negative. "MB" here is MiB (2**20 bytes). With --baseline (the full_size.json of a run at another
   size, e.g. 591,753 for a CC3M-size 3,318,333), also the memory growth per 100,000 captions between the two, the
   peaks' ratio and the wall time against linear.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
VAL2017 = REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"
COCO_TRAIN_CAPTIONS = 591_753
# Openings a COCO caption may well have ("A picture of a dog ..."); the caption's first letter is lowered after one.
OPENINGS = ("", "A photo of ", "A picture of ", "An image of ", "A view of ", "A photograph of ", "A shot of ",
            "A close up of ", "A scene of ", "A snapshot of ", "An image showing ", "A photo showing ")
ID_STRIDE = 1_000_000  # copy k's ids are k * ID_STRIDE + the original id (val2017 ids are below 600,000)
MODEL = "meta-llama/Llama-2-70b-chat-hf"  # only a name for the replay engine (it is in the cache key)


def vary(text: str, copy: int) -> str:
    """Copy `copy`'s variation of a caption: opening copy % 12, final period toggled on odd copy // 12."""
    opening = OPENINGS[copy % len(OPENINGS)]
    if opening and text[:1].isupper() and not text[1:2].isupper():
        text = text[0].lower() + text[1:]
    text = opening + text
    if (copy // len(OPENINGS)) % 2:
        stripped = text.rstrip()
        text = stripped[:-1].rstrip() if stripped.endswith(".") else stripped + "."
    return text


def build_captions(source: dict, n: int) -> dict:
    """A COCO captions file of n annotations: copies of `source` with fresh ids and varied texts."""
    # Stripped, as the stage reads a caption: the replay file's captions must be the prompts' captions.
    annotations = sorted(({**a, "caption": a["caption"].strip()} for a in source["annotations"]),
                         key=lambda a: a["id"])
    images = sorted(source["images"], key=lambda i: i["id"])
    copies = -(-n // len(annotations))
    out = {"info": {"description": f"{n:,} captions: {copies} varied copies of COCO val2017 (hardpos full-size "
                                   f"rehearsal)"},
           "licenses": source.get("licenses", []), "images": [], "annotations": []}
    for k in range(copies):
        out["images"] += [{**image, "id": k * ID_STRIDE + image["id"]} for image in images]
        for a in annotations:
            if len(out["annotations"]) == n:
                break
            out["annotations"].append({"id": k * ID_STRIDE + a["id"], "image_id": k * ID_STRIDE + a["image_id"],
                                       "caption": vary(a["caption"], k)})
    return out


def _replace_answer(caption: str, pairs, check) -> str | None:
    for old, new in pairs:
        match = re.search(rf"\b{re.escape(old)}\b", caption, flags=re.IGNORECASE)
        if match:
            answer = caption[:match.start()] + new + caption[match.end():]
            if check("replace", caption, answer):
                return answer
    return None


_AND = re.compile(r"\b((?:a|an|the|two|some)\s+\w+)\s+and\s+((?:a|an|the|two|some)\s+\w+)\b", re.IGNORECASE)


def _swap_answer(caption: str, check) -> str | None:
    match = _AND.search(caption)
    if not match:
        return None
    answer = caption[:match.start()] + f"{match.group(2)} and {match.group(1)}" + caption[match.end():]
    return answer if check("swap", caption, answer) else None


def replay_answers(captions: list[str]) -> dict[str, dict[str, str]]:
    """{caption: {type: answer}} for the base captions, each answer passing the stage's own validator or the
    caption itself."""
    from pipeline.llm.validate import Validator
    from pipeline.perturb.eval_replace import DEFAULT_TABLE

    validator = Validator(wordnet=True)

    def check(kind, caption, answer):
        return validator({"kind": kind, "caption": caption}, {"finish_reason": "stop", "text": answer}).ok

    table = json.loads(DEFAULT_TABLE.read_text())
    pairs = [(old, new) for categories in table["categories"].values()
             for pairs in categories.values() for old, new in pairs]
    return {c: {"replace": _replace_answer(c, pairs, check) or c, "swap": _swap_answer(c, check) or c}
            for c in captions}


SHARD_ROWS, ROW_GROUP_ROWS = 100_000, 10_000  # as img2dataset might leave them (its default: 10,000 per shard)


def write_img2dataset(work: Path, data: dict) -> Path:
    """The captions as img2dataset's parquet shards (key, caption, url, status), SHARD_ROWS each; returns the
    folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = work / "img2dataset"
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    urls = {i["id"]: i.get("coco_url") or f"http://images.example/{i['id']}.jpg" for i in data["images"]}
    annotations = data["annotations"]
    for shard, start in enumerate(range(0, len(annotations), SHARD_ROWS)):
        rows = [{"key": f"{a['id']:012d}", "caption": a["caption"], "url": urls.get(a["image_id"]),
                 "status": "success", "error_message": None} for a in annotations[start:start + SHARD_ROWS]]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{shard:05d}.parquet", row_group_size=ROW_GROUP_ROWS)
    return folder


def write_inputs(work: Path, n: int, replay: bool, fmt: str = "coco") -> tuple[Path, Path | None, dict]:
    source = json.loads(VAL2017.read_text())
    captions_path, replay_path = work / "captions_full.json", work / "replay_full.jsonl"
    data = build_captions(source, n)
    texts = [a["caption"] for a in data["annotations"]]
    assert len(set(texts)) >= len(set(a["caption"] for a in source["annotations"])) * min(
        1, n // len(source["annotations"])), "copies collapsed"
    if fmt == "img2dataset":
        captions_path = write_img2dataset(work, data)
    else:
        captions_path.write_text(json.dumps(data))
    if not replay:
        return captions_path, None, {"captions": len(texts), "distinct_texts": len(set(texts))}
    by_id = {a["id"]: a["caption"].strip() for a in source["annotations"]}
    base = replay_answers(sorted(set(by_id.values())))
    accepted = {"replace": 0, "swap": 0}
    with open(replay_path, "w") as f:
        for a in data["annotations"]:
            k, original = divmod(a["id"], ID_STRIDE)
            answers = base[by_id[original]]
            for kind in ("replace", "swap"):
                answer = vary(answers[kind], k) if answers[kind] != by_id[original] else a["caption"]
                accepted[kind] += answer != a["caption"]
                f.write(json.dumps({"type": kind, "caption": a["caption"], "text": answer}) + "\n")
    return captions_path, replay_path, {"captions": len(texts), "distinct_texts": len(set(texts)),
                                        "replay_answers": 2 * len(texts), "answers_not_echoes": accepted}


class MemorySampler(threading.Thread):
    """Peak RSS of a process and of each of its descendants (by pid), and of all together, every `every` s."""

    def __init__(self, pid: int, every: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peaks: dict[int, dict] = {}
        self.total_peak = 0
        self.series: list[tuple[float, int, int]] = []  # (time, launcher RSS, all processes' RSS)
        self.stopped = threading.Event()

    def run(self):
        import psutil

        root = psutil.Process(self.pid)
        while not self.stopped.is_set():
            try:
                procs = [root] + root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            total = launcher = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    if p.pid not in self.peaks:
                        self.peaks[p.pid] = {"cmd": " ".join(p.cmdline())[:160], "rss": 0, "first_seen": time.time()}
                except psutil.Error:
                    continue
                total += rss
                launcher = rss if p.pid == self.pid else launcher
                self.peaks[p.pid]["rss"] = max(self.peaks[p.pid]["rss"], rss)
            self.total_peak = max(self.total_peak, total)
            self.series.append((time.time(), launcher, total))
            self.stopped.wait(self.every)


def run_stage(args: list[str], log: Path) -> dict:
    command = [sys.executable, "-m", "pipeline.run", *args]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        sampler = MemorySampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.stopped.set()
        sampler.join()
    wall = time.monotonic() - started
    # CPU seconds of the launcher and every worker (each waited for): the run's work, whatever ran beside it
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    workers = {pid: p for pid, p in sampler.peaks.items()
               if pid != proc.pid and ("sdk_worker_main" in p["cmd"] or "multiprocessing" in p["cmd"])
               and not p["cmd"].startswith("/bin/sh")}
    return {"args": args, "exit": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "launcher_peak_rss_mb": round(sampler.peaks.get(proc.pid, {"rss": 0})["rss"] / 2**20),
            "worker_peak_rss_mb": sorted(round(p["rss"] / 2**20) for p in workers.values()),
            "other_processes": {p["cmd"][:60]: round(p["rss"] / 2**20) for pid, p in sampler.peaks.items()
                                if pid != proc.pid and pid not in workers},
            "all_processes_peak_rss_mb": round(sampler.total_peak / 2**20), "log": str(log),
            "chain": chain_stages(log, sampler, workers)}


CHAIN_LINE = re.compile(r"--stage=all: (\w+) (?:committed|staged) in ([\d.]+) s \(at ([\d.]+)\)")


def chain_stages(log: Path, sampler: MemorySampler, workers: dict) -> list[dict]:
    """--stage=all's stages, from the lines pipeline.run prints as each commits: wall time, and the launcher's,
    each worker's and all processes' peaks within the stage's time (every stage starts its own workers)."""
    found = []
    for stage, seconds, end in CHAIN_LINE.findall(log.read_text(errors="replace")):
        end, seconds = float(end), float(seconds)
        inside = [(rss, total) for t, rss, total in sampler.series if end - seconds <= t <= end]
        found.append({"stage": stage, "wall_s": seconds,
                      "launcher_peak_rss_mb": round(max((r for r, _ in inside), default=0) / 2**20),
                      "worker_peak_rss_mb": sorted(round(p["rss"] / 2**20) for p in workers.values()
                                                   if end - seconds <= p["first_seen"] <= end),
                      "all_processes_peak_rss_mb": round(max((t for _, t in inside), default=0) / 2**20)})
    return found


def tables_of(output_dir: Path) -> dict:
    report = json.loads((output_dir / "report.json").read_text())
    found = {}
    for name, t in report["tables"].items():
        files = sorted((output_dir / name).glob("*.parquet"))
        shard_rows = list(t.get("shards", {}).values())
        found[name] = {"read": t["read"], "rows": t["rows"], "discarded": t["discarded"], "rejected": t["rejected"],
                       "balanced": t["balanced"], "shards": len(files),
                       "bytes": sum(f.stat().st_size for f in files),
                       "rows_per_shard_min_max": [min(shard_rows, default=0), max(shard_rows, default=0)],
                       "discard_reasons": dict(list(t["discard_reasons"].items())[:6]),
                       "reject_reasons": dict(list(t["reject_reasons"].items())[:6])}
    return found


def train_is_the_intersection(output_dir: Path) -> dict:
    """Whether train's rows are exactly the captions with a hard positive and a hard negative (negative 0 of
    the first negative type), from the three tables as written."""
    import pyarrow.parquet as pq

    def ids(table: str, column_filter=None) -> set[str]:
        found = set()
        for f in sorted((output_dir / table).glob("*.parquet")):
            t = pq.read_table(f, columns=["example_id", *([column_filter[0]] if column_filter else [])])
            rows = t.to_pylist()
            found.update(r["example_id"] for r in rows if not column_filter or r[column_filter[0]] == column_filter[1])
        return found

    both = ids("hard_positives") & ids("train_negatives", ("negative_index", 0))
    train = ids("train")
    return {"captions_with_both": len(both), "train_rows": len(train), "equal": both == train}


def against_baseline(baseline: dict, results: dict) -> dict:
    """This run's peak memory and wall time against a run of the same mode at another size."""
    (name, run), = results["runs"].items()
    base = baseline["runs"][name]
    n, n0 = results["input"]["captions"], baseline["input"]["captions"]
    peak, peak0 = run["all_processes_peak_rss_mb"], base["all_processes_peak_rss_mb"]
    return {"baseline_captions": n0, "baseline_peak_mb": peak0, "peak_mb": peak, "peak_ratio": peak / peak0,
            "mb_per_100k_more": (peak - peak0) / (n - n0) * 1e5, "baseline_wall_s": base["wall_s"],
            "wall_s": run["wall_s"], "captions_ratio": n / n0, "wall_vs_linear": run["wall_s"] / (base["wall_s"] * n / n0),
            "cpu_vs_linear": (run["cpu_s"] / (base["cpu_s"] * n / n0)) if base.get("cpu_s") and run.get("cpu_s")
            else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captions", type=int, default=COCO_TRAIN_CAPTIONS)
    parser.add_argument("--work", type=Path, default=Path("/tmp/hardpos-full"))
    parser.add_argument("--mode", choices=("all", "stages"), default="all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--positives", choices=("rules", "replay"), default="rules",
                        help="hard positives from the rules (default) or from a replay file standing for an LLM")
    parser.add_argument("--extra", default="", help="more pipeline flags, space-separated")
    parser.add_argument("--format", choices=("coco", "img2dataset"), default="coco",
                        help="the input as one COCO captions file, or as img2dataset's parquet shards (--captions)")
    parser.add_argument("--runner", choices=("direct", "dask"), default="direct",
                        help="the DirectRunner in --workers processes, or Dask's local cluster of --workers workers")
    parser.add_argument("--yardstick", action="store_true",
                        help="also parse the same captions on one core with the stages' spaCy pipeline, in this run, "
                             "and print each run's CPU-seconds against it (benchmarks/cpu_breakdown.py)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="the full_size.json of a run at another size (e.g. 591,753): prints the memory growth "
                             "per 100,000 captions between the two, the peak's ratio and the wall time against linear")
    ns = parser.parse_args(argv)
    ns.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    captions_path, replay_path, made = write_inputs(ns.work, ns.captions, ns.positives == "replay", ns.format)
    made["seconds"] = round(time.monotonic() - started, 1)
    made["workers"] = ns.workers
    made["positives"] = ns.positives
    answers = (f"{made['replay_answers']:,} replay answers, not echoes: {made['answers_not_echoes']}; "
               if replay_path else "rule positives; ")
    print(f"input: {made['captions']:,} captions ({made['distinct_texts']:,} distinct texts), {answers}"
          f"made in {made['seconds']} s", flush=True)
    out, cache = ns.work / "out", ns.work / "llm_cache"
    subprocess.run(["rm", "-rf", str(out), str(cache)], check=True)
    runner = ([f"--direct_num_workers={ns.workers}", "--direct_running_mode=multi_processing"]
              if ns.runner == "direct" else ["--runner=DaskRunner", f"--dask_workers={ns.workers}"])
    common = [f"--output_dir={out}", *runner, "--progress_seconds=60", *ns.extra.split()]
    llm = (["--llm_engine=replay", f"--llm_replay={replay_path}", f"--model={MODEL}", f"--cache_dir={cache}",
            "--positive_types=replace,swap"] if replay_path else [])
    coco = ([f"--coco_captions={captions_path}"] if ns.format == "coco" else
            [f"--captions={captions_path}/*.parquet", "--captions_format=img2dataset"])
    runs = ({"all": ["--stage=all", *coco, *llm]} if ns.mode == "all" else
            {"train_negatives": ["--stage=train_negatives", *coco], "hard_positives": ["--stage=hard_positives",
                                                                                     *coco, *llm],
             "train_set": ["--stage=train_set", *coco]})
    results = {"input": made, "runs": {}}
    if ns.yardstick:
        from benchmarks.cpu_breakdown import yardstick

        annotations = json.loads(captions_path.read_text())["annotations"] if ns.format == "coco" else None
        if annotations is None:
            raise SystemExit("--yardstick needs --format=coco")
        y = results["yardstick"] = yardstick([a["caption"].strip() for a in annotations], 256)
        print(f"yardstick: spaCy {'+'.join(y['components'])} over {y['captions']:,} captions on one core: "
              f"{y['cpu_s']} CPU-s ({y['ms_per_caption']} ms per caption)", flush=True)
    for name, args in runs.items():
        result = run_stage([*args, *common], ns.work / f"{name}.log")
        results["runs"][name] = result
        print(f"\n== {name}: exit {result['exit']}, wall {result['wall_s']:,} s, CPU {result['cpu_s']:,} s, peak RSS launcher "
              f"{result['launcher_peak_rss_mb']:,} MB, workers {result['worker_peak_rss_mb']} MB, all processes "
              f"{result['all_processes_peak_rss_mb']:,} MB ({result['all_processes_peak_rss_mb'] / ns.captions * 1e5:,.1f}"
              f" MB per 100,000 captions; {result['wall_s'] / ns.captions * 1e5:,.1f} s per 100,000)", flush=True)
        if ns.yardstick:
            y = results["yardstick"]
            result["cpu_vs_yardstick"] = round(result["cpu_s"] / y["cpu_s"], 2)
            print(f"   CPU {result['cpu_s']:,} s = {result['cpu_vs_yardstick']}x the yardstick's {y['cpu_s']} s "
                  f"({1000 * result['cpu_s'] / ns.captions:.2f} ms per caption)", flush=True)
        for part in result["chain"]:
            print(f"   {part['stage']}: wall {part['wall_s']:,} s, peak RSS launcher "
                  f"{part['launcher_peak_rss_mb']:,} MB, workers {part['worker_peak_rss_mb']} MB, all processes "
                  f"{part['all_processes_peak_rss_mb']:,} MB")
        if result["exit"] != 0:
            print(Path(result["log"]).read_text()[-3000:])
            break
    if all(r["exit"] == 0 for r in results["runs"].values()):
        results["tables"] = tables_of(out)
        for name, t in results["tables"].items():
            print(f"{name}: read {t['read']:,}, rows {t['rows']:,}, discarded {t['discarded']:,}, rejected "
                  f"{t['rejected']:,}, balanced {t['balanced']}; {t['shards']} shards, {t['bytes'] / 2**20:,.1f} MB, "
                  f"rows per shard {t['rows_per_shard_min_max']}\n    discarded: {t['discard_reasons']}\n"
                  f"    rejected: {t['reject_reasons']}")
        results["train_check"] = train_is_the_intersection(out)
        check = results["train_check"]
        print(f"train rows {check['train_rows']:,} = captions with a hard positive and a hard negative "
              f"{check['captions_with_both']:,}: {'yes' if check['equal'] else 'NO'}")
    if ns.baseline and all(r["exit"] == 0 for r in results["runs"].values()):
        results["against_baseline"] = against_baseline(json.loads(ns.baseline.read_text()), results)
        b = results["against_baseline"]
        print(f"against {b['baseline_captions']:,} captions: all processes' peak {b['baseline_peak_mb']:,} -> "
              f"{b['peak_mb']:,} MB ({b['peak_ratio']:.3f}x; {b['mb_per_100k_more']:+,.1f} MB per 100,000 more "
              f"captions); wall {b['baseline_wall_s']:,} -> {b['wall_s']:,} s = {b['wall_vs_linear']:.3f}x linear "
              f"({b['captions_ratio']:.2f}x the captions)"
              + (f"; CPU time {b['cpu_vs_linear']:.3f}x linear" if b["cpu_vs_linear"] else ""))
    (ns.work / "full_size.json").write_text(json.dumps(results, indent=2))
    return 0 if all(r["exit"] == 0 for r in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
