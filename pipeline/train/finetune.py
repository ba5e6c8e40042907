"""CLIP finetuning with hard negatives and hard positives: `python -m pipeline.train.finetune --data ... --images
... --out ...`.

Per batch of (image, caption, hard positive, hard negative) rows the loss is (pipeline/train/losses.py)
    CLIP contrastive loss + --hn_weight * hard-negative loss + --hp_weight * hard-positive loss
with --recipe=negclip (negatives as extra text columns of the contrastive loss) and --recipe=fsc (NegCLIP's
contrastive loss, focal/label-smoothed hard-negative loss, and FSC-CLIP's local token-patch hard-negative loss).
Defaults are the paper's: OpenAI ViT-B/32 (built with QuickGELU, the activation those weights were trained
with; see pipeline/train/clip.py), AdamW, lr 5e-6, weight decay 0.1, cosine schedule with warmup, 5 epochs, mixed
precision on GPU; where the paper leaves a value open we take FSC-CLIP's COCO run of the same recipe (50 warmup
steps, batch 256) and open_clip's trainer (AdamW betas 0.9/0.98, eps 1e-6, no decay on gains, biases and the
logit scale). The hard-positive weight is 1 as in SVLC (its positive loss is added unweighted); --hn_weight is
what Table 3 sweeps.

Outputs under --out: checkpoints/step_N.pt and checkpoints/latest.pt every --save_every steps and at the last
step ({model, optimizer, scheduler, scaler, step, epoch, rng, args, skipped, train_table}, written atomically
and in forms torch.load(weights_only=True) reads: pipeline/train/checkpoint.py), final.pt ({"model": state_dict,
args, train_table}, loadable by pipeline.train.clip.create(model, path)); train_table is the fingerprint of the
train table read (train_table_record), by which the evaluator knows the table it was trained on, log.jsonl (every step: each loss term, total, lr, batch size) and
summary.json (rows read/kept, images skipped by reason, steps, images per second over the run and after its first
WARMUP_STEPS_UNTIMED steps). The run holds --out's lock (.hardpos.lock), so a second trainer into the folder is
refused; it stops (exit 1, no checkpoint of them) when the loss or the weights after an update are not finite,
and when --out's disk is full, leaving nothing partial.

--resume PATH|latest continues exactly: weights, optimizer, schedule, RNG and data position (a step's batch and
each row's augmentation on (seed, epoch, example_id), see data.py), so a resumed run ends with the weights an
uninterrupted one would have (bit for bit on CPU, as tested; on a GPU up to its nondeterministic kernels).
--max_steps stops early (smoke runs, tests); the schedule stays that of --epochs, so a run stopped by --max_steps
and resumed is the same run.

Data loading runs in the training process by default (--workers 0); with --workers N the batches are the same
(augmentation seeds are per row, not per worker), only faster.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
import time
from collections import Counter
from contextlib import contextmanager, nullcontext
from pathlib import Path

from pipeline.folder_lock import LockRefused, holder_record, lock_local, planted_link, write_own
from pipeline.tables.folders import output_folder_problem
from pipeline.train.checkpoint import (
    OWN_FILES,
    atomic_save,
    check_resume_args,
    link_latest,
    prune_checkpoints,
    read_training_checkpoint,
    remove_partial_files,
    restore,
    resume_path,
    rng_state,
    seed_everything,
)
from pipeline.train.clip import UsageError, uses_quick_gelu

DEFAULT_MODEL = "ViT-B-32"  # with --pretrained=openai, clip.create builds it with QuickGELU, as those weights need
PRECISIONS = ("amp", "amp_bf16", "fp32")
# Checked finite and >= 0 before anything loads (--max_missing_images and --fsc_smoothing have ranges of their own).
FLOAT_FLAGS = ("lr", "weight_decay", "hn_weight", "hp_weight", "fsc_gamma", "fsc_local_weight", "grad_clip_norm")
FLOAT32_MAX = 3.4028234663852886e38
# A write into --out that fails for want of room: one line, exit 1 (atomic_save leaves nothing partial).
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class TrainingDiverged(RuntimeError):
    pass


class OutputNotWritten(RuntimeError):
    """--out ran out of room (disk full, quota): the run stops with one line."""


# Steps of a run left out of its steady-state rate: the first ones pay for kernel selection and loader start-up (on
# an H200 the first 15 steps took 4x a later one).
WARMUP_STEPS_UNTIMED = 15


class ImagesMissing(RuntimeError):
    """More of a step's or of the run's rows have no usable image than --max_missing_images allows: training on
    what is left would not be training on the table (an empty --images folder ran 50 empty steps and "succeeded")."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.train.finetune", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="The train table: a run folder, a published folder or a Hub repo.")
    p.add_argument("--images", required=True,
                   help="Images: --stage=images output (index/ + shards/), the corpus's img2dataset output (webdataset "
                        ".tar or parquet shards; rows find theirs by key) or a folder with COCO's train2017/.")
    p.add_argument("--out", required=True, help="Output folder (checkpoints/, final.pt, log.jsonl, summary.json); one "
                                                "run at a time (a second trainer into it is refused).")
    p.add_argument("--model", default=DEFAULT_MODEL, help="open_clip architecture, or hardpos-tiny for tests.")
    p.add_argument("--pretrained", default=None,
                   help="open_clip tag (openai, ...), a checkpoint path, or empty for random weights (default: openai "
                        "where open_clip has those weights for --model, else random: hardpos-tiny).")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--lr", type=float, default=5e-6)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--warmup_steps", type=int, default=50, help="Linear warmup, then cosine decay to 0.")
    p.add_argument("--grad_clip_norm", type=float, default=None, help="Clip the gradient norm (default: no).")
    p.add_argument("--hn_weight", type=float, default=1.0, help="Hard-negative loss weight (Table 3 sweeps 0-1).")
    p.add_argument("--hp_weight", type=float, default=1.0, help="Hard-positive loss weight.")
    p.add_argument("--hp_loss", default="excess",
                   help="excess | ce. excess: cross-entropy relative to the caption's (0 when a positive matches it); "
                        "ce: SVLC's plain cross-entropy.")
    p.add_argument("--recipe", default="clip",
                   help="clip | negclip | fsc. clip: CLIP loss + HN + HP terms; negclip: negatives also as "
                        "contrastive columns; fsc: negclip + focal/smoothed HN + FSC-CLIP's local token-patch HN loss.")
    p.add_argument("--fsc_gamma", type=float, default=2.0, help="fsc: focal gamma (FSC-CLIP: 2.0).")
    p.add_argument("--fsc_smoothing", type=float, default=0.02, help="fsc: label smoothing (FSC-CLIP: 0.02).")
    p.add_argument("--fsc_local_weight", type=float, default=0.2, help="fsc: local HN loss weight (FSC-CLIP: 0.2).")
    p.add_argument("--positive_types", default="all",
                   help="Keep rows whose positive_type is one of these (comma-separated), or all.")
    p.add_argument("--negative_types", default="all",
                   help="Keep rows whose negative_type is one of these (comma-separated), or all.")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="Default: amp_bf16 on GPUs with bf16 (else amp: fp16 + GradScaler), fp32 on CPU.")
    p.add_argument("--device", default=None, help="Default: cuda if available, else cpu.")
    p.add_argument("--seed", type=int, default=0, help="Model init (random weights), data order, augmentations.")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (0: load in this process).")
    p.add_argument("--save_every", type=int, default=1000, help="Checkpoint every N steps (0: only the last).")
    p.add_argument("--keep_checkpoints", type=int, default=0, help="Keep the N newest step_*.pt (0: keep all).")
    p.add_argument("--resume", default=None, help="A checkpoint path, or latest (<out>/checkpoints/latest.pt; "
                                                  "starts fresh if there is none).")
    p.add_argument("--max_steps", type=int, default=None, help="Stop after this many steps in all (smoke runs).")
    p.add_argument("--log_every", type=int, default=10, help="Print a line every N steps (log.jsonl gets all).")
    p.add_argument("--max_missing_images", type=float, default=0.01,
                   help="Stop (exit 1) when more than this share of a step's rows, or of the run's so far, have no "
                        "usable image (missing, unreadable, too large).")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    import torch

    args = build_parser().parse_args(argv)
    try:
        loss_config(args)
    except ValueError as e:  # --recipe / --hp_loss names
        raise UsageError(str(e)) from None
    for flag in ("epochs", "batch_size", "log_every"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag}: must be >= 1, got {getattr(args, flag)}")
    for flag in ("warmup_steps", "workers", "save_every", "keep_checkpoints", "max_steps"):
        if getattr(args, flag) is not None and getattr(args, flag) < 0:
            raise UsageError(f"--{flag}: must be >= 0, got {getattr(args, flag)}")
    for flag in FLOAT_FLAGS:  # nan fails the range (every comparison with it is false); an infinite --lr left
        # every weight non-finite, and one past float32's range made AdamW's step raise
        value = getattr(args, flag)
        if value is not None and not 0 <= value <= FLOAT32_MAX:
            raise UsageError(f"--{flag}: must be a finite number >= 0 (as a 32-bit float, which training computes "
                             f"in), got {value}")
    if not 0 <= args.max_missing_images <= 1:
        raise UsageError(f"--max_missing_images: must be in [0, 1], got {args.max_missing_images}")
    if not 0 <= args.fsc_smoothing < 1:
        raise UsageError(f"--fsc_smoothing: must be in [0, 1), got {args.fsc_smoothing}")
    from pipeline.train.clip import resolve_pretrained

    args.pretrained = resolve_pretrained(args.model, args.pretrained)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device: {args.device} but no CUDA device is available")
    if args.precision is None:
        on_gpu = args.device.startswith("cuda")
        args.precision = ("amp_bf16" if torch.cuda.is_bf16_supported() else "amp") if on_gpu else "fp32"
    if args.precision == "amp" and not args.device.startswith("cuda"):
        raise UsageError("--precision: amp (fp16 + GradScaler) needs a CUDA device; use amp_bf16 or fp32")
    return args


