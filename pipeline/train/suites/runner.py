"""Several models on several suites in one run (`evaluate --suites=... --models=...`).

Every suite is checked once before any model loads: one that cannot run (its root flag not given, its folder
not there) prints one line naming the flag and is recorded as skipped; the others run. A suite that fails on
one model (unreadable file, no image found) is recorded as failed with its one line; the run goes on.

Writes to --out: results.json (every figure, per model and suite), report.md (pipeline/train/report.py: the
paper's Tables 1, 2 and 10 and the compositionality table), augmented_vs_brittleness.png, and per model a folder
<slug>/ with the REPLACE/SWAP evaluator's own outputs (replace_swap/).
"""
from __future__ import annotations

import json
import re
import sys
import tarfile
import time
from pathlib import Path

from pipeline.folder_lock import planted_link, write_own
from pipeline.tables.folders import output_folder_problem
from pipeline.train.clip import TrainDependencyMissing, UsageError
from pipeline.train.suites import HARDPOS, SUITES, Context, SuiteSkipped, suite_table

RESULTS_JSON, REPORT_MD, PLOT = "results.json", "report.md", "augmented_vs_brittleness.png"

# What one suite's data or library may raise: the suite is recorded as failed (one line) and the run goes on (a
# shard that is no tar: tarfile.ReadError).
SUITE_ERRORS = (ValueError, OSError, KeyError, IndexError, TypeError, RuntimeError, tarfile.TarError)


def parse_suites(value: str) -> list[str]:
    names = [s.strip() for s in value.split(",") if s.strip()]
    names = list(SUITES) if names == ["all"] else names
    unknown = [s for s in names if s not in SUITES]
    if unknown or not names:
        raise UsageError(f"--suites: unknown suite {unknown[0] if unknown else '(none)'}; choose from "
                         f"{', '.join(SUITES)} or all")
    return list(dict.fromkeys(names))


def parse_models(values: list[str]) -> list[tuple[str, str]]:
    """NAME:PRETRAINED pairs (split at the first colon; NAME: alone is random init), one per --models value or
    comma-separated."""
    models = []
    for value in values:
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            if ":" not in item:
                raise UsageError(f"--models: {item!r} is not NAME:PRETRAINED (e.g. ViT-B-32:openai, "
                                 f"hardpos-tiny:ft/final.pt, hardpos-tiny: for random weights)")
            name, pretrained = item.split(":", 1)
            models.append((name, pretrained))
    if not models:
        raise UsageError("--models: no model given")
    return models


def slug(model: str, pretrained: str, taken: set[str]) -> str:
    """A folder name for the model's outputs, unique within the run."""
    stem = Path(pretrained).stem if pretrained and Path(pretrained).suffix else (pretrained or "random")
    base = re.sub(r"[^\w.-]+", "_", f"{model}_{stem}")
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def check_suites(names: list[str], args) -> dict[str, str]:
    """suite -> why it is skipped, for those that cannot run; each printed as one line."""
    table, skipped = suite_table(), {}
    for name in names:
        try:
            table[name][1].check(name, args)
        except (SuiteSkipped, TrainDependencyMissing) as e:
            skipped[name] = str(e)
            print(f"{name}: skipped: {e}", file=sys.stderr)
    return skipped


def suite_errors() -> tuple:
    """SUITE_ERRORS and webdataset's DecodingError (a sample it could not decode: a damaged image), where installed."""
    try:
        from webdataset.autodecode import DecodingError
    except ImportError:
        return SUITE_ERRORS
    return (*SUITE_ERRORS, DecodingError)


