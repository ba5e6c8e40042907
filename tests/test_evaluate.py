"""The evaluator end to end: the real eval_sets output of samples/, generated JPEGs, the tiny open_clip model."""
import hashlib
import json
import math
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.train import evaluate
from pipeline.train.sampling import limited_indices
from tests.conftest import as_main, rows_of, run_without_pipeline, write_run_folder

SUBSETS = ["REPLACE-Relation", "REPLACE-Attribute", "SWAP"]
SUBSET_OF = {"relation": "REPLACE-Relation", "attribute": "REPLACE-Attribute", "swap": "SWAP"}


def noise_image(path: Path, size: tuple[int, int], seed: str) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3)).save(path, "JPEG", quality=90)


@pytest.fixture(scope="module")
def tables(sample_output):
    return {"replace": rows_of(sample_output, "replace"), "swap": rows_of(sample_output, "swap")}


@pytest.fixture(scope="module")
def images_root(tables, tmp_path_factory):
    """A JPEG for every row; SWAP images are 8 px larger than their box, so the crop lies inside."""
    root = tmp_path_factory.mktemp("images")
    sizes: dict[str, tuple[int, int]] = {}
    for row in tables["replace"] + tables["swap"]:
        w, h = 64, 48
        if row.get("bbox_x") is not None:
            w = math.ceil(row["bbox_x"] + row["bbox_w"]) + 8
            h = math.ceil(row["bbox_y"] + row["bbox_h"]) + 8
        old = sizes.get(row["image_path"], (0, 0))
        sizes[row["image_path"]] = (max(w, old[0]), max(h, old[1]))
    for image_path, size in sizes.items():
        noise_image(root / image_path, size, image_path)
    return root


def eval_args(data, images, out, *extra) -> list[str]:
    return ["--model=hardpos-tiny", "--pretrained=", f"--data={data}", f"--images={images}", f"--out={out}",
            "--workers=0", "--batch_size=16", *extra]


def run(data, images, out, *extra) -> int:
    return evaluate.main(eval_args(data, images, out, *extra))


