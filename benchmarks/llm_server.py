"""The hard_positives stage against a real OpenAI-compatible server: llama.cpp's (llama-cpp-python[server]) serving
the embedded SmolLM2-135M-Instruct GGUF on this machine. A concurrency sweep, then a kill test. Prints figures
and PASS/FAIL lines; asserts nothing.

    python benchmarks/llm_server.py [--captions 500] [--concurrency 1,4,16] [--coco_file FILE]
        [--find-links /work/wheels] [--n_threads N] [--outage 2] [--keep]

llama-cpp-python[server] is installed into this interpreter's environment (pip) only when it is missing, so CI
never needs it. The first --captions captions of --coco_file (COCO val2017) are written as a COCO file to a temp
folder; the server starts on a free 127.0.0.1 port as its own process group and is killed at the end, whatever
happens. Prompts go through /v1/chat/completions (--chat_format=auto: the model's own chat template, which the
server takes from the GGUF metadata). One short warm-up request goes first (a fresh server's first requests
are slow); the server restarted in the kill test gets none, as a real restart would not.

Sweep: for each concurrency C, `python -m pipeline.run --stage=hard_positives --llm_engine=openai
--llm_concurrency=C` with a fresh --cache_dir and --output_dir. Per run:
  wall s      the stage subprocess from start to exit (Beam start-up and the commit included; the line
              "overhead" after the table is a re-run whose every prompt is cached, i.e. the part that is not LLM)
  prompts/s   the report's prompts / wall s
  tokens/s    output tokens / wall s; output tokens = the sum of output_tokens over every attempt in the run's
              cache (accepted and rejected alike; a failed request is never cached and generated nothing kept)
  accepted    rows; then each reject reason with its count (the report's reject_reasons)
The server answers one request at a time (llama-cpp-python holds a lock around the model), so concurrency
only hides the HTTP and pipeline gaps between requests.

Kill test (at --kill_concurrency, a fresh cache): the stage starts; when about --kill_at of the prompts have a
cache entry (lines in <cache>/hard_positives/*.jsonl), the server's process group is SIGKILLed, and after
--outage seconds the server starts again on the same port. In-flight and new requests fail and are retried with
backoff by the engine (0.25 s, doubling, 5 retries: about 8 s); a request that still fails ends as
request_failed. The stage then runs again with the same cache (a resume). Checks, each PASS/FAIL:
  (a) the final run's rows + rejected = prompts (report prompts_balanced)
  (b) no (example_id, positive_type) twice among the final run's rows + rejected
  (c) every prompt of the file has an answer in the cache after the second run (no prompt lost)
  (d) the second run's cache_hits + generation_calls (+ shared_prompts: captions with the same text share one
      generation) account for all prompts, and it asked only what the cache lacked before it
A first run that exits non-zero because more than --max_failed_fraction of its requests failed during the
outage is acceptable: it is said, and the second run must complete it.
"""
from __future__ import annotations

import argparse
import atexit
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SERVER_CHECK = "import llama_cpp.server.app, uvicorn"  # llama_cpp.server alone imports without the extras
TABLE = "hard_positives"
_servers: list[subprocess.Popen] = []  # every server started, killed at exit


# --- llama.cpp's server ----------------------------------------------------------------------------------------

