"""Ranking suites: one image, its correct caption and one or more wrong ones; a row is correct when the correct
caption scores strictly above every other (a tie is never correct, as in REPLACE/SWAP).

Each reads the files its authors publish:
- sugarcrepe (Hsieh et al. 2023): --sugarcrepe_root with add_att.json, add_obj.json, replace_att.json,
  replace_obj.json, replace_rel.json, swap_att.json, swap_obj.json ({id: {filename, caption, negative_caption}}),
  images from --coco_val_images (COCO val2017). Accuracy per subset.
- aro (Yuksekgonul et al. 2023): --aro_root with visual_genome_relation.json, visual_genome_attribution.json and
  images/ (each row cropped to its box); --aro_coco_root with coco_karpathy_test.json and the COCO images it
  names (val2014/...); --aro_flickr_root with flickr30k_test.json and flickr30k-images/. COCO-Order and
  Flickr30k-Order are built as ARO builds them: each caption against its four word-order shuffles
  (pipeline/perturb/neg_order.py, seeded per caption), all lower-cased and stripped of punctuation. ARO's own
  figures are macro accuracies: VG-Relation over relations, leaving out its symmetric ones
  (data/aro_symmetric_relations.json), VG-Attribution over attribute pairs with at least 25 rows.
- vl_checklist (Zhao et al. 2022): --vl_checklist_root with Attribute/, Object/, Relation/ holding JSON files of
  [image_path, {"POS": [caption], "NEG": [caption, ...]}], images under --vl_checklist_images (default: the root).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from pipeline.train import metrics
from pipeline.train.sampling import limited, limited_indices
from pipeline.train.suites import Context, SuiteSkipped, root_flag

SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
ARO_PARTS = ("VG-Relation", "VG-Attribution", "COCO-Order", "Flickr30k-Order")
ARO_FLAGS = {"VG-Relation": "aro_root", "VG-Attribution": "aro_root", "COCO-Order": "aro_coco_root",
             "Flickr30k-Order": "aro_flickr_root"}
ARO_FILES = {"VG-Relation": "visual_genome_relation.json", "VG-Attribution": "visual_genome_attribution.json",
             "COCO-Order": "coco_karpathy_test.json", "Flickr30k-Order": "flickr30k_test.json"}
ARO_MACRO_MIN_ROWS = 25  # VG-Attribution's pairs with fewer rows are left out of ARO's macro accuracy
ARO_MAX_WORDS = 30
VL_CHECKLIST_CATEGORIES = ("Object", "Attribute", "Relation")
DATA = Path(__file__).resolve().parent / "data"


# ------------------------------------------------------------------------------------------------ checking

def check(name: str, args) -> None:
    if name == "sugarcrepe":
        root = root_flag(args, "sugarcrepe_root")
        root_flag(args, "coco_val_images")
        if not any((root / f"{s}.json").is_file() for s in SUGARCREPE_SUBSETS):
            files = ", ".join(s + ".json" for s in SUGARCREPE_SUBSETS)
            raise SuiteSkipped(f"--sugarcrepe_root={root} has none of {files}")
    elif name == "aro":
        if not any(getattr(args, f, None) for f in set(ARO_FLAGS.values())):
            raise SuiteSkipped("--aro_root, --aro_coco_root, --aro_flickr_root not given")
        problems = []
        for part in ARO_PARTS:
            try:
                _aro_file(args, part)
                return
            except SuiteSkipped as e:
                problems.append(str(e))
        raise SuiteSkipped("; ".join(dict.fromkeys(problems)))
    elif name == "vl_checklist":
        root = root_flag(args, "vl_checklist_root")
        if args.vl_checklist_images:
            root_flag(args, "vl_checklist_images")
        if not _vl_checklist_files(root):
            folders = ", ".join(VL_CHECKLIST_CATEGORIES)
            raise SuiteSkipped(f"--vl_checklist_root={root} has no JSON file under {folders}")
    else:
        raise KeyError(name)


def _aro_file(args, part: str) -> Path:
    root = root_flag(args, ARO_FLAGS[part])
    path = root / ARO_FILES[part]
    if not path.is_file():
        raise SuiteSkipped(f"--{ARO_FLAGS[part]}={root} has no {ARO_FILES[part]}")
    return path


def _vl_checklist_files(root: Path) -> list[Path]:
    return sorted(p for c in VL_CHECKLIST_CATEGORIES if (root / c).is_dir() for p in (root / c).rglob("*.json"))


class Repeated(dict):
    """A JSON object that gives names twice (`repeated`, every such name): json keeps the last value silently; a
    suite skips what they name (repeated_field), as the pipeline's readers reject such a record."""

    repeated: frozenset = frozenset()


