"""`python -m pipeline.train.evaluate --model=ViT-B-32 --pretrained=openai|PATH --data=DIR_OR_HUB --images=ROOT
--out=DIR`: a CLIP model on the REPLACE and SWAP evaluation sets, in the paper's Table 1 / Table 2 layout.

Per row, s(c|i), s(c_n|i), s(c_p|i) are cosine similarities of L2-normalised image and text embeddings (no logit
scale); SWAP images are cropped to ARO's box. The figures (pipeline/train/metrics.py) are given per set, per subset
(REPLACE-Relation, REPLACE-Attribute, SWAP), per VL-CheckList category and per replacement pair, with bootstrap 95%
intervals. A row whose image is missing, unreadable, too large to decode (--image_max_pixel_values) or whose box
misses it is skipped with its reason, never a crash.

With --suites and/or --models (NAME:PRETRAINED, repeatable) it scores one or more models on several suites in one
run: replace, swap (the above), sugarcrepe, aro, vl_checklist, imagenet, vtab, coco_retrieval, flickr_retrieval,
each from its own root flag (pipeline/train/suites/); it writes results.json, report.md (Tables 1, 2, 10 and the
compositionality table) and augmented_vs_brittleness.png instead (see docs/evaluation.md).

REPLACE is also reported three ways (pipeline/train/replace_views.py): every row (released), the rows whose
substitution the finetuning data never used (held_out: --finetune_table, --finetune_substitutions or the train table
a checkpoint of ours records) and the rows of the table entries a blind read judged true hard positives (strict).

Writes to --out: eval.json (figures, counts, provenance), eval.md (tables), scores.parquet (one row per scored
example, so every figure can be recomputed), skipped.jsonl (one line per skipped row) and, when matplotlib
imports, accuracy_vs_brittleness.png.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from pipeline.folder_lock import LockRefused, holder_record, lock_local, planted_link, write_own
from pipeline.publish.images import MAX_PIXEL_VALUES
from pipeline.tables.folders import output_folder_problem
from pipeline.train import metrics, replace_views, report
from pipeline.train.clip import UsageError
from pipeline.train.images import ImageLookup
from pipeline.train.sampling import limited_indices
from pipeline.train.scoring import score_options

TABLES = {"replace_eval": "REPLACE", "swap_eval": "SWAP"}
TABLE_ALIASES = {"replace": "replace_eval", "swap": "swap_eval"}
SUBSET_ORDER = ("REPLACE-Relation", "REPLACE-Attribute", "SWAP")
# open_clip's precisions; amp* keep fp32 weights and run under torch.autocast.
PRECISIONS = ("fp32", "fp16", "bf16", "pure_fp16", "pure_bf16", "amp", "amp_bf16")
EVAL_JSON, EVAL_MD, SCORES, SKIPPED, PLOT = ("eval.json", "eval.md", "scores.parquet", "skipped.jsonl",
                                             "accuracy_vs_brittleness.png")
SKIPPED_IN_JSON = 20  # the first skipped rows are listed in eval.json too; all of them in skipped.jsonl
DEFINITIONS = {
    "s": "cosine similarity of the L2-normalised image and text embeddings (no logit scale)",
    "original_accuracy": "fraction of rows with s(c) > s(c_n)",
    "augmented_accuracy": "fraction of rows with s(c) > s(c_n) and s(c_p) > s(c_n)",
    "brittleness": "fraction of rows with s(c) > s(c_n) > s(c_p) or s(c_p) > s(c_n) > s(c)",
    "ties": "c_n: rows with s(c) == s(c_n); p_n: s(c_p) == s(c_n); tied: either (a tied row is never counted "
            "correct or brittle); c_p: s(c) == s(c_p), for information",
    "ci95": "percentile bootstrap interval over rows (bootstrap resamples, seed)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog="python -m pipeline.train.evaluate", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="ViT-B-32", help="open_clip architecture, or hardpos-tiny")
    parser.add_argument("--pretrained", default=None,
                        help="open_clip tag (openai, ...), a checkpoint file, or empty for random weights (default: "
                             "openai where open_clip has those weights for --model, else random: hardpos-tiny)")
    parser.add_argument("--data", default=None, help="REPLACE/SWAP rows: Hub repo ORG/NAME, a published folder or a "
                                                     "run folder")
    parser.add_argument("--images", default=None,
                        help="images stage output, img2dataset shards (rows by key), or a folder of VG/COCO images")
    parser.add_argument("--out", required=True, help="output folder")
    suites = parser.add_argument_group(
        "several suites and models (pipeline/train/suites/)",
        "--suites or --models turns on the multi-suite run: results.json, report.md (Tables 1, 2, 10 and the "
        "compositionality table) and augmented_vs_brittleness.png in --out. A suite whose root flag is not "
        "given or not there is skipped with one line; the others run.")
    suites.add_argument("--suites", default=None,
                        help="comma-separated: replace,swap,sugarcrepe,aro,vl_checklist,imagenet,vtab,coco_retrieval,"
                             "flickr_retrieval, or all (default: replace,swap as a single-model run)")
    suites.add_argument("--models", action="append", default=None, metavar="NAME:PRETRAINED",
                        help="a model to score, e.g. ViT-B-32:openai or hardpos-tiny:ft/final.pt (NAME: alone for "
                             "random weights); repeat it or separate with commas (default: --model:--pretrained)")
    suites.add_argument("--sugarcrepe_root", help="SugarCrepe's JSON files (add_att.json, ..., swap_obj.json)")
    suites.add_argument("--coco_val_images", help="COCO val2017 images, for SugarCrepe")
    suites.add_argument("--aro_root", help="ARO's visual_genome_relation.json, visual_genome_attribution.json, images/")
    suites.add_argument("--aro_coco_root", help="COCO-Order: coco_karpathy_test.json and the COCO images it names")
    suites.add_argument("--aro_flickr_root", help="Flickr30k-Order: flickr30k_test.json and flickr30k-images/")
    suites.add_argument("--vl_checklist_root", help="VL-CheckList's data: Attribute/, Object/, Relation/ JSON files")
    suites.add_argument("--vl_checklist_images", help="the images VL-CheckList's paths name (default: its root)")
    suites.add_argument("--imagenet_root", help="clip-benchmark's WebDataset folder of ImageNet-1K (wds_imagenet1k)")
    suites.add_argument("--vtab_root", help="a folder of clip-benchmark's VTAB WebDataset folders "
                                            "(wds_vtab-cifar10, ...)")
    suites.add_argument("--retrieval_root", help="a folder with clip-benchmark's wds_mscoco_captions and wds_flickr30k")
    views = parser.add_argument_group(
        "REPLACE three ways (docs/evaluation.md)",
        "REPLACE's figures for every row (released), for the rows whose substitution the finetuning data never "
        "used (held_out) and for the table entries a blind read judged true hard positives (strict). held_out "
        "needs the finetuning data's substitutions: one of these flags, else the train table a checkpoint of "
        "pipeline.train.finetune records; without any it is reported as not computed.")
    views.add_argument("--finetune_table", default=None, metavar="PATH",
                       help="the train table the model was finetuned on: a folder or glob of its Parquet shards (or "
                            "a run or published folder); each row's caption -> hard_positive is a substitution")
    views.add_argument("--finetune_substitutions", default=None, metavar="FILE",
                       help="the finetuning data's substitutions, one `old -> new` a line (# comments)")
    parser.add_argument("--tables", default=None,
                        help="comma-separated: replace_eval,swap_eval (default: both, whichever exist in --data)")
    parser.add_argument("--split", default=None, help="split to read (default: the table's only split)")
    parser.add_argument("--limit", type=int, default=None,
                        help="score N rows of each table, drawn at random with --seed (with --suites: also of each "
                             "SugarCrepe subset, ARO set and VL-CheckList file; not the clip-benchmark suites)")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="image loading processes (0: in the main process)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (0: no intervals)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed; also seeds random init weights")
    parser.add_argument("--image_max_pixel_values", type=int, default=MAX_PIXEL_VALUES,
                        help=f"largest image decoded, in pixels x channels (default {MAX_PIXEL_VALUES:,}), read from "
                             f"its header first; a larger image or crop is skipped (image_too_large), not decoded")
    args = parser.parse_args(argv)
    for flag, minimum in (("batch_size", 1), ("workers", 0), ("bootstrap", 0), ("limit", 1), ("seed", 0),
                          ("image_max_pixel_values", 1)):
        value = getattr(args, flag)
        if value is not None and value < minimum:
            raise UsageError(f"--{flag} must be >= {minimum}, got {value}")
    if args.seed >= 2**63:  # numpy's and torch's generators take 64 bits
        raise UsageError(f"--seed must be < 2**63, got {args.seed}")
    check_out(args.out)
    if args.tables is None:
        args.table_list, args.tables_explicit = list(TABLES), False
    else:
        names = [TABLE_ALIASES.get(t.strip(), t.strip()) for t in args.tables.split(",") if t.strip()]
        unknown = [t for t in names if t not in TABLES]
        if unknown or not names:
            raise UsageError(f"--tables: unknown table {unknown[0] if unknown else '(none)'}; "
                             f"choose from {', '.join(TABLES)}")
        args.table_list, args.tables_explicit = list(dict.fromkeys(names)), True
    replace_views.check_flags(args.finetune_table, args.finetune_substitutions)
    if args.models is None:
        from pipeline.train.clip import resolve_pretrained

        args.pretrained = resolve_pretrained(args.model, args.pretrained)
    args.multi = args.suites is not None or args.models is not None
    if args.multi:  # each suite checks its own roots and is skipped, not failed, without them
        if args.tables_explicit:
            raise UsageError("--tables: with --suites or --models, name the sets in --suites (replace,swap)")
        from pipeline.train.suites.runner import parse_models, parse_suites

        args.suite_list = parse_suites(args.suites or "replace,swap")
        args.model_list = parse_models(args.models) if args.models else [(args.model, args.pretrained)]
        return args
    missing = [f"--{f}" for f in ("data", "images") if getattr(args, f) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    if not Path(args.images).is_dir():
        raise UsageError(f"--images: no such folder {args.images}")
    if not Path(args.data).exists() and not re.fullmatch(r"[\w.-]+/[\w.-]+", args.data):
        raise UsageError(f"--data: no such folder {args.data} (nor a Hub repo id ORG/NAME)")
    return args


def check_out(out: str) -> None:
    """A pipeline run's folder (its report.json) is not the evaluator's to write in: report.md, the multi-suite
    run's report, would replace the run's own."""
    from pipeline.tables.folders import REPORT_FILE

    if (Path(out) / REPORT_FILE).is_file():
        raise UsageError(f"--out={out} holds a pipeline run ({REPORT_FILE}), whose files the evaluator's would "
                         f"replace or mix with; choose another folder")


# ---------------------------------------------------------------------------------------------------- inputs

def load_rows(args) -> tuple[dict[str, list[dict]], list[str]]:
    """table -> its rows (--limit of them, drawn with --seed), and notes on default tables --data does not have."""
    from pipeline.tables.folders import PublishError
    from pipeline.tables.load import TableMissing, load_table

    tables, notes, failures = {}, [], []
    for name in args.table_list:
        try:
            loaded = load_table(args.data, name, split=args.split)
        except Exception as e:  # datasets raises many kinds (offline Hub, unknown config): each becomes one line
            message = f"{name}: {type(e).__name__}: {e}".splitlines()[0]
            # a default table that is not there is left out with a note; one that is there but does not check
            # (a changed shard, a link) stops the run: its scores would be missing from a report that looks whole
            if args.tables_explicit or (isinstance(e, PublishError) and not isinstance(e, TableMissing)):
                raise UsageError(f"--data: cannot load {message}") from None
            failures.append(message)
            continue
        if not hasattr(loaded, "select"):  # a DatasetDict: several splits and no --split
            raise UsageError(f"--split: {name} in {args.data} has splits {', '.join(loaded)}; choose one")
        if args.limit is not None:
            loaded = loaded.select(limited_indices(len(loaded), args.limit, args.seed))
        tables[name] = loaded.to_list()
    if not tables:
        raise UsageError(f"--data: no evaluation table in {args.data} ({'; '.join(failures)})")
    notes += [f"table not evaluated: {f}" for f in failures]
    return tables, notes


def check_pretrained(model: str, pretrained: str) -> None:
    from pipeline.train.clip import CheckpointError, import_open_clip, read_checkpoint

    open_clip = import_open_clip()
    if model not in open_clip.list_models():
        raise UsageError(f"--model: unknown open_clip model {model!r} (e.g. ViT-B-32, hardpos-tiny)")
    if not pretrained:
        return
    if Path(pretrained).is_file():
        try:  # read now (tensors mapped, not read), so that a bad file stops the run before any model is scored
            read_checkpoint(pretrained, mmap=True)
        except CheckpointError as e:
            raise UsageError(f"--pretrained: {e}") from None
        return
    tags = open_clip.list_pretrained_tags_by_model(model)
    if pretrained in tags:
        return
    if os.sep in pretrained or Path(pretrained).suffix:
        raise UsageError(f"--pretrained: no such file {pretrained}")
    raise UsageError(f"--pretrained: {pretrained!r} is neither a file nor an open_clip tag for {model} "
                     f"(tags: {', '.join(tags) or 'none'})")


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device=cuda: no CUDA device here")
    return device


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------- scoring

def score_rows(clip, tokenizer, transform, lookup: ImageLookup, rows: list[dict], *, device: str = "cpu",
               precision: str = "fp32", batch_size: int = 64, workers: int = 0, label: str = ""):
    """([(row position, s_c, s_n, s_p)], [(row position, reason, detail)]) for `rows`, in row order: the scorer of
    the suites (scoring.score_options) with the options c, c_n, c_p."""
    options = [{**row, "options": [row["caption"], row["hard_negative"], row["hard_positive"]]} for row in rows]
    scored, skipped = score_options(clip, tokenizer, transform, lookup, options, device=device, precision=precision,
                                    batch_size=batch_size, workers=workers, label=label)
    return [(i, s_c, s_n, s_p) for i, (s_c, s_n, s_p) in scored], skipped


# --------------------------------------------------------------------------------------------------- figures

def subset_label(table: str, subset: str | None) -> str:
    if table == "swap_eval":
        return "SWAP"
    return f"{TABLES[table]}-{(subset or 'unknown').capitalize()}"


def _label_order(label: str) -> tuple:
    return (SUBSET_ORDER.index(label) if label in SUBSET_ORDER else len(SUBSET_ORDER), label)


def score_records(table: str, rows: list[dict], scored: list[tuple]) -> list[dict]:
    """scores.parquet rows: the row's ids and groups with its three scores."""
    return [{"example_id": rows[i]["example_id"], "table": table, "subset": rows[i].get("subset"),
             "category": rows[i].get("category"), "replaced_from": rows[i].get("replaced_from"),
             "replaced_to": rows[i].get("replaced_to"), "s_c": s_c, "s_n": s_n, "s_p": s_p}
            for i, s_c, s_n, s_p in scored]