def loss_config(args):
    from pipeline.train.losses import LossConfig

    return LossConfig(hn_weight=args.hn_weight, hp_weight=args.hp_weight, hp_loss=args.hp_loss, recipe=args.recipe,
                      fsc_gamma=args.fsc_gamma, fsc_smoothing=args.fsc_smoothing,
                      fsc_local_weight=args.fsc_local_weight)


# ------------------------------------------------------------------------------------------------- the model


def load_model(name: str, pretrained: str, device: str = "cpu", flag: str = "--pretrained"):
    """pipeline.train.clip.create, its failures (unknown model, a checkpoint that cannot be read, weights not
    downloadable or not matching) as one-line errors naming `flag`, the flag that gave `pretrained`."""
    from pipeline.train.clip import CheckpointError, create, one_line

    try:
        return create(name, pretrained, device=device)
    except CheckpointError as e:
        raise UsageError(f"{flag}: {e}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    except RuntimeError as e:
        raise UsageError(f"{flag}: {pretrained!r} for --model {name}: {one_line(e)}") from None


def check_model(model, config) -> None:
    if getattr(model, "logit_bias", None) is not None:
        raise UsageError("--model: models with a logit bias (SigLIP) are not supported by these losses")
    if config.recipe == "fsc":
        if not (hasattr(model.visual, "output_tokens") and hasattr(model.visual, "proj")):
            raise UsageError("--recipe: fsc needs a ViT image tower (patch tokens); this --model has none")
        if not hasattr(model, "token_embedding"):
            raise UsageError("--recipe: fsc needs open_clip's built-in text tower (per-token features)")


def encode_image_tokens(model, images):
    """(pooled normalised embedding, projected patch tokens B x Q x D) from open_clip's VisionTransformer."""
    import torch.nn.functional as F

    visual = model.visual
    before = visual.output_tokens
    visual.output_tokens = True
    try:
        pooled, tokens = visual(images)
    finally:
        visual.output_tokens = before
    if visual.proj is not None:  # the tower returns patch tokens before the projection into the joint space
        tokens = tokens @ visual.proj
    return F.normalize(pooled, dim=-1), tokens


def encode_text_tokens(model, text):
    """(pooled normalised embedding, every position's projected feature B x T x D): the steps of open_clip 3.3's
    CLIP.encode_text, keeping the per-token outputs of ln_final through text_projection."""
    import torch.nn.functional as F
    from torch import nn

    from pipeline.train.clip import import_open_clip

    text_global_pool = import_open_clip().transformer.text_global_pool
    cast_dtype = model.transformer.get_cast_dtype()
    x = model.token_embedding(text).to(cast_dtype) + model.positional_embedding.to(cast_dtype)
    x = model.transformer(x, attn_mask=model.attn_mask)
    x = model.ln_final(x)
    pooled = text_global_pool(x, text, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))

    def project(features):
        if model.text_projection is None:
            return features
        if isinstance(model.text_projection, nn.Linear):
            return model.text_projection(features)
        return features @ model.text_projection

    return F.normalize(project(pooled), dim=-1), project(x)