def _names_once(pairs: list) -> dict:
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    marked = Repeated(found)
    seen: set = set()
    marked.repeated = frozenset(name for name, _ in pairs if name in seen or seen.add(name))
    return marked


def read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_names_once)
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{path}: cannot read JSON: {type(e).__name__}: {str(e).splitlines()[0]}") from None


# ------------------------------------------------------------------------------------------------- scoring

def rank(ctx: Context, images_root: Path, rows: list[dict], label: str, sink: list) -> tuple[list[dict], dict]:
    """Per scored row {example_id, group, detail, scores, correct} (also added to sink), and skip reasons with
    counts."""
    from pipeline.train.images import ImageLookup
    from pipeline.train.scoring import score_options

    lookup = ImageLookup(str(images_root), ctx.image_max_pixel_values)
    scored, skipped = score_options(ctx.clip, ctx.tokenizer, ctx.transform, lookup, rows, device=ctx.device,
                                    precision=ctx.precision, batch_size=ctx.batch_size, workers=ctx.workers,
                                    label=label)
    out = [{"example_id": rows[i]["example_id"], "group": rows[i]["group"], "detail": rows[i].get("detail"),
            "scores": scores, "correct": bool(scores[0] > max(scores[1:]))} for i, scores in scored]
    sink += out
    reasons: dict[str, int] = {}
    for _, reason, _ in skipped:
        reasons[reason] = reasons.get(reason, 0) + 1
    return out, reasons


def summary(correct: list[bool], ctx: Context) -> dict:
    hits = np.asarray(correct, dtype=bool)
    n = len(hits)
    return {"n": n, "correct": int(hits.sum()), "accuracy": float(hits.mean()) if n else None,
            "ci95": metrics.bootstrap_interval(hits, ctx.bootstrap, ctx.seed)}


def _groups(scored: list[dict], key: str = "group") -> dict[str, list[bool]]:
    groups: dict[str, list[bool]] = {}
    for r in scored:
        groups.setdefault(r[key], []).append(r["correct"])
    return groups


# ------------------------------------------------------------------------------------------------- suites

def run(name: str, ctx: Context, args) -> dict:
    """The suite's figures; every scored row (its option scores, correct or not) in <model>/<suite>_scores.jsonl,
    so that any figure can be recomputed."""
    from pipeline.folder_lock import planted_link, write_own

    problem = planted_link("--out", str(ctx.out), files=[f"{name}_scores.jsonl"])
    if problem:  # before the scoring, not after it
        raise ValueError(problem)
    scored: list[dict] = []
    figures = {"sugarcrepe": run_sugarcrepe, "aro": run_aro, "vl_checklist": run_vl_checklist}[name](ctx, args, scored)
    ctx.out.mkdir(parents=True, exist_ok=True)
    write_own(ctx.out / f"{name}_scores.jsonl", "".join(json.dumps(r) + "\n" for r in scored).encode("utf-8"))
    return {**figures, "scores": f"{ctx.slug}/{name}_scores.jsonl"}


