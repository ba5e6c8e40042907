"""The multi-suite evaluator (`evaluate --suites=... --models=...`) end to end on tiny data in each suite's own
published layout (tests/eval_suite_data.py) with the tiny open_clip model: every suite runs, its figures agree
with a hand computation from the model's embeddings (ranking, zero-shot classification, retrieval), the report's
tables are complete, a missing root skips one suite with one line, and the clip-benchmark behaviour relied on is
pinned."""
import io
import json
import math
import random

import numpy as np
import pytest
from PIL import Image

from pipeline.train import evaluate
from tests import eval_suite_data as data
from tests.conftest import rows_of

@pytest.fixture(scope="module")
def roots(tmp_path_factory, sample_output):
    root = tmp_path_factory.mktemp("suites")
    sugarcrepe, coco_val = data.sugarcrepe(root)
    aro, aro_coco, aro_flickr = data.aro(root)
    imagenet, vtab, retrieval = data.standard(root)
    images = root / "hardpos_images"
    for row in rows_of(sample_output, "replace") + rows_of(sample_output, "swap"):
        w, h = 64, 48
        if row.get("bbox_x") is not None:  # the box inside the image
            w, h = math.ceil(row["bbox_x"] + row["bbox_w"]) + 8, math.ceil(row["bbox_y"] + row["bbox_h"]) + 8
        rng = random.Random(row["image_path"])
        (images / row["image_path"]).parent.mkdir(parents=True, exist_ok=True)
        Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3)).save(images / row["image_path"], "JPEG")
    return {"data": sample_output, "images": images, "sugarcrepe_root": sugarcrepe, "coco_val_images": coco_val,
            "aro_root": aro, "aro_coco_root": aro_coco, "aro_flickr_root": aro_flickr,
            "vl_checklist_root": data.vl_checklist(root), "imagenet_root": imagenet, "vtab_root": vtab,
            "retrieval_root": retrieval}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Our trainer's checkpoint layout ({"model": state_dict, ...}) of a tiny model with its own seed."""
    import torch

    from pipeline.train.clip import create

    torch.manual_seed(7)
    clip = create("hardpos-tiny", "")[0]
    path = tmp_path_factory.mktemp("ckpt") / "final.pt"
    torch.save({"model": clip.state_dict(), "epoch": 1}, path)
    return path


@pytest.fixture(scope="module")
def model(checkpoint):
    """The checkpoint's model, loaded independently of the evaluator, for the hand computations."""
    from pipeline.train.clip import create

    clip, _, transform, tokenizer = create("hardpos-tiny", str(checkpoint))
    return clip.eval(), transform, tokenizer


def flags(roots: dict, **override) -> list[str]:
    return [f"--{k}={v}" for k, v in {**roots, **override}.items() if v is not None]