def figures(records: list[dict], n_resamples: int = 1000, seed: int = 0) -> dict:
    """Per set, subset, category and replacement pair (metrics.summarize) from scores.parquet-like records."""
    s = {k: np.array([r[k] for r in records], dtype=np.float64) for k in ("s_c", "s_n", "s_p")}
    subsets = [subset_label(r["table"], r["subset"]) for r in records]
    keys = {
        "sets": [TABLES[r["table"]] for r in records],
        "subsets": subsets,
        "categories": [(label, r["category"]) if r["category"] else None
                       for label, r in zip(subsets, records, strict=True)],
        "pairs": [(label, r["category"], r["replaced_from"], r["replaced_to"]) if r["replaced_from"] else None
                  for label, r in zip(subsets, records, strict=True)],
    }
    grouped = {level: metrics.summarize_groups(k, s["s_c"], s["s_n"], s["s_p"], n_resamples, seed)
               for level, k in keys.items()}
    order = {"sets": lambda k: list(TABLES.values()).index(k), "subsets": _label_order,
             "categories": lambda k: (_label_order(k[0]), k[1]),
             "pairs": lambda k: (_label_order(k[0]), k[1] or "", k[2], k[3])}
    out = {level: {k: grouped[level][k] for k in sorted(grouped[level], key=order[level])}
           for level in ("sets", "subsets")}
    out["categories"] = [{"subset": k[0], "category": k[1], **grouped["categories"][k]}
                         for k in sorted(grouped["categories"], key=order["categories"])]
    out["pairs"] = [{"subset": k[0], "category": k[1], "replaced_from": k[2], "replaced_to": k[3],
                     **grouped["pairs"][k]} for k in sorted(grouped["pairs"], key=order["pairs"])]
    return out


