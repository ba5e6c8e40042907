"""The multi-suite run's Markdown report and plot, in the paper's layouts (from results.json's content):

- Table 1: per model, Original / Augmented (its drop from Original in brackets) / Brittleness for
  REPLACE-Relation, REPLACE-Attribute and SWAP, then the same figures with their bootstrap 95% intervals, then
  REPLACE three ways (released, held_out, strict: pipeline/train/replace_views.py);
- Table 2: mean s(c), s(c_n), s(c_p) per subset;
- Table 10 (Appendix E): ImageNet Acc@1/@5, VTAB mean Acc@1, COCO and Flickr30k image and text Recall@1, with
  the VTAB tasks one by one;
- compositionality: SugarCrepe's seven subsets, ARO's four sets, VL-CheckList's Object / Attribute / Relation,
  then every ranking figure with its interval.
A suite that did not run for a model is a "–" cell, and its reason is listed under the tables.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.train import replace_views as views

HARDPOS_SUBSETS = (("replace", "REPLACE-Relation"), ("replace", "REPLACE-Attribute"), ("swap", "SWAP"))
DASH = "–"
DEFINITIONS = {
    "ranking_accuracy": "fraction of rows whose correct caption scores strictly above every other option "
                        "(SugarCrepe, ARO, VL-CheckList); a tie is never correct",
    "aro_macro_accuracy": "ARO's reported figure: mean per-relation accuracy (VG-Relation, symmetric relations "
                          "left out) or per-attribute-pair accuracy over pairs with >= 25 rows (VG-Attribution)",
    "acc1_acc5": "clip-benchmark zero-shot classification: top-1 / top-5 accuracy (acc5 needs >= 5 classes)",
    "recall_at_k": "clip-benchmark retrieval: image_retrieval_recall@K, per caption, its image in the top K; "
                   "text_retrieval_recall@K, per image, one of its captions in the top K",
}


def model_label(m: dict) -> str:
    pretrained = m["pretrained"]
    name = Path(pretrained).name if pretrained and Path(pretrained).suffix else (pretrained or "random init")
    return f"{m['model']} / {name}"


def _pct(x) -> str:
    return DASH if x is None else f"{100 * x:.1f}"


def _ci(value, ci) -> str:
    return _pct(value) if ci is None or value is None else f"{_pct(value)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _ok(m: dict, suite: str) -> dict | None:
    s = m["suites"].get(suite)
    return s if s and s["status"] == "ok" else None


def _subset(m: dict, suite: str, subset: str) -> dict | None:
    s = _ok(m, suite)
    return s["subsets"].get(subset) if s else None


# ------------------------------------------------------------------------------------------------- tables

def table1(result: dict) -> list[str]:
    head = ["model"] + [f"{label} {f}" for _, label in HARDPOS_SUBSETS for f in ("Orig.", "Aug. (drop)", "Brittle.")]
    rows = []
    for m in result["models"]:
        cells = [model_label(m)]
        for suite, label in HARDPOS_SUBSETS:
            g = _subset(m, suite, label)
            if g is None or not g["n"]:
                cells += [DASH] * 3
                continue
            drop = 100 * (g["augmented_accuracy"] - g["original_accuracy"])
            cells += [_pct(g["original_accuracy"]), f"{_pct(g['augmented_accuracy'])} ({drop:+.1f})",
                      _pct(g["brittleness"])]
        rows.append(cells)
    return _table(head, rows)


def table1_intervals(result: dict) -> list[str]:
    rows = []
    for m in result["models"]:
        for suite, label in HARDPOS_SUBSETS:
            g = _subset(m, suite, label)
            if g is None:
                rows.append([model_label(m), label] + [DASH] * 4)
            else:
                rows.append([model_label(m), label, str(g["n"]), _ci(g["original_accuracy"], g["original_ci95"]),
                             _ci(g["augmented_accuracy"], g["augmented_ci95"]),
                             _ci(g["brittleness"], g["brittleness_ci95"])])
    return _table(["model", "subset", "n", "Original", "Augmented", "Brittleness"], rows)


def replace_three_ways(labelled: list[tuple[str, dict]]) -> list[str]:
    """REPLACE three ways for (model label, its replace_views): per view and group (REPLACE, then its subsets) the
    rows kept and the three Table 1 figures with their intervals; then per model what held_out and strict were
    filtered against, or why held_out was not computed."""
    rows, lines = [], []
    for label, by_view in labelled:
        for name, v in by_view.items():
            if v["status"] != "ok":
                rows.append([label, name, "REPLACE", f"not computed (of {v['of']:,})"] + [DASH] * 3)
                continue
            for group, g in [("REPLACE", v["set"]), *v["subsets"].items()]:
                kept = f"{v['rows']:,} of {v['of']:,}" if group == "REPLACE" else f"{g['n']:,}"
                rows.append([label, f"{name} (stale)" if v.get("stale") else name, group, kept,
                             _ci(g["original_accuracy"], g["original_ci95"]),
                             _ci(g["augmented_accuracy"], g["augmented_ci95"]),
                             _ci(g["brittleness"], g["brittleness_ci95"])])
        lines += [f"- {label}: {note}" for note in views.notes(by_view)]
    return _table(["model", "view", "group", "rows", "Original", "Augmented", "Brittleness"], rows) + ["", *lines]


def table2(result: dict) -> list[str]:
    rows = []
    for m in result["models"]:
        for suite, label in HARDPOS_SUBSETS:
            g = _subset(m, suite, label)
            rows.append([model_label(m), label] + ([DASH] * 3 if g is None or not g["n"] else
                                                   [f"{g[k]:.4f}" for k in ("mean_s_c", "mean_s_n", "mean_s_p")]))
    return _table(["model", "subset", "s(c)", "s(c_n)", "s(c_p)"], rows)


def table10(result: dict) -> list[str]:
    head = ["model", "ImageNet Acc@1", "ImageNet Acc@5", "VTAB Acc@1 (tasks)", "COCO image R@1", "COCO text R@1",
            "Flickr30k image R@1", "Flickr30k text R@1"]
    rows = []
    for m in result["models"]:
        imagenet, vtab = _ok(m, "imagenet"), _ok(m, "vtab")
        cells = [model_label(m), _pct(imagenet and imagenet["acc1"]), _pct(imagenet and imagenet["acc5"]),
                 _vtab_cell(vtab)]
        for suite in ("coco_retrieval", "flickr_retrieval"):
            r = _ok(m, suite)
            cells += [_pct(r and r["image_retrieval_recall@1"]), _pct(r and r["text_retrieval_recall@1"])]
        rows.append(cells)
    return _table(head, rows)


def _vtab_cell(vtab: dict | None) -> str:
    if vtab is None:
        return DASH
    return f"{_pct(vtab['mean_acc1'])} ({vtab['tasks_present']}/{vtab['tasks_present'] + len(vtab['tasks_missing'])})"


def vtab_tasks(result: dict) -> list[str]:
    tasks = sorted({t for m in result["models"] if _ok(m, "vtab") for t in m["suites"]["vtab"]["tasks"]})
    if not tasks:
        return []
    rows = [[model_label(m)] + [_pct(_ok(m, "vtab")["tasks"][t]["acc1"]) if _ok(m, "vtab") and
                                t in m["suites"]["vtab"]["tasks"] else DASH for t in tasks]
            for m in result["models"]]
    return _table(["model"] + [t.removeprefix("vtab/") for t in tasks], rows)


def _compositional_columns():
    from pipeline.train.suites.ranking import ARO_PARTS, SUGARCREPE_SUBSETS, VL_CHECKLIST_CATEGORIES

    columns = [(f"SC {s}", "sugarcrepe", s) for s in SUGARCREPE_SUBSETS] + [("SC mean", "sugarcrepe", None)]
    columns += [(f"ARO {p}", "aro", p) for p in ARO_PARTS]
    columns += [(f"VL-CL {c}", "vl_checklist", c) for c in VL_CHECKLIST_CATEGORIES]
    return columns + [("VL-CL mean", "vl_checklist", None)]


def _compositional_cell(m: dict, suite: str, key: str | None) -> tuple[str, dict | None]:
    """(the table's cell, the group's figures for the interval table)."""
    s = _ok(m, suite)
    if s is None:
        return DASH, None
    if key is None:
        return _pct(s["mean"]), None
    if suite == "aro":
        g = s["parts"].get(key)
        if g is None:
            return DASH, None
        if key.startswith("VG-") and g["macro_accuracy"] is not None:
            return _pct(g["macro_accuracy"]), g
        return _pct(g["accuracy"]) + ("†" if key.startswith("VG-") else ""), g
    g = s["subsets" if suite == "sugarcrepe" else "categories"].get(key)
    return (DASH, None) if g is None else (_pct(g["accuracy"]), g)


def compositionality(result: dict) -> tuple[list[str], list[str]]:
    columns = _compositional_columns()
    rows, detail = [], []
    for m in result["models"]:
        cells = [model_label(m)]
        for title, suite, key in columns:
            cell, g = _compositional_cell(m, suite, key)
            cells.append(cell)
            if g is not None:
                detail.append([model_label(m), title, str(g["n"]), _ci(g["accuracy"], g["ci95"])])
        rows.append(cells)
    return (_table(["model"] + [c[0] for c in columns], rows),
            _table(["model", "set", "n", "accuracy [95% interval]"], detail) if detail else [])


def not_run(result: dict) -> list[str]:
    lines = [f"- {name}: skipped: {why}" for name, why in result["skipped"].items()]
    for m in result["models"]:
        for name, s in m["suites"].items():
            if s["status"] == "failed" or (s["status"] == "skipped" and name not in result["skipped"]):
                lines.append(f"- {name} ({model_label(m)}): {s['status']}: {s['reason']}")
            for note in s.get("notes", []):
                lines.append(f"- {name} ({model_label(m)}): {note}")
    return lines


def intervals(settings: dict) -> str:
    """How the figures' intervals were drawn, for the tables' titles."""
    return (f"bootstrap 95% intervals ({settings['bootstrap']} resamples, seed {settings['seed']})"
            if settings["bootstrap"] else "no intervals (--bootstrap=0)")


def replace_three_ways_section(result: dict) -> list[str]:
    """The REPLACE three ways table of every model whose replace suite ran (none: no lines)."""
    labelled = [(model_label(m), s["views"]) for m in result["models"] if (s := _ok(m, "replace")) and s.get("views")]
    if not labelled:
        return []
    return [f"### REPLACE three ways, with {intervals(result['settings'])}", "", *replace_three_ways(labelled), ""]


def format_report(result: dict) -> str:
    s = result["settings"]
    ci = intervals(s)
    lines = ["# Evaluation report", "",
             f"{len(result['models'])} model(s): " + ", ".join(f"`{model_label(m)}`" for m in result["models"])
             + f"; suites: {', '.join(result['suites'])}; device {s['device']}, precision {s['precision']}.", ""]
    missing = not_run(result)
    if missing:
        lines += ["Not run:", "", *missing, ""]
    lines += ["## Table 1: REPLACE and SWAP (%)", "", *table1(result), "",
              "Original: s(c) > s(c_n). Augmented: s(c) > s(c_n) and s(c_p) > s(c_n), its change from Original in "
              "brackets. Brittleness: s(c) > s(c_n) > s(c_p) or s(c_p) > s(c_n) > s(c).", "",
              f"With {ci}:", "", *table1_intervals(result), "", *replace_three_ways_section(result),
              "## Table 2: mean scores", "", *table2(result), "",
              "## Table 10: standard evaluations (%)", "", *table10(result), ""]
    tasks = vtab_tasks(result)
    if tasks:
        lines += ["VTAB tasks, Acc@1:", "", *tasks, ""]
    table, detail = compositionality(result)
    lines += ["## Compositionality benchmarks, accuracy (%)", "", *table, "",
              "SC: SugarCrepe; ARO VG-Relation / VG-Attribution: ARO's macro accuracy († where no relation or "
              "attribute pair qualifies: the plain accuracy); COCO-Order / Flickr30k-Order: fraction of captions "
              "ranked above their four shuffles; VL-CL: VL-CheckList.", ""]
    if detail:
        lines += [f"Per set, accuracy with {ci}:", "", *detail, ""]
    lines += [f"Note: {n}" for n in result["notes"]]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------------------------------- plot

def plot(result: dict, path: Path) -> str | None:
    """Augmented accuracy against Brittleness, a point per model and REPLACE/SWAP subset (PNG); None when
    written, else why not."""
    points = [(k, m, label, g) for k, m in enumerate(result["models"]) for suite, label in HARDPOS_SUBSETS
              if (g := _subset(m, suite, label)) is not None and g["n"]]
    if not points:
        return "plot not written: no REPLACE or SWAP figures"
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        return f"plot not written: matplotlib is not installed ({e})"
    figure = Figure(figsize=(6.5, 4.5))
    FigureCanvasAgg(figure)  # attaches itself; no pyplot, so no global backend state
    ax = figure.add_subplot()
    markers = {label: marker for (_, label), marker in zip(HARDPOS_SUBSETS, "os^", strict=True)}
    for k, m, label, g in points:
        x, y = 100 * g["brittleness"], 100 * g["augmented_accuracy"]
        xci, yci = g["brittleness_ci95"], g["augmented_ci95"]
        ax.errorbar([x], [y], xerr=None if xci is None else [[x - 100 * xci[0]], [100 * xci[1] - x]],
                    yerr=None if yci is None else [[y - 100 * yci[0]], [100 * yci[1] - y]],
                    fmt=markers[label], color=f"C{k % 10}", capsize=3, label=f"{model_label(m)}: {label}")
    ax.set_xlabel("Brittleness (%)")
    ax.set_ylabel("Augmented accuracy (%)")
    ax.set_title("Augmented accuracy vs Brittleness")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    figure.tight_layout()
    import io

    from pipeline.folder_lock import write_own

    png = io.BytesIO()
    figure.savefig(png, dpi=120, format="png")
    write_own(path, png.getvalue())  # beside, then renamed: never through a link at its name
    return None