def _encode_texts(model, groups: dict, tokens: bool) -> dict:
    """One text-tower pass over every group (name -> token ids N x L); features (and tokens) split back by name."""
    import torch

    if not groups:
        return {}
    ids = torch.cat(list(groups.values()))
    if tokens:
        pooled, per_token = encode_text_tokens(model, ids)
    else:
        pooled, per_token = model.encode_text(ids, normalize=True), None
    sizes = [len(v) for v in groups.values()]
    out = dict(zip(groups, pooled.split(sizes), strict=True))
    if per_token is not None:
        out.update({f"{name}_tokens": t for name, t in zip(groups, per_token.split(sizes), strict=True)})
    return out


def batch_losses(model, batch: dict, config, device, autocast=nullcontext, monitor: bool = True) -> dict:
    """The loss terms (losses.total_loss) for one collated batch (data.Collate) under a losses.LossConfig. Texts
    a weighted term needs get gradients; with `monitor`, the terms whose weight is 0 are still computed (no
    gradient) so the log shows them."""
    import torch

    from pipeline.train.losses import text_token_mask, total_loss

    images = batch["images"].to(device, non_blocking=True)
    captions = batch["captions"].to(device, non_blocking=True)
    positives = batch["positives"].to(device, non_blocking=True)
    negatives = batch["negatives"].to(device, non_blocking=True)
    b, k = negatives.shape[:2]
    fsc = config.recipe == "fsc"
    trained = {"caption": captions}
    monitored = {}
    (trained if config.hp_weight > 0 else monitored)["positive"] = positives
    (trained if config.hn_weight > 0 or config.negatives_in_contrastive else monitored)["negatives"] = \
        negatives.flatten(0, 1)
    with autocast():
        if fsc:
            image, image_tokens = encode_image_tokens(model, images)
            features = {"image": image, "image_tokens": image_tokens}
        else:
            features = {"image": model.encode_image(images, normalize=True)}
        features.update(_encode_texts(model, trained, tokens=fsc))
        if monitor:
            with torch.no_grad():
                features.update(_encode_texts(model, monitored, tokens=False))
    features = {name: value.float() for name, value in features.items()}  # the losses in fp32
    if "negatives" in features:
        features["negatives"] = features["negatives"].view(b, k, -1)
    if fsc:
        features["caption_mask"] = text_token_mask(captions)
        features["negative_tokens"] = features.pop("negatives_tokens").view(b, k, negatives.shape[-1], -1)
        features["negative_mask"] = text_token_mask(negatives)
    return total_loss(features, model.logit_scale.exp().float(), config)


