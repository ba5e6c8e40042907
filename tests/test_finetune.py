"""The trainer end to end on CPU (hardpos-tiny, random init, generated JPEGs): loss terms, resume, recipes, flags,
and WiSE-FT patching."""
import json
import math

import pytest
import torch
from conftest import as_main, run_without_pipeline
from train_fixtures import (  # noqa: F401 (one_thread: an autouse fixture)
    BATCH,
    CORRUPT,
    MISSING,
    N_ROWS,
    STEPS,
    log_records,
    make_train_data,
    one_thread,
    run_args,
    weights,
)

from pipeline.train import finetune, patching
from pipeline.train.clip import create, import_open_clip
from pipeline.train.data import Collate, TrainDataset, epoch_batches, load_rows
from pipeline.train.losses import LossConfig

import_open_clip()  # never `import open_clip` directly: see pipeline/torchvision_compat.py


@pytest.fixture(scope="module")
def train_data(tmp_path_factory):
    return make_train_data(tmp_path_factory.mktemp("train_data"))


@pytest.fixture(scope="module")
def init_run(train_data, tmp_path_factory):
    """--max_steps=0: final.pt holds the seeded random initial weights every run below starts from."""
    out = tmp_path_factory.mktemp("init")
    assert finetune.main(run_args(train_data, out, "--max_steps=0")) == 0
    return out


@pytest.fixture(scope="module")
def run_a(train_data, tmp_path_factory):
    """The uninterrupted reference run: 8 steps, checkpoints every 4."""
    out = tmp_path_factory.mktemp("run_a")
    assert finetune.main(run_args(train_data, out, f"--max_steps={STEPS}", "--save_every=4")) == 0
    return out


def fixed_batch(data, transform, tokenizer, n=16):
    """The first n rows with an image, through the deterministic eval transform."""
    table, indices, *_ = load_rows(str(data.data), None, None)
    dataset = TrainDataset(table, indices, str(data.images), transform, seed=0)
    items = [dataset[(0, i)] for i in range(len(dataset))]
    return Collate(tokenizer)([item for item in items if "skip" not in item][:n])


def test_tiny_run_every_term_finite_and_total_decreases(train_data, init_run, run_a):
    records = log_records(run_a)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for r in records:
        assert all(math.isfinite(r[k]) for k in ("clip", "hn", "hp", "total")), r
        assert r["total"] == pytest.approx(r["clip"] + r["hn"] + r["hp"], rel=1e-5)
    # the same 16 rows (eval transform) scored by the initial and the trained weights
    config = LossConfig()
    before_model, _, eval_transform, tokenizer = create("hardpos-tiny", str(init_run / "final.pt"))
    batch = fixed_batch(train_data, eval_transform, tokenizer)
    before = finetune.evaluate_losses(before_model, batch, config)
    after = finetune.evaluate_losses(create("hardpos-tiny", str(run_a / "final.pt"))[0], batch, config)
    assert all(math.isfinite(v) for v in (*before.values(), *after.values()))
    assert after["total"] < before["total"] - 0.1, (before, after)
    assert sorted(p.name for p in (run_a / "checkpoints").iterdir()) == ["latest.pt", "step_4.pt", "step_8.pt"]


def test_trains_where_beam_spacy_and_nltk_cannot_be_imported(train_data, run_a, tmp_path):
    """As on a machine with only the train extra: the table loads and the first step is the reference run's."""
    code = "import torch; torch.set_num_threads(1)\n" + as_main("pipeline.train.finetune")
    result = run_without_pipeline(code, *run_args(train_data, tmp_path, "--max_steps=1"))
    assert result.returncode == 0, result.stderr
    [record] = log_records(tmp_path)
    reference = log_records(run_a)[0]
    assert {k: record[k] for k in ("clip", "hn", "hp", "total")} == \
        pytest.approx({k: reference[k] for k in ("clip", "hn", "hp", "total")}, rel=1e-6)
    assert (tmp_path / "final.pt").is_file()


def test_zero_weights_train_on_the_plain_clip_loss(train_data, run_a, tmp_path):
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=2", "--hn_weight=0", "--hp_weight=0",
                                  "--save_every=1", "--keep_checkpoints=1")) == 0
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest.pt", "step_2.pt"]
    records = log_records(tmp_path)
    assert len(records) == 2
    for r in records:
        assert r["total"] == r["clip"]
        assert r["hn"] > 0 and r["hp"] > 0  # still logged, without gradient
    # same seed, same first batch, same initial weights: the first step's CLIP term is the reference run's
    assert records[0]["clip"] == pytest.approx(log_records(run_a)[0]["clip"], rel=1e-6)


