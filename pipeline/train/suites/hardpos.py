"""Our REPLACE and SWAP sets (the paper's Tables 1 and 2): pipeline/train/evaluate.py's evaluate(), run once per
model for the sets asked for, its full outputs (eval.json, eval.md, scores.parquet, skipped.jsonl, plot) in
<out>/<model>/replace_swap/. --data (Hub repo, published or run folder) and --images are its root flags."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from pipeline.train.suites import Context, SuiteSkipped

TABLE_OF = {"replace": "replace_eval", "swap": "swap_eval"}
SET_OF = {"replace": "REPLACE", "swap": "SWAP"}


def check(name: str, args) -> None:
    if not args.data:
        raise SuiteSkipped("--data not given")
    if not Path(args.data).exists() and not re.fullmatch(r"[\w.-]+/[\w.-]+", args.data):
        raise SuiteSkipped(f"--data={args.data} does not exist (nor is it a Hub repo id ORG/NAME)")
    if not args.images:
        raise SuiteSkipped("--images not given")
    if not Path(args.images).is_dir():
        raise SuiteSkipped(f"--images={args.images} does not exist")


def run_sets(names: list[str], ctx: Context, args) -> dict[str, dict]:
    """suite name -> its figures: the set's, its subsets' and the path of the full outputs."""
    from pipeline.train import evaluate

    out = ctx.out / "replace_swap"
    one = argparse.Namespace(**{**vars(args), "model": ctx.model, "pretrained": ctx.pretrained, "out": str(out),
                                "table_list": [TABLE_OF[n] for n in names], "tables_explicit": False})
    result = evaluate.evaluate(one, loaded=(ctx.clip, ctx.transform, ctx.tokenizer))
    figures = {}
    for name in names:
        label = SET_OF[name]
        if label not in result["sets"]:
            table = result["tables"].get(TABLE_OF[name])
            why = "no row scored" if table else next((n for n in result["notes"] if TABLE_OF[name] in n),
                                                      f"{TABLE_OF[name]} not in --data")
            figures[name] = {"status": "failed", "reason": why}
            continue
        figures[name] = {"set": result["sets"][label],
                         "subsets": {k: v for k, v in result["subsets"].items() if k.split("-")[0] == label},
                         "table": result["tables"][TABLE_OF[name]],
                         **({"views": result["replace_views"]} if name == "replace" else {}),
                         "outputs": str(out.relative_to(ctx.out.parent))}
    return figures