def replace_figures(records: list[dict], n_resamples: int = 1000, seed: int = 0) -> dict:
    """REPLACE's Table 1 figures (the set and its subsets) of some of its scored rows, by figures() itself: what
    each REPLACE view reports for the rows it keeps."""
    f = figures(records, n_resamples, seed)
    return {"set": f["sets"].get("REPLACE") or metrics.summarize([], [], [], n_resamples, seed),
            "subsets": {k: g for k, g in f["subsets"].items() if k.startswith("REPLACE-")}}


# --------------------------------------------------------------------------------------------------- outputs

def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _with_ci(value, ci) -> str:
    return _pct(value) if ci is None else f"{_pct(value)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _score(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def model_label(result: dict) -> str:
    pretrained = result["pretrained"]
    name = Path(pretrained).name if pretrained and Path(pretrained).suffix else (pretrained or "random init")
    return f"{result['model']} / {name}"


def format_table1(results: list[dict]) -> list[str]:
    """The paper's Table 1: a row per model, Orig./Aug./Brittleness per subset, in percent."""
    subsets = sorted({s for r in results for s in r["subsets"]}, key=_label_order)
    head = ["model"] + [f"{s} {m}" for s in subsets for m in ("Orig.", "Aug.", "Brittle.")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        cells = [model_label(result)]
        for s in subsets:
            g = result["subsets"].get(s)
            cells += ["–"] * 3 if g is None else [_pct(g["original_accuracy"]), _pct(g["augmented_accuracy"]),
                                                  _pct(g["brittleness"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _group_rows(groups: list[tuple[list[str], dict]], key_head: list[str]) -> list[str]:
    head = key_head + ["n", "Original", "Augmented", "Brittleness", "tied"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for keys, g in groups:
        cells = keys + [str(g["n"]), _with_ci(g["original_accuracy"], g["original_ci95"]),
                        _with_ci(g["augmented_accuracy"], g["augmented_ci95"]),
                        _with_ci(g["brittleness"], g["brittleness_ci95"]), str(g["ties"]["tied"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sets_then_subsets(result: dict) -> list[tuple[str, dict]]:
    """REPLACE, REPLACE-Relation, REPLACE-Attribute, SWAP: each set, then its subsets (SWAP is both)."""
    out = []
    for name, g in result["sets"].items():
        out.append((name, g))
        out += [(s, h) for s, h in result["subsets"].items() if s.startswith(f"{name}-")]
    return out


def format_markdown(result: dict) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in result["skip_reasons"].items())
    ci = report.intervals(result["settings"])
    lines = [f"# Evaluation: {model_label(result)}", "",
             f"model `{result['model']}`, pretrained `{result['pretrained'] or '(random init)'}`, "
             f"data `{result['data']}`, images `{result['images']}`; {result['rows']} rows, "
             f"{result['scored']} scored, {result['skipped']} skipped{f' ({reasons})' if reasons else ''}.", ""]
    lines += [f"Note: {note}" for note in result["notes"]] + ([""] if result["notes"] else [])
    lines += ["## Table 1: accuracy and brittleness (%)", "", *format_table1([result]), "",
              "Original: s(c) > s(c_n). Augmented: s(c) > s(c_n) and s(c_p) > s(c_n). Brittleness: "
              "s(c) > s(c_n) > s(c_p) or s(c_p) > s(c_n) > s(c). Comparisons are strict: a tied row is never "
              "correct or brittle.", ""]
    if result["replace_views"]:
        lines += [f"## REPLACE three ways, % with {ci}", "",
                  *report.replace_three_ways([(model_label(result), result["replace_views"])]), ""]
    lines += ["## Table 2: mean scores and ties", "",
              "| subset | n | s(c) | s(c_n) | s(c_p) | ties s(c)=s(c_n) | ties s(c_p)=s(c_n) | ties s(c)=s(c_p) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, g in result["subsets"].items():
        lines.append(f"| {name} | {g['n']} | {_score(g['mean_s_c'])} | {_score(g['mean_s_n'])} | "
                     f"{_score(g['mean_s_p'])} | {g['ties']['c_n']} | {g['ties']['p_n']} | {g['ties']['c_p']} |")
    lines += ["", f"## Per set and subset, % with {ci}", "",
              *_group_rows([([k], g) for k, g in _sets_then_subsets(result)], ["group"])]
    if result["categories"]:
        lines += ["", "## Per VL-CheckList category", "",
                  *_group_rows([([g["subset"], g["category"]], g) for g in result["categories"]],
                               ["subset", "category"])]
    if result["pairs"]:
        lines += ["", "## Per replacement pair", "",
                  *_group_rows([([g["subset"], g["category"], f"{g['replaced_from']} → {g['replaced_to']}"], g)
                                for g in result["pairs"]], ["subset", "category", "pair"])]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> str | None:
    """accuracy vs brittleness per subset (PNG); None when written, else why not (matplotlib missing)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        return f"plot not written: matplotlib is not installed ({e})"
    figure = Figure(figsize=(6, 4.5))
    FigureCanvasAgg(figure)  # attaches itself; no pyplot, so no global backend state
    ax = figure.add_subplot()
    colors = [f"C{k}" for k in range(10)]
    for k, (name, g) in enumerate(result["subsets"].items()):
        if not g["n"]:
            continue
        x = 100 * g["brittleness"]
        xerr = None if g["brittleness_ci95"] is None else [[x - 100 * g["brittleness_ci95"][0]],
                                                           [100 * g["brittleness_ci95"][1] - x]]
        for kind, marker in (("original", "o"), ("augmented", "^")):
            y, ci = 100 * g[f"{kind}_accuracy"], g[f"{kind}_ci95"]
            yerr = None if ci is None else [[y - 100 * ci[0]], [100 * ci[1] - y]]
            ax.errorbar([x], [y], xerr=xerr if kind == "original" else None, yerr=yerr, fmt=marker,
                        color=colors[k % len(colors)], capsize=3, label=f"{name} ({kind})")
        ax.plot([x, x], [100 * g["original_accuracy"], 100 * g["augmented_accuracy"]], ":",
                color=colors[k % len(colors)])
    ax.set_xlabel("Brittleness (%)")
    ax.set_ylabel("Accuracy (%)")
    ax.set_title(f"{model_label(result)}: accuracy vs brittleness")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, dpi=120, format="png")
    write_own(path, png.getvalue())
    return None


def write_scores(records: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    strings = ("example_id", "table", "subset", "category", "replaced_from", "replaced_to")
    schema = pa.schema([(c, pa.string()) for c in strings] + [(c, pa.float64()) for c in ("s_c", "s_n", "s_p")])
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(records, schema=schema), sink)
    write_own(path, sink.getvalue().to_pybytes())  # beside, then renamed: never through a link at its name


# ------------------------------------------------------------------------------------------------------ main

def load_model(model: str, pretrained: str, device: str, precision: str, seed: int):
    """(clip, eval transform, tokenizer); a weight problem is one UsageError line naming --pretrained."""
    import torch

    from pipeline.train.clip import CheckpointError, create, one_line

    torch.manual_seed(seed)  # random-init runs (smoke tests) are reproducible
    try:
        clip, _, transform, tokenizer = create(model, pretrained, device,
                                               "fp32" if precision.startswith("amp") else precision)
    except CheckpointError as e:
        raise UsageError(f"--pretrained: {e}") from None
    except (RuntimeError, OSError, KeyError) as e:  # download refused, wrong checkpoint for the architecture
        raise UsageError(f"--pretrained={pretrained}: cannot load weights for {model}: {one_line(e)}") from None
    return clip, transform, tokenizer


def evaluate(args, loaded=None) -> dict:
    """Scores every row, writes the outputs, returns eval.json's content. `loaded`: (clip, transform,
    tokenizer) already built for args.model / args.pretrained on args.device (the multi-suite run's)."""
    import torch

    from pipeline.train.clip import import_open_clip

    problem = output_folder_problem("--out", args.out) or \
        planted_link("--out", str(args.out), files=[EVAL_JSON, EVAL_MD, SCORES, SKIPPED, PLOT])
    if problem:  # before any work: a link there would have the figures written over a file anywhere
        raise UsageError(problem)
    try:
        lookup = ImageLookup(args.images, args.image_max_pixel_values)
    except ValueError as e:  # shards that cannot be read as such
        raise UsageError(str(e)) from None
    check_pretrained(args.model, args.pretrained)
    device = resolve_device(args.device)
    tables, notes = load_rows(args)
    # Before any scoring: the finetuning table is read (and a bad one refused) while nothing is spent yet.
    held_out = replace_views.held_out(args.finetune_table, args.finetune_substitutions, args.pretrained) \
        if "replace_eval" in tables else None
    clip, transform, tokenizer = loaded or load_model(args.model, args.pretrained, device, args.precision, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records, skipped_rows, per_table = [], [], {}
    for table, rows in tables.items():
        scored, skipped = score_rows(clip, tokenizer, transform, lookup, rows, device=device,
                                     precision=args.precision, batch_size=args.batch_size, workers=args.workers,
                                     label=table)
        records += score_records(table, rows, scored)
        skipped_rows += [{"example_id": rows[i]["example_id"], "table": table, "reason": reason, "detail": detail}
                         for i, reason, detail in sorted(skipped)]
        reasons = {}
        for _, reason, _ in skipped:
            reasons[reason] = reasons.get(reason, 0) + 1
        per_table[table] = {"rows": len(rows), "scored": len(scored), "skipped": len(skipped),
                            "skip_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
                            "generators": sorted({r["generator"] for r in rows if r.get("generator")}),
                            "table_sha256": sorted({r["table_sha256"] for r in rows if r.get("table_sha256")})}
        print(f"{table}: {len(rows)} rows, {len(scored)} scored, {len(skipped)} skipped", file=sys.stderr)
    all_reasons: dict[str, int] = {}
    for t in per_table.values():
        for reason, count in t["skip_reasons"].items():
            all_reasons[reason] = all_reasons.get(reason, 0) + count
    open_clip = import_open_clip()
    pretrained_is_file = bool(args.pretrained) and Path(args.pretrained).is_file()
    result = {
        "model": args.model,
        "pretrained": args.pretrained,
        "pretrained_sha256": sha256_file(args.pretrained) if pretrained_is_file else None,
        "data": args.data,
        "images": args.images,
        "split": args.split,
        "settings": {"tables": list(tables), "limit": args.limit, "batch_size": args.batch_size,
                     "device": device, "precision": args.precision, "bootstrap": args.bootstrap, "seed": args.seed,
                     "image_max_pixel_values": args.image_max_pixel_values},
        "versions": {"open_clip": getattr(open_clip, "__version__", None), "torch": torch.__version__},
        "definitions": DEFINITIONS,
        "rows": sum(t["rows"] for t in per_table.values()),
        "scored": len(records),
        "skipped": len(skipped_rows),
        "skip_reasons": dict(sorted(all_reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "tables": per_table,
        **figures(records, args.bootstrap, args.seed),
        "replace_views": None if held_out is None else replace_views.compute(
            records, {"released": replace_views.RELEASED, "held_out": held_out,
                      "strict": replace_views.strict(per_table["replace_eval"]["table_sha256"])},
            lambda kept: replace_figures(kept, args.bootstrap, args.seed)),
        "skipped_rows": skipped_rows[:SKIPPED_IN_JSON],
        "notes": notes,
    }
    write_scores(records, out / SCORES)
    write_own(out / SKIPPED, "".join(json.dumps(row) + "\n" for row in skipped_rows).encode("utf-8"))
    (out / PLOT).unlink(missing_ok=True)  # never leave an earlier run's plot beside these figures
    why_not = plot(result, out / PLOT) if records else "plot not written: no row was scored"
    if why_not:
        result["notes"].append(why_not)
    result["outputs"] = {"json": EVAL_JSON, "markdown": EVAL_MD, "scores": SCORES, "skipped": SKIPPED,
                         "plot": None if why_not else PLOT}
    write_own(out / EVAL_MD, format_markdown(result).encode("utf-8"))
    write_own(out / EVAL_JSON, (json.dumps(result, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return result


@contextlib.contextmanager
def out_lock(out: str):
    """--out's lock (pipeline/folder_lock.py) while the evaluator writes there: a second evaluator into the folder
    would write its scores beside this one's figures. Refused in one line before any model loads, as is an --out
    inside a folder a run owns (checked before the lock file is written into it)."""
    problem = output_folder_problem("--out", out)
    if problem:
        raise UsageError(problem)
    try:
        fd = lock_local(str(out), holder_record("evaluate"), "--out")
    except LockRefused as e:
        raise UsageError(str(e)) from None
    try:
        yield
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    started = time.monotonic()
    try:
        args = parse_args(argv)
        with out_lock(args.out):
            if args.multi:
                return main_suites(args, started)
            result = evaluate(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(format_table1([result])))
    if result["replace_views"]:
        print("REPLACE three ways:")
        print("\n".join(report.replace_three_ways([(model_label(result), result["replace_views"])])))
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"{result['scored']} of {result['rows']} rows scored, {result['skipped']} skipped; "
          f"done in {time.monotonic() - started:.1f}s; results: {Path(args.out) / EVAL_JSON}")
    if not result["scored"]:
        print(f"error: no row could be scored ({result['skip_reasons']}); check --images", file=sys.stderr)
        return 1
    return 0


def main_suites(args, started: float) -> int:
    """The multi-suite run: prints Table 1 and Table 10, the skipped suites, where the results are."""
    from pipeline.train.suites.runner import RESULTS_JSON, run_suites

    result = run_suites(args)
    print("\n".join(report.table1(result)))
    section = report.replace_three_ways_section(result)
    if section:
        print("\n".join(section).rstrip())
    print("\n".join(report.table10(result)))
    print("\n".join(report.compositionality(result)[0]))
    for note in result["notes"]:
        print(f"note: {note}")
    ran = sum(s["status"] == "ok" for m in result["models"] for s in m["suites"].values())
    total = len(result["models"]) * len(result["suites"])
    print(f"{ran} of {total} model-suite runs done, {len(result['skipped'])} suite(s) skipped; done in "
          f"{time.monotonic() - started:.1f}s; results: {Path(args.out) / RESULTS_JSON}")
    if not ran:
        print("error: no suite could run for any model (see the lines above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from pipeline.urls import redact_output

    redact_output()  # before anything prints: no secret of a flag reaches the terminal
    sys.exit(main())