def ensure_server_installed(find_links: str | None) -> None:
    if subprocess.run([sys.executable, "-c", SERVER_CHECK], capture_output=True).returncode == 0:
        print("llama-cpp-python[server]: already installed")
        return
    cmd = [sys.executable, "-m", "pip", "install", "--quiet"]
    if find_links:
        cmd += ["--find-links", find_links]
    cmd.append("llama-cpp-python[server]")
    print(f"llama-cpp-python[server] is missing: installing it ({' '.join(cmd[2:])}); without a prebuilt wheel "
          f"this is a ~15 min source build", flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"installed in {time.perf_counter() - start:.1f}s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, gguf: str, port: int, log: Path) -> tuple[subprocess.Popen, float]:
    """(the server process, seconds until /v1/models answered)."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(args.n_ctx)]
    if args.n_threads:
        cmd += ["--n_threads", str(args.n_threads)]
    start = time.perf_counter()
    # Its own process group (session), so the kill test can SIGKILL all of it without touching us.
    proc = subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    _servers.append(proc)
    deadline = start + args.server_start_timeout
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before answering; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                r.read()
            return proc, time.perf_counter() - start
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise RuntimeError(f"the server did not answer /v1/models within {args.server_start_timeout}s; see {log}")


def warm_up(port: int) -> float:
    """Seconds for one short chat request: a fresh server's first requests are several times slower (llama.cpp
    allocates and pages in on first use), which would otherwise land on the first run of the sweep."""
    body = {"model": "warm-up", "max_tokens": 8, "temperature": 0.0,
            "messages": [{"role": "user", "content": "Say hello."}]}
    start = time.perf_counter()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=120) as r:
        r.read()
    return time.perf_counter() - start


def kill_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def kill_all_servers() -> None:
    for proc in _servers:
        kill_server(proc)


def server_log_summary(logs: list[Path]) -> list[str]:
    """What the server logs say: the chat template used, HTTP statuses, errors."""
    statuses, errors, template = Counter(), Counter(), []
    for log in logs:
        if not log.exists():
            continue
        for line in log.read_text(errors="replace").splitlines():
            m = re.search(r'"POST (\S+) HTTP/1\.1" (\d+)', line)
            if m:
                statuses[f"{m.group(1)} {m.group(2)}"] += 1
            elif line.startswith(("Using gguf chat template", "Using chat", "Available chat formats")):
                if line not in template:
                    template.append(line[:160])
            elif re.search(r"Traceback|ERROR|Exception|error:", line) and "llama_perf" not in line:
                errors[line.strip()[:160]] += 1
    out = [f"server chat template: {t}" for t in template]
    out.append("server HTTP replies: " + (", ".join(f"{k}: {n}" for k, n in sorted(statuses.items())) or "none"))
    out.append(f"server error lines: {sum(errors.values())}")
    out += [f"  {n} x {line}" for line, n in errors.most_common(8)]
    return out


# --- data and the stage ---------------------------------------------------------------------------------------

def write_captions(source: str, n: int, folder: Path) -> Path:
    """The first n caption annotations of a COCO captions file, with the images they name, as a COCO file."""
    with open(source, encoding="utf-8") as f:
        data = json.load(f)
    annotations = data["annotations"][:n]
    wanted = {a["image_id"] for a in annotations}
    out = {"info": {"description": f"first {n} captions of {os.path.basename(source)}"},
           "images": [i for i in data["images"] if i["id"] in wanted], "annotations": annotations}
    path = folder / f"captions_first{n}.json"
    path.write_text(json.dumps(out), encoding="utf-8")
    return path


def stage_flags(args, captions: Path, port: int, concurrency: int, cache: Path, output: Path) -> list[str]:
    flags = [f"--stage={TABLE}", f"--coco_captions={captions}", "--llm_engine=openai", f"--model={args.model_name}",
             f"--llm_base_url=http://127.0.0.1:{port}/v1", f"--llm_concurrency={concurrency}",
             f"--cache_dir={cache}", f"--output_dir={output}", "--progress_seconds=0"]
    return flags + args.stage_arg


def prompt_keys(flags: list[str], captions: Path) -> tuple[set[str] | None, int | None]:
    """(the cache keys of the file's prompts, the number of prompts) as the stage makes them, with its own
    functions; (None, None) when they cannot be used (the code changed under us)."""
    try:
        from apache_beam.options.pipeline_options import PipelineOptions

        from pipeline.options import HardposOptions
        from pipeline.sources import coco
        from pipeline.stages.hard_positives import positive_types
        from pipeline.stages.llm_rewrites import base_sampling, make_prompts, model_name

        opts = PipelineOptions(flags).view_as(HardposOptions)
        images, annotations = coco.load_captions_file(str(captions))
        index = coco.image_index(images)
        keys, n = set(), 0
        for raw in annotations:
            record = coco.normalise(raw, str(captions), index)
            for element in make_prompts(record, tuple(positive_types(opts)), model_name(opts), opts.chat_format,
                                        opts.prompt_set, base_sampling(opts)):
                keys.add(element["key"])
                n += 1
        return keys, n
    except Exception as e:  # noqa: BLE001 (a benchmark: say it and go on)
        print(f"(cannot compute the prompts' cache keys with the pipeline's functions: {type(e).__name__}: {e})")
        return None, None


def cache_entries(cache: Path) -> dict[str, dict]:
    """key -> the entry with the most attempts (as the stage picks: several files may hold one key)."""
    best: dict[str, dict] = {}
    for path in glob.glob(str(cache / TABLE / "*.jsonl")):
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
                key = entry["key"]
            except (ValueError, KeyError, TypeError):
                continue
            if key not in best or len(entry.get("attempts", [])) > len(best[key].get("attempts", [])):
                best[key] = entry
    return best


def cache_lines(cache: Path) -> int:
    n = 0
    for path in glob.glob(str(cache / TABLE / "*.jsonl")):  # only complete files: *.jsonl.tmp is not matched
        try:
            with open(path, "rb") as f:
                n += sum(1 for _ in f)
        except OSError:
            pass
    return n


def output_tokens(cache: Path) -> int:
    return sum(int(a.get("output_tokens", 0)) for e in cache_entries(cache).values() for a in e.get("attempts", []))


def run_stage(flags: list[str], log: Path, on_poll=None) -> tuple[int, float, str]:
    """(exit status, wall seconds, stdout+stderr) of one stage run; on_poll() is called every 0.2 s meanwhile."""
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", *flags], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while proc.poll() is None:
            if on_poll:
                on_poll()
            time.sleep(0.2)
    return proc.returncode, time.perf_counter() - start, log.read_text(errors="replace")


def read_section(output: Path, text: str) -> dict | None:
    """The report's hard_positives section; None when the run committed nothing (it failed)."""
    try:
        return json.loads((output / "report.json").read_text())["tables"][TABLE]
    except (OSError, ValueError, KeyError):
        return None


def printed_reasons(text: str) -> dict[str, int]:
    """The reject reasons a failed run printed in its summary (its report is not written)."""
    m = re.search(rf"{TABLE} reject reasons: (.*)", text)
    if not m:
        return {}
    return {r: int(n) for r, n in (p.rsplit(" ", 1) for p in m.group(1).split(", ") if " " in p)}


def output_pairs(output: Path) -> tuple[list[tuple], list[tuple]]:
    """(example_id, positive_type) of the committed rows, and of the rejected dead letters of the table."""
    import pyarrow.parquet as pq

    rows, rejected = [], []
    for path in sorted(glob.glob(str(output / TABLE / "**" / "*.parquet"), recursive=True)):
        t = pq.read_table(path, columns=["example_id", "positive_type"]).to_pylist()
        rows += [(r["example_id"], r["positive_type"]) for r in t]
    for path in sorted(glob.glob(str(output / "rejected" / "**" / "*.parquet"), recursive=True)):
        for r in pq.read_table(path, columns=["table", "record"]).to_pylist():
            if r["table"] == TABLE:
                record = json.loads(r["record"])
                rejected.append((record.get("example_id"), record.get("positive_type")))
    return rows, rejected


def tail(text: str, n: int = 6) -> str:
    lines = [l for l in text.splitlines() if l.strip() and "apitools not found" not in l]
    return "\n".join("    | " + l[:200] for l in lines[-n:])


def mix(section: dict | None, text: str) -> str:
    if section is None:
        reasons = printed_reasons(text)
        return "(run failed) " + ", ".join(f"{r} {n}" for r, n in reasons.items())
    reasons = section.get("reject_reasons", {})
    return f"accepted {section.get('accepted', section.get('rows'))}" + "".join(
        f", {r} {n}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]))


# --- main -----------------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", type=int, default=500, help="first N captions of --coco_file")
    parser.add_argument("--coco_file", default=str(REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"))
    parser.add_argument("--concurrency", default="1,4,16", help="--llm_concurrency values of the sweep")
    parser.add_argument("--kill_concurrency", type=int, default=4, help="--llm_concurrency of the kill test")
    parser.add_argument("--kill_at", type=float, default=0.5, help="fraction of prompts cached when the server dies")
    parser.add_argument("--outage", type=float, default=2.0, help="seconds between the kill and the restart")
    parser.add_argument("--no_kill_test", action="store_true")
    parser.add_argument("--no_sweep", action="store_true")
    parser.add_argument("--find-links", "--find_links", dest="find_links", default=None,
                        help="pip --find-links for installing llama-cpp-python[server] (a prebuilt wheel)")
    parser.add_argument("--gguf", default=None, help="model file (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--model_name", default="smollm2-135m-instruct-q4_1",
                        help="--model given to the stage (llama.cpp's server serves its one model whatever the name)")
    parser.add_argument("--n_ctx", type=int, default=2048)
    parser.add_argument("--n_threads", type=int, default=0, help="server threads (0: its default, cpu_count // 2)")
    parser.add_argument("--server_start_timeout", type=float, default=180.0)
    parser.add_argument("--stage_arg", action="append", default=[],
                        help="an extra flag for the stage, e.g. --stage_arg=--positive_checks=rules (repeatable)")
    parser.add_argument("--workdir", default=None, help="folder for captions, caches, outputs, logs (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (default: delete a temp one)")
    args = parser.parse_args()

    ensure_server_installed(args.find_links)
    if args.gguf is None:
        from pipeline.llm.models import embedded_path

        args.gguf = embedded_path()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="llm_server_"))
    work.mkdir(parents=True, exist_ok=True)
    atexit.register(kill_all_servers)  # also on an exception; SIGTERM is turned into one below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return bench(args, work)
    finally:
        kill_all_servers()
        if args.workdir is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work folder kept: {work}")


def bench(args, work: Path) -> int:
    captions = write_captions(args.coco_file, args.captions, work)
    port = free_port()
    logs = [work / "server-1.log"]
    proc, up_s = start_server(args, args.gguf, port, logs[0])
    threads = args.n_threads or f"default ({max(os.cpu_count() // 2, 1)})"
    print(f"server: llama_cpp.server {args.gguf} on 127.0.0.1:{port}, n_ctx {args.n_ctx}, n_threads {threads}; "
          f"answered /v1/models {up_s:.1f}s after start; a first (warm-up) chat request took {warm_up(port):.1f}s")
    keys, n_prompts = prompt_keys(stage_flags(args, captions, port, 1, work / "x", work / "y"), captions)
    if keys is not None:
        print(f"{args.captions:,} captions -> {n_prompts:,} prompts ({len(keys):,} distinct cache keys)")

    results = []
    if not args.no_sweep:
        for c in [int(x) for x in args.concurrency.split(",") if x.strip()]:
            cache, output = work / f"cache-c{c}", work / f"out-c{c}"
            rc, wall, text = run_stage(stage_flags(args, captions, port, c, cache, output), work / f"stage-c{c}.log")
            section = read_section(output, text)
            prompts = section["prompts"] if section else (n_prompts or 0)
            tokens = output_tokens(cache)
            results.append((c, rc, wall, prompts, tokens, mix(section, text)))
            print(f"concurrency {c:>3}: exit {rc}, {wall:6.1f}s, {prompts / wall:5.2f} prompts/s, "
                  f"{tokens:,} output tokens, {tokens / wall:6.1f} tokens/s; {mix(section, text)}", flush=True)
            if rc != 0:
                print(tail(text))
        # The part of the wall time that is not the LLM: the first config again, every prompt now cached.
        c0 = results[0][0] if results else None
        overhead = None
        if c0 is not None:
            rc, overhead, text = run_stage(stage_flags(args, captions, port, c0, work / f"cache-c{c0}",
                                                       work / "out-cached"), work / "stage-cached.log")
            section = read_section(work / "out-cached", text)
            hits = section.get("cache_hits") if section else "?"
            calls = section.get("generation_calls") if section else "?"
            print(f"cached re-run (concurrency {c0}): exit {rc}, {overhead:.1f}s, cache_hits {hits}, "
                  f"generation_calls {calls}")

        print()
        print(f"{'conc':>4} {'wall s':>7} {'prompts':>7} {'prompts/s':>9} {'out tok':>8} {'tok/s':>7}  "
              "accept/reject mix")
        for c, rc, wall, prompts, tokens, m in results:
            print(f"{c:>4} {wall:>7.1f} {prompts:>7} {prompts / wall:>9.2f} {tokens:>8,} {tokens / wall:>7.1f}  {m}"
                  + ("" if rc == 0 else f"  [exit {rc}]"))
        if overhead is not None:
            print(f"overhead: a run with every prompt cached takes {overhead:.1f}s (Beam start-up, reading, "
                  f"validation, commit); LLM-only rates: " + ", ".join(
                      f"c={c} {p / max(w - overhead, 1e-9):.2f} prompts/s, {t / max(w - overhead, 1e-9):.1f} tok/s"
                      for c, _, w, p, t, _ in results))
        print()

    failed_checks = 0
    if not args.no_kill_test:
        failed_checks, proc = kill_test(args, work, captions, port, proc, logs, keys, n_prompts)

    print()
    for line in server_log_summary(logs):
        print(line)
    return 1 if failed_checks else 0


def kill_test(args, work: Path, captions: Path, port: int, proc, logs: list[Path], keys, n_prompts):
    c = args.kill_concurrency
    cache, out1, out2 = work / "cache-kill", work / "out-kill-1", work / "out-kill-2"
    target = int(args.kill_at * len(keys)) if keys else int(args.kill_at * 1.2 * args.captions)
    print(f"kill test: concurrency {c}, SIGKILL the server once {target} prompts are cached, "
          f"restart after {args.outage:g}s")
    state = {"proc": proc, "killed_at": None, "lines_at_kill": None, "down_s": None}

    def poll():
        if state["killed_at"] is None and cache_lines(cache) >= target:
            state["lines_at_kill"] = cache_lines(cache)
            state["killed_at"] = time.perf_counter()
            kill_server(state["proc"])
            time.sleep(args.outage)
            logs.append(work / "server-2.log")
            state["proc"], up_s = start_server(args, args.gguf, port, logs[-1])
            state["down_s"] = time.perf_counter() - state["killed_at"]
            print(f"  killed the server with {state['lines_at_kill']} prompts cached; it answered again "
                  f"{state['down_s']:.1f}s after the kill (start {up_s:.1f}s)", flush=True)

    flags = stage_flags(args, captions, port, c, cache, out1)
    rc1, wall1, text1 = run_stage(flags, work / "stage-kill-1.log", poll)
    s1 = read_section(out1, text1)
    if state["killed_at"] is None:
        print("  the run ended before the kill point: the kill test did not happen")
    print(f"  run 1 (killed server): exit {rc1}, {wall1:.1f}s; {mix(s1, text1)}")
    if rc1 != 0:
        if "max_failed_fraction" in text1:
            print("  run 1 failed because too many requests failed during the outage (--max_failed_fraction): "
                  "acceptable; run 2 must complete it")
        print(tail(text1))
    cached_before = set(cache_entries(cache))
    missing_before = len(keys - cached_before) if keys is not None else None
    print(f"  cache after run 1: {len(cached_before)} keys" +
          (f", {missing_before} prompt keys without an answer" if missing_before is not None else ""))

    flags2 = stage_flags(args, captions, port, c, cache, out2)
    rc2, wall2, text2 = run_stage(flags2, work / "stage-kill-2.log")
    s2 = read_section(out2, text2)
    print(f"  run 2 (resume, same cache): exit {rc2}, {wall2:.1f}s; {mix(s2, text2)}")
    if rc2 != 0:
        print(tail(text2))
    if s2:
        print(f"  run 2: prompts {s2.get('prompts')}, cache_hits {s2.get('cache_hits')}, generation_calls "
              f"{s2.get('generation_calls')}, shared_prompts {s2.get('shared_prompts')}, "
              f"accepted {s2.get('accepted')}, rejected {s2.get('rejected_generations')}")

    failures = 0

    def check(name: str, ok: bool, detail: str) -> None:
        nonlocal failures
        failures += not ok
        print(f"  {'PASS' if ok else 'FAIL'} ({name}) {detail}")

    s2 = s2 or {}
    rows, rejected = output_pairs(out2) if rc2 == 0 else ([], [])
    prompts = s2.get("prompts", -1)
    check("a", rc2 == 0 and s2.get("prompts_balanced") is True and len(rows) + len(rejected) == prompts,
          f"rows {len(rows)} + rejected {len(rejected)} = {len(rows) + len(rejected)}, prompts {prompts}, "
          f"prompts_balanced {s2.get('prompts_balanced')}")
    dupes = [p for p, n in Counter(rows + rejected).items() if n > 1]
    check("b", rc2 == 0 and not dupes, f"{len(dupes)} duplicate (example_id, positive_type) among "
          f"{len(rows) + len(rejected)} rows + rejected" + (f", e.g. {dupes[:3]}" if dupes else ""))
    cached_after = set(cache_entries(cache))
    failed_final = s2.get("reject_reasons", {}).get("request_failed", 0) if s2 else None
    if keys is not None:
        lost = keys - cached_after
        check("c", not lost and rc2 == 0 and failed_final == 0,
              f"{len(keys) - len(lost)} of {len(keys)} prompt keys answered in the cache, {len(lost)} lost; "
              f"request_failed in run 2: {failed_final}")
    else:
        check("c", rc2 == 0 and failed_final == 0,
              f"(keys not computable) request_failed in run 2: {failed_final}")
    hits, calls, shared = s2.get("cache_hits", 0), s2.get("generation_calls", 0), s2.get("shared_prompts", 0)
    accounted = hits + calls + shared == prompts
    asked_only_missing = missing_before is None or calls == missing_before
    check("d", rc2 == 0 and accounted and asked_only_missing,
          f"cache_hits {hits} + generation_calls {calls} + shared_prompts {shared} = {hits + calls + shared}, "
          f"prompts {prompts}; generation_calls {calls} vs {missing_before} keys missing before run 2")
    return failures, state["proc"]


if __name__ == "__main__":
    sys.exit(main())