def test_hard_positive_term_is_zero_when_the_positive_is_the_caption(train_data, run_a):
    model, _, eval_transform, tokenizer = create("hardpos-tiny", str(run_a / "final.pt"))
    batch = fixed_batch(train_data, eval_transform, tokenizer, n=8)
    assert finetune.evaluate_losses(model, batch, LossConfig())["hp"] > 0
    batch["positives"] = batch["captions"].clone()
    assert finetune.evaluate_losses(model, batch, LossConfig())["hp"] == 0.0


def test_resume_from_a_mid_run_checkpoint_ends_with_the_same_weights(train_data, run_a, tmp_path):
    # run B goes past its step-4 checkpoint and stops at 6 (as if killed); resuming from step 4 must redo 5..8
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=6", "--save_every=4")) == 0
    checkpoint = tmp_path / "checkpoints" / "step_4.pt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)  # tensors and plain values only
    assert {"model", "optimizer", "scheduler", "scaler", "step", "epoch", "rng", "args"} <= set(saved)
    assert (saved["step"], saved["epoch"]) == (4, 1)
    assert finetune.main(run_args(train_data, tmp_path, f"--max_steps={STEPS}", "--save_every=4",
                                  f"--resume={checkpoint}")) == 0
    expected, got = weights(run_a / "final.pt"), weights(tmp_path / "final.pt")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected), "resumed weights differ"
    assert log_records(tmp_path) == log_records(run_a)  # the log of steps 5-6 from before the stop was replaced
    # --resume latest: the step-8 checkpoint, nothing left to do
    assert finetune.main(run_args(train_data, tmp_path, f"--max_steps={STEPS}", "--resume=latest")) == 0
    assert all(torch.equal(expected[k], v) for k, v in weights(tmp_path / "final.pt").items())
    assert len(log_records(tmp_path)) == STEPS


def test_resume_refuses_a_different_batch_size(train_data, run_a, tmp_path, capsys):
    args = run_args(train_data, tmp_path, "--max_steps=9", f"--resume={run_a / 'checkpoints' / 'step_4.pt'}")
    assert finetune.main([*args, "--batch_size=4"]) == 2
    assert "--batch_size" in capsys.readouterr().err


def test_missing_and_unreadable_images_are_skipped_and_counted(train_data, run_a):
    summary = json.loads((run_a / "summary.json").read_text())
    expected = {"image missing": 0, "image unreadable": 0}
    for step in range(STEPS):
        epoch, position = divmod(step, N_ROWS // BATCH)
        for _, i in epoch_batches(N_ROWS, BATCH, 0, epoch)[position]:
            if i in MISSING or i in CORRUPT:
                expected["image missing" if i in MISSING else "image unreadable"] += 1
    assert summary["images_skipped"] == expected and expected["image missing"] >= 4
    records = log_records(run_a)
    assert sum(BATCH - r["batch"] for r in records) == sum(expected.values())


@pytest.mark.parametrize("recipe,precision", [("negclip", "fp32"), ("fsc", "fp32"), ("fsc", "amp_bf16")])
def test_other_recipes_and_mixed_precision_train(train_data, tmp_path, recipe, precision):
    # amp_bf16 here is CPU autocast: the same code path as on a GPU, minus the GradScaler of fp16 "amp"
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=2", f"--recipe={recipe}",
                                  f"--precision={precision}")) == 0
    terms = ("clip", "hn", "hp", "local", "total") if recipe == "fsc" else ("clip", "hn", "hp", "total")
    for r in log_records(tmp_path):
        assert all(math.isfinite(r[k]) for k in terms), r
    assert ("local" in log_records(tmp_path)[0]) == (recipe == "fsc")
    assert all(v.dtype == torch.float32 for v in weights(tmp_path / "final.pt").values() if v.is_floating_point())


def test_type_filters_and_bad_flags(train_data, tmp_path, capsys):
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=0", "--positive_types=swap")) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows_kept"] == sum(1 for i in range(N_ROWS) if i % 3 == 0)
    assert summary["rows_filtered"]["positive_type not in --positive_types"] == N_ROWS - summary["rows_kept"]
    for flag, value in [("--positive_types", "order"), ("--images", tmp_path / "nowhere"),
                        ("--data", tmp_path / "nowhere"), ("--batch_size", "100")]:
        assert finetune.main([*run_args(train_data, tmp_path, "--max_steps=0"), f"{flag}={value}"]) == 2
        assert flag in capsys.readouterr().err