def evaluate_losses(model, batch: dict, config, device="cpu") -> dict[str, float]:
    """The loss terms on a batch without training (eval mode, no gradient)."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return {name: float(value) for name, value in batch_losses(model, batch, config, device).items()}
    finally:
        model.train(was_training)


# ---------------------------------------------------------------------------------- optimizer and schedule


def make_optimizer(model, lr: float, weight_decay: float):
    """AdamW as open_clip's trainer: no weight decay on gains, biases and the logit scale."""
    import torch

    def exclude(name, p):
        return p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if exclude(n, p)], "weight_decay": 0.0},
              {"params": [p for n, p in named if not exclude(n, p)], "weight_decay": weight_decay}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-6)


def cosine_schedule(warmup: int, total: int):
    """LR multiplier at step s (open_clip's cosine_lr): linear warmup over `warmup` steps, then cosine to 0."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    return factor


def autocast_for(precision: str, device):
    import torch

    if precision == "fp32":
        return nullcontext
    dtype = torch.bfloat16 if precision == "amp_bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


# ------------------------------------------------------------------------------------------- the out folder


@contextmanager
def out_lock(out: str):
    """--out's lock (pipeline/folder_lock.py) for the whole run: a second trainer into the folder would interleave
    its log with this one's and write over its checkpoints. It is refused with one line before anything loads."""
    problem = output_folder_problem("--out", out)
    if problem:  # before the lock file is written into it
        raise UsageError(problem)
    try:
        fd = lock_local(out, holder_record("finetune"), "--out")
    except LockRefused as e:
        raise UsageError(str(e)) from None
    try:
        problem = planted_link("--out", out, files=["log.jsonl", "final.pt", "summary.json", "checkpoints/latest.pt"],
                               folders=["checkpoints"], file_names=OWN_FILES)
        if problem:
            raise UsageError(problem)
        yield
    finally:
        os.close(fd)