def sugarcrepe_rows(root: Path, limit: int | None = None, seed: int = 0) -> tuple[list[dict], list[str], dict]:
    """Rows of every subset file present (`limit` of each, drawn with `seed`), the subsets missing, and the entries
    skipped by reason (repeated_field: an id given twice, none of its entries taken; or a field given twice)."""
    rows, missing, bad = [], [], {}
    for subset in SUGARCREPE_SUBSETS:
        path = root / f"{subset}.json"
        if not path.is_file():
            missing.append(subset)
            continue
        annotations = read_json(path)
        if not isinstance(annotations, dict):
            raise ValueError(f"{path}: expected SugarCrepe's {{id: {{filename, caption, negative_caption}}}}")
        if isinstance(annotations, Repeated):  # json kept each such id's last entry: the others are not there
            bad["repeated_field"] = bad.get("repeated_field", 0) + len(annotations.repeated)
            annotations = {k: v for k, v in annotations.items() if k not in annotations.repeated}
        for key, a in limited(list(annotations.items()), limit, seed):
            if isinstance(a, Repeated):
                bad["repeated_field"] = bad.get("repeated_field", 0) + 1
                continue
            texts = [a.get(k) if isinstance(a, dict) else None for k in ("filename", "caption", "negative_caption")]
            if not all(isinstance(t, str) and t for t in texts):
                bad["bad_record"] = bad.get("bad_record", 0) + 1
                continue
            rows.append({"example_id": f"{subset}:{key}", "group": subset, "image_path": texts[0],
                         "options": texts[1:]})
    return rows, missing, bad


def run_sugarcrepe(ctx: Context, args, sink: list) -> dict:
    rows, missing, bad = sugarcrepe_rows(root_flag(args, "sugarcrepe_root"), args.limit, ctx.seed)
    scored, reasons = rank(ctx, root_flag(args, "coco_val_images"), rows, "sugarcrepe", sink)
    reasons = {**bad, **reasons}
    groups = _groups(scored)
    subsets = {s: summary(groups.get(s, []), ctx) for s in SUGARCREPE_SUBSETS if s not in missing}
    accuracies = [g["accuracy"] for g in subsets.values() if g["accuracy"] is not None]
    return {"rows": len(rows), "scored": len(scored), "skip_reasons": reasons, "missing_subsets": missing,
            "subsets": subsets, "mean": float(np.mean(accuracies)) if accuracies else None}


def pre_caption(caption: str, max_words: int = ARO_MAX_WORDS) -> str:
    """ARO's caption normalisation for the order sets: lower case, .!"()*#:;~ to spaces, spaces squeezed,
    the first max_words words."""
    text = re.sub(r"\s{2,}", " ", re.sub(r"[.!\"()*#:;~]", " ", caption.lower())).strip(" ")
    return " ".join(text.split(" ")[:max_words])


def order_rows(path: Path, part: str, seed: int, limit: int | None = None) -> tuple[list[dict], dict]:
    """ARO's order rows from BLIP's Karpathy test file ([{image, caption: [...]}]): each caption with its four
    shuffles; a caption one shuffle cannot change is left out (counted), as an unchanged option would tie."""
    from pipeline.perturb.candidates import record_rng
    from pipeline.perturb.generators import TAGGER, spacy_pipeline
    from pipeline.perturb.neg_order import ARO_ORDER, order_perturbation

    annotations = read_json(path)
    if not isinstance(annotations, list):
        raise ValueError(f"{path}: expected a list of {{image, caption: [...]}} (BLIP's Karpathy test file)")
    repeated = sum(isinstance(a, Repeated) for a in annotations)
    items = limited([(a["image"], k, c) for a in annotations if not isinstance(a, Repeated)
                     for k, c in enumerate(a["caption"])], limit, seed)
    nlp = spacy_pipeline({TAGGER})
    rows, dropped = [], {"repeated_field": repeated} if repeated else {}
    for (image, k, caption), doc in zip(items, nlp.pipe([c for _, _, c in items], batch_size=256), strict=True):
        example_id = f"{part}:{image}:{k}"
        options = [pre_caption(caption)]
        for name in ARO_ORDER:
            found = order_perturbation(name, doc, record_rng(seed, example_id, name))
            if found is None:
                dropped[f"no_{name}"] = dropped.get(f"no_{name}", 0) + 1
                break
            options.append(pre_caption(found.text))
        else:
            rows.append({"example_id": example_id, "group": part, "image_path": image, "options": options})
    return rows, dropped


def aro_macro(part: str, scored: list[dict]) -> float | None:
    """ARO's reported figure: the mean of per-relation (VG-R, symmetric relations left out) or per-attribute-pair
    (VG-A, pairs of >= 25 rows) accuracies; None where no group qualifies."""
    groups = _groups(scored, "detail")
    if part == "VG-Relation":
        symmetric = set(json.loads((DATA / "aro_symmetric_relations.json").read_text())["relations"])
        accuracies = [np.mean(v) for k, v in groups.items() if k not in symmetric]
    else:
        accuracies = [np.mean(v) for v in groups.values() if len(v) >= ARO_MACRO_MIN_ROWS]
    return float(np.mean(accuracies)) if accuracies else None