def test_token_encoders_follow_open_clip():
    model = create("hardpos-tiny", "")[0]
    tokenizer = create("hardpos-tiny", "")[3]
    text = tokenizer(["a red dog", "two cats on a mat next to a window"])
    pooled, tokens = finetune.encode_text_tokens(model, text)
    assert torch.allclose(pooled, model.encode_text(text, normalize=True), atol=1e-6)
    assert tokens.shape == (2, 77, 32)
    images = torch.randn(2, 3, 32, 32)
    pooled, patches = finetune.encode_image_tokens(model, images)
    assert torch.allclose(pooled, model.encode_image(images, normalize=True), atol=1e-6)
    assert patches.shape == (2, 16, 32) and model.visual.output_tokens is False


def test_patch_endpoints_and_midpoint(init_run, run_a):
    pretrained, finetuned = weights(init_run / "final.pt"), weights(run_a / "final.pt")
    assert not all(torch.equal(pretrained[k], finetuned[k]) for k in pretrained)
    zero, one, half = (patching.patch(pretrained, finetuned, a) for a in (0.0, 1.0, 0.5))
    assert all(torch.equal(zero[k], pretrained[k]) and torch.equal(one[k], finetuned[k]) for k in pretrained)
    assert all(torch.allclose(half[k], (pretrained[k] + finetuned[k]) / 2, atol=1e-7) for k in pretrained)
    with pytest.raises(ValueError, match="buffer"):
        patching.patch({"n": torch.tensor([1])}, {"n": torch.tensor([2])}, 0.5)
    with pytest.raises(ValueError, match="keys"):
        patching.patch({"a": torch.zeros(1)}, {"b": torch.zeros(1)}, 0.5)


def test_patching_cli_writes_one_loadable_file_per_alpha(init_run, run_a, tmp_path):
    args = ["--model=hardpos-tiny", f"--pretrained={init_run / 'final.pt'}", f"--finetuned={run_a / 'final.pt'}",
            "--alpha", "0", "1", f"--out={tmp_path}"]
    assert patching.main(args) == 0
    for alpha, source in (("0", init_run), ("1", run_a)):
        model = create("hardpos-tiny", str(tmp_path / f"patched_alpha{alpha}.pt"))[0]
        expected = weights(source / "final.pt")
        assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())
    assert patching.main([*args[:3], "--alpha", "1.5", f"--out={tmp_path / 'x.pt'}"]) == 2


def test_augmentations_depend_on_seed_epoch_and_row_only(train_data):
    _, train_transform, _, tokenizer = create("hardpos-tiny", "")
    table, indices, *_ = load_rows(str(train_data.data), None, None)
    dataset = TrainDataset(table, indices, str(train_data.images), train_transform, seed=0)
    state = torch.get_rng_state()
    first = dataset[(0, 0)]["image"]
    assert torch.equal(torch.get_rng_state(), state)  # the training RNG is left alone
    torch.manual_seed(123)  # whatever the process RNG holds
    assert torch.equal(dataset[(0, 0)]["image"], first)
    assert not torch.equal(dataset[(1, 0)]["image"], first)  # a new crop each epoch
    assert not torch.equal(TrainDataset(table, indices, str(train_data.images), train_transform, seed=1)[(0, 0)]
                           ["image"], first)


def test_worker_processes_give_the_same_batches(train_data, run_a, tmp_path):
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=2", "--workers=2")) == 0
    assert log_records(tmp_path) == log_records(run_a)[:2]


def test_a_run_with_too_many_rows_without_an_image_stops_with_one_line(train_data, tmp_path, capsys):
    empty = tmp_path / "images" / "train2017"
    empty.mkdir(parents=True)
    args = [a for a in run_args(train_data, tmp_path / "out", "--max_steps=4") if not a.startswith("--max_missing")]
    assert finetune.main([a if not a.startswith("--images=") else f"--images={tmp_path / 'images'}"
                          for a in args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max_missing_images: 8 of step 1's 8 rows have no usable image" in err[0]
    assert "e.g. ex" in err[0] and not (tmp_path / "out" / "final.pt").exists()
    # the fixture's own 3 of 24: over the default 1% of the first step that has one
    assert finetune.main(run_args(train_data, tmp_path / "again", "--max_steps=4", "--max_missing_images=0.01")) == 1
    assert "have no usable image" in capsys.readouterr().err


def test_hardpos_tiny_needs_no_pretrained_flag_and_the_summary_has_both_rates(train_data, tmp_path):
    args = [a for a in run_args(train_data, tmp_path, "--max_steps=18", "--epochs=7") if a != "--pretrained="]
    assert finetune.main(args) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["images_per_second"] > 0 and summary["images_per_second_steady"] > 0
    assert summary["steady_after_steps"] == finetune.WARMUP_STEPS_UNTIMED < summary["steps"]