@pytest.fixture(scope="module")
def run(roots, checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    code = evaluate.main(["--suites=all", "--models=hardpos-tiny:", f"--models=hardpos-tiny:{checkpoint}",
                          f"--out={out}", "--workers=0", "--batch_size=16", "--bootstrap=200",
                          "--seed=3", *flags(roots)])
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    return out, result, {m["pretrained"]: m["suites"] for m in result["models"]}


def embed_images(model, images: list) -> np.ndarray:
    import torch

    clip, transform, _ = model
    with torch.no_grad():
        e = clip.encode_image(torch.stack([transform(im.convert("RGB")) for im in images])).numpy()
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def embed_texts(model, texts: list[str]) -> np.ndarray:
    import torch

    clip, _, tokenizer = model
    with torch.no_grad():
        e = clip.encode_text(tokenizer(texts)).numpy()
    return e / np.linalg.norm(e, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------- the whole run

def test_every_suite_runs_for_every_model_and_the_report_tables_are_complete(run):
    out, result, _ = run
    assert result["skipped"] == {}
    assert [m["slug"] for m in result["models"]] == ["hardpos-tiny_random", "hardpos-tiny_final"]
    for m in result["models"]:
        assert {name: s["status"] for name, s in m["suites"].items()} == {name: "ok" for name in result["suites"]}
    random_init, ckpt = (m["suites"] for m in result["models"])
    assert random_init["sugarcrepe"]["subsets"] != ckpt["sugarcrepe"]["subsets"] or \
        random_init["imagenet"] != ckpt["imagenet"]  # two different models were scored
    report = (out / "report.md").read_text()
    sections = {"## Table 1": 1 + 9, "## Table 10": 1 + 7, "## Compositionality": 1 + 16}
    for title, columns in sections.items():
        table = report.split(title, 1)[1].split("\n\n", 2)[1].splitlines()
        assert len(table) == 2 + len(result["models"]), title
        for line in table[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert len(cells) == columns and "–" not in cells, (title, line)
    assert "| hardpos-tiny / final.pt |" in report and "| hardpos-tiny / random init |" in report
    assert "## Table 2: mean scores" in report and "VTAB tasks, Acc@1" in report
    assert (out / "augmented_vs_brittleness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "hardpos-tiny_final" / "replace_swap" / "eval.json").is_file()


def test_replace_and_swap_are_the_single_model_evaluators_figures(run, checkpoint):
    out, _, suites = run
    own = json.loads((out / "hardpos-tiny_final" / "replace_swap" / "eval.json").read_text())
    assert own["pretrained"] == str(checkpoint) and own["scored"] == own["rows"] > 0
    assert suites[str(checkpoint)]["replace"]["set"] == own["sets"]["REPLACE"]
    assert suites[str(checkpoint)]["swap"]["subsets"] == {"SWAP": own["subsets"]["SWAP"]}
    g = own["subsets"]["SWAP"]
    drop = 100 * (g["augmented_accuracy"] - g["original_accuracy"])
    cells = f"| {100 * g['original_accuracy']:.1f} | {100 * g['augmented_accuracy']:.1f} ({drop:+.1f}) | " \
            f"{100 * g['brittleness']:.1f} |"
    row = next(line for line in (out / "report.md").read_text().splitlines()
               if line.startswith("| hardpos-tiny / final.pt |"))
    assert row.endswith(cells)
    # REPLACE three ways: the evaluator's views in results.json, and a table of both models in the report.
    views = suites[str(checkpoint)]["replace"]["views"]
    assert views == own["replace_views"] and views["released"]["set"] == own["sets"]["REPLACE"]
    assert views["held_out"]["status"] == "not_computed" and "records no train table" in views["held_out"]["reason"]
    section = (out / "report.md").read_text().split("### REPLACE three ways", 1)[1].split("\n\n", 3)
    assert len(section[1].splitlines()) == 2 + 2 * (3 + 1 + 3)  # per model: 3 released, held_out, 3 strict rows
    assert section[2].count("held_out: not computed") == 2 and section[2].count("strict: the 5 of 38") == 2


# ------------------------------------------------------------------------------------ hand computations

def test_sugarcrepe_accuracy_is_the_fraction_with_s_pos_above_s_neg(run, roots, model, checkpoint):
    figures = run[2][str(checkpoint)]["sugarcrepe"]
    for subset in data.SUGARCREPE_SUBSETS:
        rows = json.loads((roots["sugarcrepe_root"] / f"{subset}.json").read_text()).values()
        images = embed_images(model, [Image.open(roots["coco_val_images"] / r["filename"]) for r in rows])
        pos = embed_texts(model, [r["caption"] for r in rows])
        neg = embed_texts(model, [r["negative_caption"] for r in rows])
        hits = (images * pos).sum(1) > (images * neg).sum(1)
        got = figures["subsets"][subset]
        assert (got["n"], got["correct"]) == (len(rows), int(hits.sum())), subset
        assert got["accuracy"] == pytest.approx(hits.mean())
        assert got["ci95"][0] <= got["accuracy"] <= got["ci95"][1]
    assert figures["mean"] == pytest.approx(np.mean([figures["subsets"][s]["accuracy"]
                                                     for s in data.SUGARCREPE_SUBSETS]))
    # Every scored row is kept, its figure recomputable from it.
    lines = [json.loads(line) for line in (run[0] / figures["scores"]).read_text().splitlines()]
    assert len(lines) == 7 * 3 and all(r["correct"] == (r["scores"][0] > r["scores"][1]) for r in lines)
    assert np.mean([r["correct"] for r in lines if r["group"] == "swap_att"]) == \
        pytest.approx(figures["subsets"]["swap_att"]["accuracy"])


def test_clip_benchmark_reads_sugarcrepe_and_scores_it_as_we_do(run, roots, model, checkpoint):
    """Pins clip-benchmark's SugarCrepe reader (same rows, same order) and its image-caption selection
    (text_acc = argmax over [caption, negative] is the caption) against our figures: equal without ties."""
    import torch
    from clip_benchmark.datasets.builder import image_captions_collate_fn
    from clip_benchmark.datasets.sugar_crepe import SugarCrepe
    from clip_benchmark.metrics import image_caption_selection

    clip, transform, tokenizer = model
    figures = run[2][str(checkpoint)]["sugarcrepe"]["subsets"]
    for subset in ("replace_att", "swap_obj"):
        ds = SugarCrepe(str(roots["coco_val_images"]), str(roots["sugarcrepe_root"] / f"{subset}.json"),
                        transform=lambda im: transform(im.convert("RGB")))
        loader = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=image_captions_collate_fn)
        got = image_caption_selection.evaluate(clip, loader, tokenizer, "cpu", amp=False)
        assert set(got) == {"image_acc", "text_acc", "acc"}
        assert got["text_acc"] == pytest.approx(figures[subset]["accuracy"])


def test_zero_shot_classification_acc1_acc5_from_hand_computed_logits(run, roots, model, checkpoint):
    figures = run[2][str(checkpoint)]["imagenet"]
    classes, labels = data.IMAGENET_CLASSES, np.array(data.IMAGENET_LABELS)
    # clip-benchmark's classifier: per class the mean of the normalised template embeddings, renormalised.
    weights = np.stack([embed_texts(model, [t.format(c=c) for t in data.TEMPLATES]).mean(0) for c in classes])
    weights /= np.linalg.norm(weights, axis=1, keepdims=True)
    images = embed_images(model, [Image.open(io.BytesIO(data._jpeg_bytes(classes[y]))) for y in labels])
    logits = images @ weights.T
    ranked = np.argsort(-logits, axis=1)
    acc1 = np.mean(ranked[:, 0] == labels)
    acc5 = np.mean([y in ranked[k, :5] for k, y in enumerate(labels)])
    recall = np.mean([np.mean(ranked[labels == c, 0] == c) for c in np.unique(labels)])
    assert (figures["n"], figures["classes"]) == (len(labels), len(classes))
    assert figures["acc1"] == pytest.approx(acc1) and figures["acc5"] == pytest.approx(acc5)
    assert figures["mean_per_class_recall"] == pytest.approx(recall)
    vtab = run[2][str(checkpoint)]["vtab"]
    assert sorted(vtab["tasks"]) == ["vtab/cifar10", "vtab/dtd"] and len(vtab["tasks_missing"]) == 18
    assert vtab["tasks"]["vtab/cifar10"]["acc5"] is None  # 3 classes: no Acc@5
    assert vtab["mean_acc1"] == pytest.approx(np.mean([t["acc1"] for t in vtab["tasks"].values()]))


def test_retrieval_recall_at_1_from_hand_computed_similarities(run, model, checkpoint):
    got = run[2][str(checkpoint)]["coco_retrieval"]
    items = data.RETRIEVAL_ITEMS
    images = embed_images(model, [Image.open(io.BytesIO(data._jpeg_bytes(colour))) for colour, _ in items])
    captions = [c for _, cs in items for c in cs]
    owner = np.array([k for k, (_, cs) in enumerate(items) for _ in cs])
    scores = embed_texts(model, captions) @ images.T  # captions x images
    image_r1 = np.mean(scores.argmax(1) == owner)  # per caption: is its image the top one
    text_r1 = np.mean([owner[scores[:, k].argmax()] == k for k in range(len(items))])  # per image
    assert (got["images"], got["captions"]) == (4, 8)
    # 4 images: Recall@5 and @10 are left out (K must not exceed the images)
    assert set(got) - {"status", "kind", "seconds"} == {"image_retrieval_recall@1", "text_retrieval_recall@1",
                                                         "images", "captions"}
    assert got["image_retrieval_recall@1"] == pytest.approx(image_r1)
    assert got["text_retrieval_recall@1"] == pytest.approx(text_r1)


def test_clip_benchmark_metric_keys_and_definitions_on_a_tiny_case():
    """What the suites take from clip-benchmark: recall_at_k's per-row recall (> 0 = a hit in the top K) and
    zeroshot_retrieval's key names; its classification accuracy() agrees with ours where NumPy lets it run."""
    import torch

    from pipeline.train.suites.zeroshot import import_clip_benchmark, mean_per_class_recall, topk_accuracy

    _, zeroshot_classification, zeroshot_retrieval = import_clip_benchmark()
    scores = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.3, 0.5], [0.1, 0.8, 0.4]])  # 3 texts x 3 images
    positives = torch.eye(3, dtype=torch.bool)
    recall = zeroshot_retrieval.recall_at_k(scores, positives, k=1)
    assert recall.tolist() == [1.0, 0.0, 0.0]  # text 2's image (0.4) is second to image 1 (0.8)
    assert zeroshot_retrieval.recall_at_k(scores, positives, k=2).tolist() == [1.0, 1.0, 1.0]
    logits = torch.tensor([[3.0, 2, 1, 0, -1, -2], [0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]])
    target = torch.tensor([0, 0, 4])  # row 1: 0 is its smallest logit; row 2: 4 is its 5th
    assert topk_accuracy(logits, target, 1) == pytest.approx(1 / 3)
    assert topk_accuracy(logits, target, 5) == pytest.approx(2 / 3)
    assert mean_per_class_recall(logits, target) == pytest.approx((1 / 2 + 0) / 2)
    try:
        theirs = zeroshot_classification.accuracy(logits, target, topk=(1, 5))
    except TypeError:  # float() of a 1-element array: refused from NumPy 2.4 on (why ours is used)
        assert tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 4)
    else:
        assert theirs == pytest.approx([1 / 3, 2 / 3])