def _one_line(e: BaseException) -> str:
    """The error's first line; for an error with no text of its own (webdataset's DecodingError) its cause's, with
    where it was raised (the sample's key and the shard)."""
    text = str(e).strip()
    if not text and e.__cause__ is not None:
        where = " ".join(f"{k} {getattr(e, k)}" for k in ("key", "url", "k") if getattr(e, k, None))
        return f"{type(e).__name__} ({where}): {_one_line(e.__cause__)}"
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def run_model(ctx: Context, names: list[str], skipped: dict[str, str], args) -> dict[str, dict]:
    from pipeline.train.suites import hardpos

    table, out = suite_table(), {}
    hard = [n for n in names if table[n][0] == HARDPOS and n not in skipped]
    if hard:
        try:
            for name, figures in hardpos.run_sets(hard, ctx, args).items():
                out[name] = figures if figures.get("status") == "failed" else {"status": "ok", **figures}
        except (UsageError, ValueError, OSError) as e:
            out.update({n: {"status": "failed", "reason": _one_line(e)} for n in hard})
    for name in names:
        kind, module = table[name]
        if name in skipped:
            out[name] = {"status": "skipped", "reason": skipped[name]}
        elif kind != HARDPOS:
            started = time.monotonic()
            try:
                out[name] = {"status": "ok", **module.run(name, ctx, args)}
            except SuiteSkipped as e:
                out[name] = {"status": "skipped", "reason": str(e)}
            except suite_errors() as e:  # this suite only
                out[name] = {"status": "failed", "reason": _one_line(e)}
            out[name]["seconds"] = round(time.monotonic() - started, 2)
        out[name]["kind"] = kind
        if out[name]["status"] == "failed":
            print(f"{name}: failed for {ctx.model}:{ctx.pretrained}: {out[name]['reason']}", file=sys.stderr)
    return {n: out[n] for n in names}


def run_suites(args) -> dict:
    import torch

    from pipeline.train import evaluate, report
    from pipeline.train.clip import import_open_clip

    names, models = args.suite_list, args.model_list
    for model, pretrained in models:
        try:
            evaluate.check_pretrained(model, pretrained)
        except UsageError as e:
            if not args.models:  # --model / --pretrained, as the message says
                raise
            raise UsageError(f"--models {model}:{pretrained}: {e}") from None
    device = evaluate.resolve_device(args.device)
    skipped = check_suites(names, args)
    out = Path(args.out)
    problem = output_folder_problem("--out", out)  # before the folder is made
    if problem:
        raise UsageError(problem)
    out.mkdir(parents=True, exist_ok=True)
    problem = planted_link("--out", str(out), files=[RESULTS_JSON, REPORT_MD, PLOT])  # and no link in its models
    if problem:
        raise UsageError(problem)
    taken: set[str] = set()
    results = []
    for model, pretrained in models:
        started = time.monotonic()
        clip, transform, tokenizer = evaluate.load_model(model, pretrained, device, args.precision, args.seed)
        ctx = Context(clip=clip, transform=transform, tokenizer=tokenizer, model=model, pretrained=pretrained,
                      slug=slug(model, pretrained, taken), out=Path(), device=device, precision=args.precision,
                      batch_size=args.batch_size, workers=args.workers, bootstrap=args.bootstrap, seed=args.seed,
                      image_max_pixel_values=args.image_max_pixel_values)
        ctx.out = out / ctx.slug
        is_file = bool(pretrained) and Path(pretrained).is_file()
        results.append({"model": model, "pretrained": pretrained, "slug": ctx.slug,
                        "pretrained_sha256": evaluate.sha256_file(pretrained) if is_file else None,
                        "suites": run_model(ctx, names, skipped, args),
                        "seconds": round(time.monotonic() - started, 2)})
        del clip, ctx
    open_clip = import_open_clip()
    result = {
        "suites": names,
        "skipped": skipped,
        "settings": {"device": device, "precision": args.precision, "batch_size": args.batch_size,
                     "bootstrap": args.bootstrap, "seed": args.seed, "limit": args.limit,
                     "roots": {f: getattr(args, f) for f in ROOT_FLAGS}},
        "versions": {"open_clip": getattr(open_clip, "__version__", None), "torch": torch.__version__,
                     "clip_benchmark": _version("clip-benchmark")},
        "definitions": evaluate.DEFINITIONS | report.DEFINITIONS,
        "models": results,
        "notes": [],
    }
    (out / PLOT).unlink(missing_ok=True)  # never leave an earlier run's plot beside these figures
    why_not = report.plot(result, out / PLOT)
    if why_not:
        result["notes"].append(why_not)
    result["outputs"] = {"json": RESULTS_JSON, "markdown": REPORT_MD, "plot": None if why_not else PLOT}
    write_own(out / REPORT_MD, report.format_report(result).encode("utf-8"))
    write_own(out / RESULTS_JSON, (json.dumps(result, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return result


ROOT_FLAGS = ("data", "images", "sugarcrepe_root", "coco_val_images", "aro_root", "aro_coco_root",
              "aro_flickr_root", "vl_checklist_root", "vl_checklist_images", "imagenet_root", "vtab_root",
              "retrieval_root")


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