@contextmanager
def disk_full_is_one_line(out: str):
    """A full disk (or quota) while --out is written ends the run with one line (OutputNotWritten, exit 1)."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        raise OutputNotWritten(f"--out={out}: {e.strerror}; no partial file is left there and checkpoints/latest.pt "
                               f"(if any) is whole: make room and go on with --resume=latest") from None


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines for steps after `step` (a run that went on past its last checkpoint before stopping), and a
    line that a kill or a full disk cut short."""
    if not path.is_file():
        return
    kept = []
    for line in _log_lines(path):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and type(record.get("step")) is int and record["step"] <= step:
            kept.append(line + b"\n")
    write_own(path, b"".join(kept))


LOG_LINE_BYTES = 1 << 20  # a log line is under 1 KB; a longer one is damage, dropped without being held


def _log_lines(path: Path):
    """The lines of log.jsonl, each read with a bound: a 1 GiB line (a sparse file, no line break) is skipped in
    1 MiB pieces, never held whole."""
    with open(path, "rb") as f:
        while line := f.readline(LOG_LINE_BYTES + 1):
            if len(line) > LOG_LINE_BYTES:
                while line and not line.endswith(b"\n"):
                    line = f.readline(LOG_LINE_BYTES)
                continue
            yield line.rstrip(b"\n")


# ------------------------------------------------------------------------------------------------ training