def test_aro_sets_and_vl_checklist(run, roots, model, checkpoint):
    from pipeline.train.suites.ranking import aro_macro, order_rows, pre_caption

    suites = run[2][str(checkpoint)]
    parts = suites["aro"]["parts"]
    assert {k: v["n"] for k, v in parts.items()} == {"VG-Relation": 4, "VG-Attribution": 4, "COCO-Order": 4,
                                                     "Flickr30k-Order": 2}
    # VG-Relation by hand: the image cropped to its box, true caption against false caption.
    rows = json.loads((roots["aro_root"] / "visual_genome_relation.json").read_text())
    crops = [Image.open(roots["aro_root"] / "images" / r["image_path"]).crop(
        (r["bbox_x"], r["bbox_y"], r["bbox_x"] + r["bbox_w"], r["bbox_y"] + r["bbox_h"])) for r in rows]
    images = embed_images(model, crops)
    hits = (images * embed_texts(model, [r["true_caption"] for r in rows])).sum(1) > \
        (images * embed_texts(model, [r["false_caption"] for r in rows])).sum(1)
    assert parts["VG-Relation"]["accuracy"] == pytest.approx(hits.mean())
    by_relation = {}
    for r, hit in zip(rows, hits, strict=True):
        by_relation.setdefault(r["relation_name"], []).append(hit)
    # ARO's macro accuracy leaves its symmetric relations ("near") out.
    assert parts["VG-Relation"]["macro_accuracy"] == pytest.approx(
        np.mean([np.mean(v) for k, v in by_relation.items() if k != "near"]))
    assert parts["VG-Attribution"]["macro_accuracy"] is None  # no pair has ARO's 25 rows
    assert aro_macro("VG-Attribution", [{"detail": "red_blue", "correct": k < 20} for k in range(25)]) == 0.8
    # The order sets: the caption as ARO normalises it, then its four shuffles of the same words.
    assert pre_caption("A Dog, on the mat.  Yes!") == "a dog, on the mat yes"
    order, dropped = order_rows(roots["aro_coco_root"] / "coco_karpathy_test.json", "COCO-Order", 3)
    assert len(order) + sum(dropped.values()) == 4 and dropped == {}
    for row in order:
        first, *shuffles = row["options"]
        assert first == first.lower() and "." not in first and len(shuffles) == 4
        assert all(s != first and sorted(s.split()) == sorted(first.split()) for s in shuffles)
    assert order == order_rows(roots["aro_coco_root"] / "coco_karpathy_test.json", "COCO-Order", 3)[0]
    vl = suites["vl_checklist"]
    assert {c: g["n"] for c, g in vl["categories"].items()} == {"Object": 1, "Attribute": 2, "Relation": 2}
    assert vl["mean"] == pytest.approx(np.mean([g["accuracy"] for g in vl["categories"].values()]))
    assert set(vl["files"]) == {"Attribute/vg/color", "Object/vg/location", "Relation/vg/action"}