def run_aro(ctx: Context, args, sink: list) -> dict:
    parts, notes = {}, []
    for part in ARO_PARTS:
        try:
            path = _aro_file(args, part)
        except SuiteSkipped as e:
            notes.append(f"{part}: skipped: {e}")
            continue
        if part.startswith("VG-"):
            data = read_json(path)
            drawn = limited_indices(len(data), args.limit, ctx.seed)
            kept = [i for i in drawn if not isinstance(data[i], Repeated)]
            rows = [{"example_id": f"{part}:{i}", "group": part, "image_path": data[i]["image_path"],
                     **{k: data[i][k] for k in ("bbox_x", "bbox_y", "bbox_w", "bbox_h")},
                     "detail": data[i]["relation_name"] if part == "VG-Relation" else
                     "_".join(data[i]["attributes"][:2]),
                     "options": [data[i]["true_caption"], data[i]["false_caption"]]}
                    for i in kept]
            images = path.parent / "images"
            dropped = {"repeated_field": len(drawn) - len(kept)} if len(kept) < len(drawn) else {}
        else:
            rows, dropped = order_rows(path, part, ctx.seed, args.limit)
            images = path.parent
        scored, reasons = rank(ctx, images, rows, f"aro {part}", sink)
        figures = summary([r["correct"] for r in scored], ctx)
        figures.update({"rows": len(rows), "skip_reasons": {**dropped, **reasons},
                        "macro_accuracy": aro_macro(part, scored) if part.startswith("VG-") else None})
        parts[part] = figures
    for note in notes:
        print(f"aro: {note}", file=sys.stderr)
    return {"parts": parts, "notes": notes}


def vl_checklist_rows(root: Path, limit: int | None = None, seed: int = 0) -> tuple[list[dict], dict]:
    rows, bad = [], {}
    for path in _vl_checklist_files(root):
        relpath = path.relative_to(root).with_suffix("").as_posix()
        records = read_json(path)
        if not isinstance(records, list):
            raise ValueError(f"{path}: expected VL-CheckList's list of [image_path, {{POS, NEG}}]")
        for i in limited_indices(len(records), limit, seed):
            record = records[i]
            if isinstance(record, list) and len(record) == 2 and isinstance(record[1], Repeated):
                bad["repeated_field"] = bad.get("repeated_field", 0) + 1
                continue
            try:
                image_path, captions = record
                if not isinstance(captions["POS"], list) or not isinstance(captions["NEG"], list):
                    raise TypeError  # a string would be read character by character
                options = [captions["POS"][0], *captions["NEG"]]
                if not image_path or len(options) < 2 or not all(isinstance(o, str) for o in options):
                    raise ValueError
            except (TypeError, ValueError, KeyError, IndexError):
                bad["bad_record"] = bad.get("bad_record", 0) + 1
                continue
            rows.append({"example_id": f"{relpath}:{i}", "group": relpath.split("/")[0], "detail": relpath,
                         "image_path": image_path, "options": options})
    return rows, bad


def run_vl_checklist(ctx: Context, args, sink: list) -> dict:
    root = root_flag(args, "vl_checklist_root")
    rows, bad = vl_checklist_rows(root, args.limit, ctx.seed)
    images = root_flag(args, "vl_checklist_images") if args.vl_checklist_images else root
    scored, reasons = rank(ctx, images, rows, "vl_checklist", sink)
    groups, files = _groups(scored), _groups(scored, "detail")
    present = {r["group"] for r in rows}
    categories = {c: summary(groups.get(c, []), ctx) for c in VL_CHECKLIST_CATEGORIES if c in present}
    accuracies = [g["accuracy"] for g in categories.values() if g["accuracy"] is not None]
    return {"rows": len(rows), "scored": len(scored), "skip_reasons": {**bad, **reasons},
            "categories": categories, "files": {f: summary(v, ctx) for f, v in sorted(files.items())},
            "mean": float(np.mean(accuracies)) if accuracies else None}