def train(args) -> dict:
    """The run; main holds --out's lock around it (out_lock)."""
    import torch

    from pipeline.train.data import (
        Collate,
        TrainDataset,
        epoch_batches,
        load_rows,
        seed_of,
        type_filter,
    )

    device = torch.device(args.device)
    config = loss_config(args)
    out = Path(args.out)
    for path in remove_partial_files(out):
        print(f"removed {path}, left by a save that was cut short")
    resume = resume_path(args)
    state = read_training_checkpoint(resume) if resume is not None else None  # before the data and model load
    try:
        table, indices, counts, checked = load_rows(args.data, type_filter("--positive_types", args.positive_types),
                                           type_filter("--negative_types", args.negative_types))
    except (ValueError, FileNotFoundError, ConnectionError) as e:  # PublishError, datasets' not found / offline
        raise UsageError(str(e) if str(e).startswith("--") else f"--data: {e}") from None
    train_table = train_table_record(args.data, checked)
    steps_per_epoch = len(indices) // args.batch_size
    if steps_per_epoch == 0:
        raise UsageError(f"--batch_size: {args.batch_size} is more than the {len(indices)} rows kept")
    total_steps = steps_per_epoch * args.epochs
    stop = total_steps if args.max_steps is None else min(total_steps, args.max_steps)
    checkpoints = out / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)

    seed_everything(args.seed)
    model, train_transform, _, tokenizer = load_model(args.model, args.pretrained, args.device)
    check_model(model, config)
    try:
        dataset = TrainDataset(table, indices, args.images, train_transform, args.seed)
    except ValueError as e:  # ImageLookup: no such folder, shards that cannot be read
        raise UsageError(str(e)) from None
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_schedule(args.warmup_steps, total_steps))
    scaler = torch.amp.GradScaler("cuda") if args.precision == "amp" else None
    autocast = autocast_for(args.precision, device)
    step, skipped, skipped_ids = 0, Counter(), []
    log_path = out / "log.jsonl"
    if state is not None:
        check_resume_args(state, args, len(indices), train_table)
        restore(state, resume, model, optimizer, scheduler, scaler)
        step, skipped = state["step"], Counter(state["skipped"])
        del state  # its tensors are copied into the model and optimizer
        truncate_log(log_path, step)
        print(f"resumed from {resume} at step {step}")
    else:
        write_own(log_path, b"")
    print(f"{counts['kept']:,} of {counts['read']:,} rows kept; {steps_per_epoch:,} steps/epoch x {args.epochs} "
          f"epochs = {total_steps:,} steps; running to step {stop:,} on {device} ({args.precision})")

    def save(at: int) -> None:
        path = checkpoints / f"step_{at}.pt"
        atomic_save({"model": model.state_dict(), "quick_gelu": uses_quick_gelu(model),
                     "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler else None,
                     "step": at, "epoch": at // steps_per_epoch, "rng": rng_state(), "args": vars(args),
                     "rows_kept": len(indices), "skipped": dict(skipped), "train_table": train_table}, path)
        link_latest(path)
        prune_checkpoints(checkpoints, args.keep_checkpoints, at)

    collate = Collate(tokenizer)
    asked = missing = 0  # rows this run asked images for, and found none for (a resumed run counts from here)
    model.train()
    started, at_start, images_trained = time.monotonic(), step, 0
    steady = None  # (time, images trained) once WARMUP_STEPS_UNTIMED steps of this run are done
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    # O_NOFOLLOW: a link planted at log.jsonl since the start is refused, never appended to
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC), "a") as log:
        while step < stop:
            epoch, first = divmod(step, steps_per_epoch)
            batches = epoch_batches(len(dataset), args.batch_size, args.seed, epoch, start=first)[:stop - step]
            loader = torch.utils.data.DataLoader(
                dataset, batch_sampler=batches, collate_fn=collate, num_workers=args.workers,
                pin_memory=device.type == "cuda",
                # DataLoader draws its workers' base seed from this generator, else from the global RNG
                generator=torch.Generator().manual_seed(seed_of(args.seed, "loader", epoch)))
            for batch in loader:
                skipped.update(batch["skipped"])
                skipped_ids.extend(batch["skipped_ids"][:max(0, 5 - len(skipped_ids))])
                asked += batch["size"] + len(batch["skipped_ids"])
                missing += len(batch["skipped_ids"])
                check_missing_images(batch, step + 1, missing, asked, args.max_missing_images)
                lr = optimizer.param_groups[0]["lr"]
                record = {"step": step + 1, "epoch": epoch, "lr": lr, "batch": batch["size"]}
                if batch["size"]:
                    terms = train_step(model, batch, config, device, autocast, optimizer, scaler, args.grad_clip_norm)
                    if not math.isfinite(terms["total"]) and scaler is None:  # fp16: GradScaler skips the step
                        raise TrainingDiverged(f"loss is not finite at step {step + 1} ({terms}); "
                                               f"{diverged_hint(checkpoints)}")
                    # a finite loss can still give gradients or an update that overflow the weights
                    diverged = non_finite_parameters(model)
                    if diverged:
                        raise TrainingDiverged(f"{len(diverged)} weight tensors are not finite after step {step + 1} "
                                               f"(e.g. {diverged[0]}), so no checkpoint of it is written; "
                                               f"{diverged_hint(checkpoints)}")
                    record.update(terms)
                    images_trained += batch["size"]
                scheduler.step()
                step += 1
                if step - at_start == WARMUP_STEPS_UNTIMED:
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    steady = (time.monotonic(), images_trained)
                record["skipped"] = sum(skipped.values())
                log.write(json.dumps(record) + "\n")
                if step % args.log_every == 0 or step == stop:
                    log.flush()
                    rate = (time.monotonic() - started) / (step - at_start)
                    values = " ".join(f"{k} {record[k]:.4f}" for k in ("clip", "hn", "hp", "local", "total")
                                      if k in record)
                    print(f"step {step}/{stop} epoch {epoch} lr {lr:.3g} {values or 'empty batch'} "
                          f"(batch {batch['size']}, images skipped so far {record['skipped']}) {rate:.2f}s/step",
                          flush=True)
                if (args.save_every and step % args.save_every == 0) or step == stop:
                    log.flush()
                    save(step)

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    ended = time.monotonic()
    seconds = ended - started  # this run's steps only (data loading included, model loading not)
    steady_rate = round((images_trained - steady[1]) / (ended - steady[0]), 2) \
        if steady is not None and ended > steady[0] and images_trained > steady[1] else None
    final = out / "final.pt"
    atomic_save({"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "step": step,
                 "quick_gelu": uses_quick_gelu(model), "args": vars(args), "train_table": train_table}, final)
    summary = {"rows_read": counts["read"], "rows_kept": counts["kept"],
               "rows_filtered": {k: v for k, v in counts.items() if k not in ("read", "kept")},
               "steps": step, "steps_per_epoch": steps_per_epoch, "total_steps": total_steps,
               "images_skipped": dict(skipped), "images_skipped_examples": skipped_ids, "final": str(final),
               "device": str(device), "precision": args.precision, "train_seconds": round(seconds, 3),
               "images_per_second": round(images_trained / seconds, 2) if seconds > 0 else None,
               # after the first steps (CUDA kernels chosen, loader workers started): what a long run sustains
               "images_per_second_steady": steady_rate, "steady_after_steps": WARMUP_STEPS_UNTIMED,
               "peak_gpu_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None}
    write_own(out / "summary.json", json.dumps(summary, indent=2).encode())
    if skipped:
        print("images skipped (rows dropped from their batches): "
              + ", ".join(f"{reason} {n:,}" for reason, n in sorted(skipped.items()))
              + (f"; e.g. {', '.join(skipped_ids)}" if skipped_ids else ""))
    print(f"done: {step} steps; final weights {final}")
    return summary


def train_table_record(data: str, table) -> dict:
    """What identifies the train table a run reads, for its checkpoints: {data, fingerprint, shards}, the
    fingerprint (tables.load.table_fingerprint) of the shards' sha256s that its report.json or manifest records,
    those the rows were checked against as they were read (`table`, the LocalTable load_rows read under). None for a
    Hub repository or a published folder with no manifest, which record none. The evaluator's held_out view takes
    the table at `data` for the one trained on only when its fingerprint is this one
    (pipeline/train/replace_views.py)."""
    return {"data": data, "fingerprint": table.fingerprint if table is not None else None,
            "shards": len(table.shards) if table is not None else None}


def check_missing_images(batch: dict, step: int, missing_so_far: int, asked_so_far: int, allowed: float) -> None:
    """ImagesMissing when more than `allowed` of this step's rows, or of the run's rows so far, have no image."""
    missing, asked = len(batch["skipped_ids"]), batch["size"] + len(batch["skipped_ids"])
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(batch["skipped"].items()))
    examples = ", ".join(batch["skipped_ids"][:3])
    if missing > allowed * asked:
        raise ImagesMissing(f"--max_missing_images: {missing} of step {step}'s {asked} rows have no usable image "
                            f"({reasons}; e.g. {examples}); check --images, or allow more with --max_missing_images")
    if missing_so_far > allowed * asked_so_far:
        raise ImagesMissing(f"--max_missing_images: {missing_so_far} of the {asked_so_far} rows so far have no usable "
                            f"image (e.g. {examples or 'see summary'}); check --images, or allow more")