# ------------------------------------------------------------------------------------ skips and errors

def test_a_missing_root_skips_its_suite_with_one_line_and_the_others_run(roots, tmp_path, capsys):
    out = tmp_path / "out"
    code = evaluate.main(["--suites=sugarcrepe,aro,imagenet,replace,vl_checklist", "--models=hardpos-tiny:",
                          f"--out={out}", "--workers=0", "--bootstrap=0", f"--imagenet_root={roots['imagenet_root']}",
                          f"--vl_checklist_root={roots['vl_checklist_root']}", "--limit=1",
                          "--sugarcrepe_root=/no/such/folder", f"--coco_val_images={roots['coco_val_images']}"])
    assert code == 0
    err = capsys.readouterr().err.splitlines()
    assert "sugarcrepe: skipped: --sugarcrepe_root=/no/such/folder does not exist" in err
    assert "aro: skipped: --aro_root, --aro_coco_root, --aro_flickr_root not given" in err
    assert "replace: skipped: --data not given" in err
    result = json.loads((out / "results.json").read_text())
    assert set(result["skipped"]) == {"sugarcrepe", "aro", "replace"}
    suites = result["models"][0]["suites"]
    assert suites["imagenet"]["status"] == "ok" and suites["sugarcrepe"]["status"] == "skipped"
    assert suites["imagenet"]["n"] == len(data.IMAGENET_LABELS)  # --limit is not for clip-benchmark's suites
    assert [g["n"] for g in suites["vl_checklist"]["files"].values()] == [1, 1, 1]  # the first row of each file
    report = (out / "report.md").read_text()
    assert "- sugarcrepe: skipped: --sugarcrepe_root=/no/such/folder does not exist" in report
    assert "plot not written: no REPLACE or SWAP figures" in report
    # Nothing can run: exit 1, the reasons already printed.
    assert evaluate.main(["--suites=vtab", "--models=hardpos-tiny:", f"--out={tmp_path / 'none'}"]) == 1
    assert "vtab: skipped: --vtab_root not given" in capsys.readouterr().err


