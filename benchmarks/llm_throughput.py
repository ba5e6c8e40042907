"""LLM throughput for hard positives: prompts/s and output tokens/s for any engine and model. Prints figures;
asserts nothing.

    python benchmarks/llm_throughput.py --engine=vllm --model=meta-llama/Llama-2-70b-chat-hf \
        --tensor_parallel_size=4 [--captions ../shared/data/coco/captions_val2017.json] [--n 2000]
    python benchmarks/llm_throughput.py --engine=transformers --model=PATH [--device=cuda] [--batch_size 32]
    python benchmarks/llm_throughput.py --engine=openai --model=NAME --base_url=http://host:8000/v1
    python benchmarks/llm_throughput.py --engine=transformers --tiny   # a tiny random Llama, for a dry run here

The first --n captions of the file get their prompts exactly as the hard_positives stage makes them (REPLACE
for all, SWAP where the paper's rule selects it), greedy, sent in batches of --batch_size (vllm: all at once,
its scheduler batches). Model loading is timed apart. The share of outputs that pass validation (rules only)
is printed as well: throughput of nonsense is not throughput.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.llm.engines import ENGINES, EngineConfig, Sampling, make_engine  # noqa: E402
from pipeline.llm.prompts import load_prompt, wants  # noqa: E402
from pipeline.llm.validate import validate  # noqa: E402
from pipeline.sources.coco import load_captions_file  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--model", help="model path or id (not needed with --tiny)")
    parser.add_argument("--tiny", action="store_true", help="build a tiny random Llama (transformers; dry run)")
    parser.add_argument("--captions", default=str(REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"))
    parser.add_argument("--n", type=int, default=1000, help="captions to prompt")
    parser.add_argument("--types", default="replace,swap")
    parser.add_argument("--chat_format", default="llama2")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--base_url", default="")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tensor_parallel_size", type=int, default=1)
    parser.add_argument("--max_num_seqs", type=int, default=256)
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.9)
    args = parser.parse_args()

    _, annotations = load_captions_file(args.captions)
    captions = [a["caption"].strip() for a in annotations[:args.n]]
    jobs = [(t, c) for c in captions for t in args.types.split(",") if wants(t, c)]
    prompts = [load_prompt(t).render(c, args.chat_format) for t, c in jobs]
    params = [Sampling(load_prompt(t).max_new_tokens) for t, _ in jobs]

    model = args.model
    if args.tiny:
        sys.path.insert(0, str(REPO / "tests"))
        from llm_fixtures import build_tiny_llama

        model = str(build_tiny_llama(Path(tempfile.mkdtemp(prefix="tiny_llama_")), captions))
    if not model:
        sys.exit("--model is required (or --tiny)")
    config = EngineConfig(engine=args.engine, model=model, base_url=args.base_url, concurrency=args.concurrency,
                          device=args.device, batch_size=args.batch_size,
                          tensor_parallel_size=args.tensor_parallel_size, max_num_seqs=args.max_num_seqs,
                          gpu_memory_utilization=args.gpu_memory_utilization)
    start = time.perf_counter()
    engine = make_engine(config)
    load_s = time.perf_counter() - start

    step = len(prompts) if args.engine == "vllm" else max(args.batch_size, 1) * 8
    generations = []
    start = time.perf_counter()
    for i in range(0, len(prompts), step):
        generations += engine.generate(prompts[i:i + step], params[i:i + step])
    gen_s = time.perf_counter() - start

    tokens = sum(g.output_tokens for g in generations)
    verdicts = [validate(t, c, g.text, g.finish_reason) for (t, c), g in zip(jobs, generations, strict=True)]
    reasons = Counter(v.reason or "accepted" for v in verdicts)
    print(f"engine {args.engine}, model {model}, {len(captions):,} captions -> {len(prompts):,} prompts "
          f"({Counter(t for t, _ in jobs)})")
    print(f"model load {load_s:.1f}s (not in the rates)")
    print(f"generation {gen_s:.1f}s: {len(prompts) / gen_s:,.1f} prompts/s, {tokens / gen_s:,.0f} output tokens/s, "
          f"{tokens / max(len(prompts), 1):.1f} tokens/prompt")
    print("validation (rules): " + ", ".join(f"{r} {n}" for r, n in reasons.most_common()))
    if args.engine != "openai":
        per_caption = gen_s / max(len(captions), 1)
        print(f"at this rate, 591,753 COCO-train captions take {591_753 * per_caption / 3600:,.1f} h on this machine")


if __name__ == "__main__":
    main()