def diverged_hint(checkpoints: Path) -> str:
    latest = checkpoints / "latest.pt"
    where = f"resume from {latest}" if latest.is_file() else "start again"
    return f"lower --lr or the loss weights, or {where} with other settings"


def non_finite_parameters(model) -> list[str]:
    """Names of the parameters holding a NaN or an infinity (one device sync for all of them)."""
    import torch

    named = list(model.named_parameters())
    finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in named]).tolist()
    return [name for (name, _), ok in zip(named, finite, strict=True) if not ok]


def train_step(model, batch, config, device, autocast, optimizer, scaler, grad_clip_norm) -> dict[str, float]:
    import torch

    optimizer.zero_grad(set_to_none=True)
    terms = batch_losses(model, batch, config, device, autocast)
    total = terms["total"]
    if scaler is not None:
        scaler.scale(total).backward()
        if grad_clip_norm:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip_norm)
        scaler.step(optimizer)
        scaler.update()
    else:
        total.backward()
        if grad_clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip_norm)
        optimizer.step()
    with torch.no_grad():  # as open_clip: keep the temperature in [1, 100]
        model.logit_scale.clamp_(0, math.log(100))
    return {name: float(value.detach()) for name, value in terms.items()}


def main(argv: list[str] | None = None) -> int:
    from pipeline.train.clip import TrainDependencyMissing, import_open_clip

    argv = sys.argv[1:] if argv is None else argv
    try:
        import_open_clip()  # torch, torchvision, open_clip, or one line naming the extra to install
        args = parse_args(argv)
        with out_lock(args.out), disk_full_is_one_line(args.out):
            train(args)
    except (UsageError, TrainDependencyMissing) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (TrainingDiverged, ImagesMissing, OutputNotWritten) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from pipeline.urls import redact_output

    redact_output()  # before anything prints: no secret of a flag reaches the terminal
    sys.exit(main())