@pytest.mark.parametrize("flag, message", [
    ("--suites=replace,nope", "--suites: unknown suite nope"),
    ("--models=hardpos-tiny", "--models: 'hardpos-tiny' is not NAME:PRETRAINED"),
    ("--models=NoSuchNet:", "--models NoSuchNet:: --model: unknown open_clip model 'NoSuchNet'"),
    ("--models=hardpos-tiny:/no/such.pt", "--models hardpos-tiny:/no/such.pt: --pretrained: no such file"),
    ("--tables=swap_eval", "--tables: with --suites or --models, name the sets in --suites"),
])
def test_bad_suite_flags_fail_fast_with_one_line(flag, message, tmp_path, capsys):
    extra = ["--suites=swap"] if flag.startswith("--tables") else []
    assert evaluate.main([flag, *extra, f"--out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}") and "\n" not in err
    assert not (tmp_path / "out" / "results.json").exists()


def test_single_model_run_still_requires_data_and_images(tmp_path, capsys):
    assert evaluate.main(["--model=hardpos-tiny", "--pretrained=", f"--out={tmp_path}"]) == 2
    assert capsys.readouterr().err.strip() == "error: the following arguments are required: --data, --images"


# ------------------------------------------------------------------------------------ issue 28, point 7

def test_no_random_init_warning_when_a_checkpoint_is_loaded(checkpoint, caplog):
    from pipeline.train.clip import create

    caplog.set_level("INFO")
    create("hardpos-tiny", str(checkpoint))
    messages = [r.getMessage() for r in caplog.records]
    assert not any("initialized randomly" in m for m in messages)
    assert any(m == f"loaded weights for hardpos-tiny from {checkpoint}" for m in messages)
    caplog.clear()
    create("hardpos-tiny", "")  # truly random weights: open_clip's line stays
    assert any("No pretrained weights loaded for model 'hardpos-tiny'. Model initialized randomly." in r.getMessage()
               for r in caplog.records)