@pytest.fixture(scope="module")
def tiny_run(sample_output, images_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    assert run(sample_output, images_root, out, "--bootstrap=200", "--seed=3") == 0
    return out


def load_json(out: Path) -> dict:
    return json.loads((out / "eval.json").read_text())


def scores_of(out: Path) -> list[dict]:
    return pq.read_table(out / "scores.parquet").to_pylist()


def test_evaluates_where_beam_spacy_and_nltk_cannot_be_imported(sample_output, images_root, tiny_run, tmp_path):
    """As on a machine with only the train or eval extra: the tables load and every row gets the reference scores."""
    args = eval_args(sample_output, images_root, tmp_path, "--bootstrap=200", "--seed=3")
    result = run_without_pipeline(as_main("pipeline.train.evaluate"), *args)
    assert result.returncode == 0, result.stderr
    ours, reference = scores_of(tmp_path), scores_of(tiny_run)
    assert [r["example_id"] for r in ours] == [r["example_id"] for r in reference]
    for k in ("s_c", "s_n", "s_p"):
        assert [r[k] for r in ours] == pytest.approx([r[k] for r in reference], abs=1e-5), k


def test_writes_json_markdown_plot_and_scores_for_every_row(tiny_run, tables):
    result = load_json(tiny_run)
    n_replace, n_swap = len(tables["replace"]), len(tables["swap"])
    assert (result["rows"], result["scored"], result["skipped"]) == (n_replace + n_swap, n_replace + n_swap, 0)
    assert result["tables"]["replace_eval"]["rows"] == n_replace and result["tables"]["swap_eval"]["rows"] == n_swap
    assert list(result["subsets"]) == SUBSETS and list(result["sets"]) == ["REPLACE", "SWAP"]
    assert result["outputs"]["plot"] == "accuracy_vs_brittleness.png"
    assert (tiny_run / "accuracy_vs_brittleness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    scores = scores_of(tiny_run)
    assert [r["example_id"] for r in scores] == [r["example_id"] for r in tables["replace"] + tables["swap"]]
    assert all(-1 <= r[k] <= 1 for r in scores for k in ("s_c", "s_n", "s_p"))
    assert (tiny_run / "skipped.jsonl").read_text() == ""


def _recompute(rows: list[dict]) -> dict:
    """The three figures and the means, straight from the definitions, for scores.parquet rows."""
    c, n, p = (np.array([r[k] for r in rows]) for k in ("s_c", "s_n", "s_p"))
    return {"n": len(rows), "original_accuracy": float(np.mean(c > n)),
            "augmented_accuracy": float(np.mean((c > n) & (p > n))),
            "brittleness": float(np.mean(((c > n) & (n > p)) | ((p > n) & (n > c)))),
            "mean_s_c": float(c.mean()), "mean_s_n": float(n.mean()), "mean_s_p": float(p.mean())}


def test_figures_agree_with_recomputation_from_scores(tiny_run, tables):
    result, scores = load_json(tiny_run), scores_of(tiny_run)
    groups = {name: [r for r in scores if SUBSET_OF[r["subset"]] == name] for name in SUBSETS}
    groups["REPLACE"] = [r for r in scores if r["table"] == "replace_eval"]
    figures = {**result["subsets"], **result["sets"]}
    for name, rows in groups.items():
        expected, got = _recompute(rows), figures[name]
        assert {k: got[k] for k in expected} == pytest.approx(expected), name
        for metric in ("original_accuracy", "augmented_accuracy", "brittleness"):
            low, high = got[metric.replace("_accuracy", "") + "_ci95"]
            assert low <= got[metric] <= high
    # Per category and per pair: one entry for each (subset, category[, pair]) of the table, rows all counted.
    replace = tables["replace"]
    assert {(g["subset"], g["category"]) for g in result["categories"]} == {
        (SUBSET_OF[r["subset"]], r["category"]) for r in replace}
    assert {(g["subset"], g["category"], g["replaced_from"], g["replaced_to"]) for g in result["pairs"]} == {
        (SUBSET_OF[r["subset"]], r["category"], r["replaced_from"], r["replaced_to"]) for r in replace}
    assert sum(g["n"] for g in result["categories"]) == sum(g["n"] for g in result["pairs"]) == len(replace)
    for g in result["pairs"]:
        rows = [r for r in scores if (SUBSET_OF[r["subset"]], r["category"], r["replaced_from"],
                                      r["replaced_to"]) == (g["subset"], g["category"], g["replaced_from"],
                                                            g["replaced_to"])]
        assert g["original_accuracy"] == pytest.approx(_recompute(rows)["original_accuracy"])
    # The markdown's Table 1 row is the JSON's figures in percent; Table 2 has the means.
    markdown = (tiny_run / "eval.md").read_text()
    cells = [f"{100 * result['subsets'][s][k]:.1f}" for s in SUBSETS
             for k in ("original_accuracy", "augmented_accuracy", "brittleness")]
    assert "| hardpos-tiny / random init | " + " | ".join(cells) + " |" in markdown
    swap = result["subsets"]["SWAP"]
    assert f"| SWAP | {swap['n']} | {swap['mean_s_c']:.4f} | {swap['mean_s_n']:.4f} | {swap['mean_s_p']:.4f} |" \
        in markdown
    assert "## Per VL-CheckList category" in markdown and "## Per replacement pair" in markdown
    assert "200 resamples, seed 3" in markdown


def _expected_scores(clip, transform, tokenizer, image, row) -> list[float]:
    import torch

    with torch.no_grad():
        image_emb = clip.encode_image(transform(image)[None])[0]
        text_emb = clip.encode_text(tokenizer([row["caption"], row["hard_negative"], row["hard_positive"]]))
    image_emb = image_emb / image_emb.norm()
    text_emb = text_emb / text_emb.norm(dim=-1, keepdim=True)
    return (text_emb @ image_emb).tolist()


def test_checkpoint_weights_give_the_cosine_scores_of_that_model(sample_output, images_root, tables, tmp_path):
    import torch

    from pipeline.train.clip import create

    torch.manual_seed(123)
    clip, _, transform, tokenizer = create("hardpos-tiny", "")
    clip.eval()
    checkpoint = tmp_path / "tiny.pt"
    torch.save({"model": clip.state_dict(), "epoch": 1}, checkpoint)
    out, out_random = tmp_path / "ckpt", tmp_path / "random"
    assert run(sample_output, images_root, out, f"--pretrained={checkpoint}", "--limit=3", "--bootstrap=0") == 0
    assert run(sample_output, images_root, out_random, "--limit=3", "--bootstrap=0") == 0
    result = load_json(out)
    assert result["pretrained_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert result["tables"]["replace_eval"]["scored"] == result["tables"]["swap_eval"]["scored"] == 3
    got = {r["example_id"]: [r["s_c"], r["s_n"], r["s_p"]] for r in scores_of(out)}
    drawn = [t[i] for t in (tables["replace"], tables["swap"]) for i in limited_indices(len(t), 3, 0)]  # --limit=3
    for row in drawn:
        with Image.open(images_root / row["image_path"]) as image:
            image = image.convert("RGB")
        full = _expected_scores(clip, transform, tokenizer, image, row)
        if row.get("bbox_x") is not None:  # SWAP: scored on ARO's box, not the whole image
            x, y, w, h = (row[k] for k in ("bbox_x", "bbox_y", "bbox_w", "bbox_h"))
            cropped = _expected_scores(clip, transform, tokenizer, image.crop((x, y, x + w, y + h)), row)
            assert got[row["example_id"]] == pytest.approx(cropped, abs=1e-5)
            assert got[row["example_id"]] != pytest.approx(full, abs=1e-4)
        else:
            assert got[row["example_id"]] == pytest.approx(full, abs=1e-5)
    random_init = {r["example_id"]: [r["s_c"], r["s_n"], r["s_p"]] for r in scores_of(out_random)}
    assert random_init.keys() == got.keys()
    assert all(random_init[k] != pytest.approx(got[k], abs=1e-4) for k in got)


def test_missing_and_unreadable_images_are_skipped_and_counted(sample_output, images_root, tables, tiny_run,
                                                               tmp_path):
    root = tmp_path / "images"
    shutil.copytree(images_root, root)
    replace, swap = tables["replace"], tables["swap"]
    missing = [replace[0], replace[5], replace[-1], swap[1], swap[-1]]
    for row in missing:
        (root / row["image_path"]).unlink()
    (root / replace[2]["image_path"]).write_bytes(b"not a jpeg")
    # Its box now runs past the image (which it still overlaps): PIL pads the crop, as ARO's crop does; still scored.
    oversized = swap[0]
    noise_image(root / oversized["image_path"], (24, 32), "small")
    out = tmp_path / "out"
    assert run(sample_output, root, out, "--workers=2", "--bootstrap=0", "--seed=3") == 0
    result = load_json(out)
    assert result["rows"] == len(replace) + len(swap)
    assert (result["scored"], result["skipped"]) == (result["rows"] - 6, 6)
    assert result["skip_reasons"] == {"image_missing": 5, "image_unreadable": 1}
    assert result["tables"]["replace_eval"]["skip_reasons"] == {"image_missing": 3, "image_unreadable": 1}
    assert result["tables"]["swap_eval"]["skip_reasons"] == {"image_missing": 2}
    skipped = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    assert {(s["example_id"], s["reason"]) for s in skipped} == {(r["example_id"], "image_missing") for r in missing} \
        | {(replace[2]["example_id"], "image_unreadable")}
    assert result["skipped_rows"] == skipped
    scores = {r["example_id"]: r for r in scores_of(out)}
    assert set(scores) == {r["example_id"] for r in replace + swap} - {s["example_id"] for s in skipped}
    assert oversized["example_id"] in scores
    assert sum(g["n"] for g in result["subsets"].values()) == result["scored"]
    assert result["subsets"]["SWAP"]["original_ci95"] is None
    assert "6 skipped (image_missing 5, image_unreadable 1)" in (out / "eval.md").read_text()
    # Same seed, same random weights: a row's scores do not depend on its batch or on worker processes.
    before = {r["example_id"]: r for r in scores_of(tiny_run)}
    for example_id, row in scores.items():
        if example_id != oversized["example_id"]:
            assert [row[k] for k in ("s_c", "s_n", "s_p")] == pytest.approx(
                [before[example_id][k] for k in ("s_c", "s_n", "s_p")], abs=1e-5)


def test_only_the_tables_present_no_plot_without_matplotlib(tables, images_root, tmp_path, monkeypatch, capsys):
    data = write_run_folder(tmp_path / "data", "replace_eval", tables["replace"][:4])
    out = tmp_path / "out"
    out.mkdir()
    (out / "accuracy_vs_brittleness.png").write_bytes(b"an earlier run's plot")
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    assert run(data, images_root, out) == 0
    result = load_json(out)
    assert list(result["sets"]) == ["REPLACE"] and result["scored"] == 4
    assert any(n.startswith("table not evaluated: swap_eval") for n in result["notes"])
    assert any("matplotlib is not installed" in n for n in result["notes"])
    assert result["outputs"]["plot"] is None and not (out / "accuracy_vs_brittleness.png").exists()
    assert "matplotlib is not installed" in capsys.readouterr().out


def test_no_image_at_all_is_an_error_after_writing_the_counts(sample_output, tmp_path, capsys):
    empty = tmp_path / "no_images"
    empty.mkdir()
    assert run(sample_output, empty, tmp_path / "out", "--limit=2") == 1
    result = load_json(tmp_path / "out")
    assert (result["rows"], result["scored"], result["skip_reasons"]) == (4, 0, {"image_missing": 4})
    assert "no row could be scored" in capsys.readouterr().err


@pytest.mark.parametrize("flag, message", [
    ("--images=/no/such/folder", "--images: no such folder"),
    ("--tables=order_eval", "--tables: unknown table order_eval"),
    ("--pretrained=/no/such/weights.pt", "--pretrained: no such file"),
    ("--pretrained=laion_nonsense", "--pretrained: 'laion_nonsense' is neither a file nor an open_clip tag"),
    ("--model=NoSuchNet", "--model: unknown open_clip model"),
    ("--data=/no/such/run", "--data: no such folder"),
    ("--tables=swap", "--data: cannot load swap_eval"),
    ("--batch_size=0", "--batch_size must be >= 1"),
    ("--seed=-1", "--seed must be >= 0"),
    (f"--seed={2**63}", "--seed must be < 2**63"),
    ("--image_max_pixel_values=0", "--image_max_pixel_values must be >= 1"),
])
def test_bad_flags_fail_fast_with_one_line(flag, message, tables, images_root, tmp_path, capsys):
    data = write_run_folder(tmp_path / "data", "replace_eval", tables["replace"][:1])
    args = ["--model=hardpos-tiny", "--pretrained=", f"--data={data}", f"--images={images_root}",
            f"--out={tmp_path / 'out'}"]
    key = flag.split("=")[0]
    assert evaluate.main([a for a in args if not a.startswith(key + "=")] + [flag]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}") and "\n" not in err
    assert not (tmp_path / "out" / "eval.json").exists()


def test_limit_draws_a_seeded_sample_of_each_set_not_its_first_rows(sample_output, images_root, tables, tmp_path):
    out = tmp_path / "limited"
    assert run(sample_output, images_root, out, "--limit=10", "--bootstrap=0", "--pretrained=") == 0
    scored = {r["example_id"] for r in scores_of(out)}
    replace = tables["replace"]
    expected = {replace[i]["example_id"] for i in limited_indices(len(replace), 10, 0)}
    assert expected <= scored and len(expected) == 10
    assert expected != {r["example_id"] for r in replace[:10]}
    assert {r["subset"] for r in replace if r["example_id"] in scored} == {"attribute", "relation"}
    again = tmp_path / "limited_seed1"
    assert run(sample_output, images_root, again, "--limit=10", "--bootstrap=0", "--pretrained=", "--seed=1") == 0
    assert {r["example_id"] for r in scores_of(again)} != scored
