"""What the full 591,753-caption training set costs: vCPU-hours, GPU-hours and an approximate Dataflow price.

    .venv/bin/python benchmarks/cost_model.py [--tokenizer PATH] [--full_size /tmp/hardpos-full/full_size.json]
        [--rules_run DIR]

Every figure is labelled measured or estimated:
- prompts per caption and tokens per prompt are measured: our prompts (--prompt_set, --chat_format llama2, the
  [INST] wrapper Llama-2-chat's own template gives) rendered on a --sample of the real val2017 captions and counted
  with --tokenizer: a tokenizer.json, a Hugging Face folder or a .gguf file (default: the embedded SmolLM2's, which
  is not Llama-2's; give Llama-2-70b-chat-hf's tokenizer.json for the real count);
- output tokens are estimated from the captions' own length (a rewrite is about as long as its caption), with the
  prompts' max_new_tokens as the ceiling;
- with --rules_run (a --stage=hard_positives or --stage=all run on the same captions with the rules only), the LLM
  is asked only about the sampled captions no rule positive covers (--llm_prompts=uncovered, the default): the
  figures per caption count no prompt for the others;
- GPU throughput is not measured here (no GPU): vLLM's published offline throughput for Llama-2-70B, cited below;
- CPU time is measured by benchmarks/full_size.py on this machine (its full_size.json);
- prices are Apache Beam's own table of Dataflow's us-central1 batch prices
  (apache_beam/testing/load_tests/dataflow_cost_consts.py, "found at https://cloud.google.com/dataflow/pricing").
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
VAL2017 = REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"
CAPTIONS = 591_753
GPUS_PER_REPLICA = 4  # Llama-2-70B in 16 bits on 4 x A100 80GB, tensor parallel 4 (the README's Dataflow command)
A2_ULTRAGPU_4G = {"vcpus": 48, "memory_gb": 680, "gpus": 4}  # the README's GPU worker (Google's machine-type table)
# vLLM offline throughput (benchmark_throughput.py, ShareGPT; prompt + output tokens per second), Llama-2-70B fp16.
THROUGHPUT = [
    ("vLLM 0.3.0, 4 x A100 80GB, TP4", 2074.42,
     "https://blog.vllm.ai/2024/02/15/amd.html (\"4.34 requests per second, or 2074.42 tokens per second as of "
     "vLLM v0.3.0\")"),
    ("vLLM 0.2.4, 4 x A100 80GB, TP4", 1399.77, "same post (\"1399.77 tokens per second as of vLLM v0.2.4\")"),
    ("vLLM 0.6.6, 4 x A100, TP4, Llama-3.3-70B (a proxy)", 1414.42,
     "https://github.com/vllm-project/vllm/issues/12315 (\"1414.42 total tokens/s\")"),
]


def load_tokenizer(path: str | None):
    """A callable text -> token count (special tokens included: the BOS a model sees)."""
    if path and path.endswith(".json"):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(path)
        return lambda text: len(tokenizer.encode(text).ids), path
    from pipeline.torchvision_compat import import_torchvision

    import_torchvision()  # transformers imports it: a CUDA build of it on a CPU machine needs the shim first
    from transformers import AutoTokenizer

    if path is None or path.endswith(".gguf"):
        from pipeline.llm.models import embedded_path

        gguf = path or embedded_path()
        tokenizer = AutoTokenizer.from_pretrained(str(Path(gguf).parent), gguf_file=Path(gguf).name)
        name = gguf
    else:
        tokenizer, name = AutoTokenizer.from_pretrained(path), path
    return lambda text: len(tokenizer(text)["input_ids"]), name


def token_figures(count, captions: list[str], types: list[str], prompt_set: str, chat_format: str) -> dict:
    from pipeline.llm.prompts import completion, load_prompt, wants

    figures = {"captions_sampled": len(captions), "types": {}}
    for kind in types:
        prompt = load_prompt(kind, prompt_set)
        asked = [c for c in captions if wants(kind, c)]
        prompt_tokens = [count(completion(prompt.text(c), chat_format)) for c in asked]
        # A rewrite is about as long as its caption: its tokens plus the end token, never above max_new_tokens.
        answer_tokens = [min(count(c) + 1, prompt.max_new_tokens) for c in asked]
        figures["types"][kind] = {
            "share_of_captions": round(len(asked) / len(captions), 4),
            "prompt_tokens_mean": round(statistics.mean(prompt_tokens), 1) if asked else 0,
            "prompt_tokens_p95": sorted(prompt_tokens)[int(0.95 * (len(asked) - 1))] if asked else 0,
            "output_tokens_mean_estimate": round(statistics.mean(answer_tokens), 1) if asked else 0,
            "max_new_tokens": prompt.max_new_tokens,
        }
    per_caption = {"prompts": sum(t["share_of_captions"] for t in figures["types"].values())}
    per_caption["prompt_tokens"] = sum(t["share_of_captions"] * t["prompt_tokens_mean"]
                                       for t in figures["types"].values())
    per_caption["output_tokens_low"] = sum(t["share_of_captions"] * t["output_tokens_mean_estimate"]
                                           for t in figures["types"].values())
    per_caption["output_tokens_high"] = sum(t["share_of_captions"] * t["max_new_tokens"]
                                            for t in figures["types"].values())
    figures["per_caption"] = {k: round(v, 2) for k, v in per_caption.items()}
    return figures


def rule_covered(run: Path) -> set[int]:
    """The caption ids with a rule positive in a run folder's hard_positives table."""
    import pyarrow.parquet as pq

    return {r["caption_id"] for path in sorted((run / "hard_positives").glob("*.parquet"))
            for r in pq.read_table(path, columns=["caption_id", "positive_type"]).to_pylist()
            if r["positive_type"].startswith("rule_")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--captions", type=Path, default=VAL2017)
    parser.add_argument("--sample", type=int, default=2000)
    parser.add_argument("--positive_types", default="replace,swap")
    parser.add_argument("--prompt_set", default="paper")
    parser.add_argument("--chat_format", default="llama2")
    parser.add_argument("--full_size", type=Path, default=Path("/tmp/hardpos-full/full_size.json"),
                        help="benchmarks/full_size.py's output (measured CPU time)")
    parser.add_argument("--rules_run", type=Path, default=None,
                        help="a rules-only run on --captions: its rule positives' captions get no LLM prompt")
    ns = parser.parse_args(argv)
    from apache_beam.testing.load_tests import dataflow_cost_consts as price

    annotations = json.loads(ns.captions.read_text())["annotations"]
    drawn = random.Random(0).sample(annotations, min(ns.sample, len(annotations)))
    sample = [a["caption"].strip() for a in drawn]
    count, tokenizer_name = load_tokenizer(ns.tokenizer)
    asked = sample
    if ns.rules_run is not None:
        covered = rule_covered(ns.rules_run)
        asked = [a["caption"].strip() for a in drawn if a["id"] not in covered]
        print(f"--rules_run: {len(sample) - len(asked):,} of the {len(sample):,} sampled captions have a rule "
              f"positive ({1 - len(asked) / len(sample):.1%}): the LLM is asked about the other {len(asked):,}")
    tokens = token_figures(count, asked, ns.positive_types.split(","), ns.prompt_set, ns.chat_format)
    share = len(asked) / len(sample)  # prompts per caption of the whole corpus: none for a covered caption
    tokens["per_caption"] = {k: round(v * share, 2) for k, v in tokens["per_caption"].items()}
    tokens["asked_share"] = round(share, 4)
    per = tokens["per_caption"]
    print(f"tokenizer: {tokenizer_name}\nmeasured on {len(sample):,} val2017 captions "
          f"({ns.prompt_set} prompts, {ns.chat_format} chat format):")
    for kind, t in tokens["types"].items():
        print(f"  {kind}: asked for {t['share_of_captions']:.1%} of the captions asked about, prompt tokens mean "
              f"{t['prompt_tokens_mean']} (p95 {t['prompt_tokens_p95']}); output tokens estimated "
              f"{t['output_tokens_mean_estimate']} (ceiling {t['max_new_tokens']})")
    total_low = CAPTIONS * (per["prompt_tokens"] + per["output_tokens_low"])
    total_high = CAPTIONS * (per["prompt_tokens"] + per["output_tokens_high"])
    print(f"per caption: {per['prompts']} prompts, {per['prompt_tokens']} prompt tokens, "
          f"{per['output_tokens_low']}-{per['output_tokens_high']} output tokens; for {CAPTIONS:,} captions "
          f"{total_low / 1e6:.1f}-{total_high / 1e6:.1f} M tokens\n")
    worker_hour = (A2_ULTRAGPU_4G["vcpus"] * price.VCPU_PER_HR_BATCH
                   + A2_ULTRAGPU_4G["memory_gb"] * price.MEM_PER_GB_HR_BATCH
                   + A2_ULTRAGPU_4G["gpus"] * price.A100_80GB_PER_GPU_PER_HOUR)
    print(f"| LLM stage (estimated) | tokens/s per 4-GPU replica | GPU-hours (A100 80GB) | Dataflow price "
          f"(a2-ultragpu-4g workers, ${worker_hour:.2f}/hour: 48 vCPU, 680 GB, 4 GPUs; disk not counted) |")
    print("|---|---|---|---|")
    gpu_rows = []
    for name, rate, source in THROUGHPUT:
        hours = [t / rate / 3600 * GPUS_PER_REPLICA for t in (total_low, total_high)]
        dollars = [h / GPUS_PER_REPLICA * worker_hour for h in hours]
        gpu_rows.append({"setting": name, "tokens_per_s": rate, "gpu_hours": hours, "gpu_dollars": dollars,
                         "source": source})
        print(f"| {name} | {rate:,.0f} | {hours[0]:.0f}-{hours[1]:.0f} | ${dollars[0]:,.0f}-${dollars[1]:,.0f} |")
    for _, _, source in THROUGHPUT:
        print(f"  source: {source}")
    result = {"tokenizer": tokenizer_name, "tokens": tokens, "gpu": gpu_rows}
    if ns.full_size.exists():
        full = json.loads(ns.full_size.read_text())
        captions = full["input"]["captions"]
        print(f"\n| CPU stages (measured here, {full['input'].get('workers', 2)} worker processes) | wall | "
              f"vCPU-hours for {CAPTIONS:,} captions | Dataflow batch price (vCPU + 4 GB per vCPU) |")
        print("|---|---|---|---|")
        for name, run in full["runs"].items():
            cores = full["input"].get("workers", 2)
            vcpu_hours = run["wall_s"] * cores / 3600 * CAPTIONS / captions
            dollars = vcpu_hours * (price.VCPU_PER_HR_BATCH + 4 * price.MEM_PER_GB_HR_BATCH)
            result.setdefault("cpu", {})[name] = {"vcpu_hours": vcpu_hours, "dollars": dollars}
            print(f"| {name} | {run['wall_s']:,.0f} s | {vcpu_hours:.2f} | ${dollars:.2f} "
                  f"(${price.VCPU_PER_HR_BATCH}/vCPU-hour, ${price.MEM_PER_GB_HR_BATCH}/GB-hour) |")
    else:
        print(f"\n(no {ns.full_size}: run benchmarks/full_size.py for the measured CPU figures)")
    print(json.dumps(result, indent=1), file=open(Path("/tmp") / "hardpos_cost_model.json", "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
