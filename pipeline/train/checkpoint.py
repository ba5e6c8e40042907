"""The trainer's checkpoints (pipeline/train/finetune.py): written whole or not at all, read back without running
code, and checked before a resumed run trusts them.

- Writing: torch.save to a hidden temporary name beside the target, synced, then renamed over it; a save that
  fails (a full disk) removes its temporary file, and a run removes any that a killed one left, so a partial
  file never fills the disk nor stands where a checkpoint is read.
- Reading: pipeline.train.clip.load_checkpoint_file (weights_only: tensors and plain values). So everything a
  checkpoint holds is in such forms: the RNG states as tensors, lists, ints and floats, the args as a dict.
- Resuming: a file that is not a training checkpoint (final.pt, open_clip's own), that is damaged, or whose
  weights or optimizer state do not fit the model is one line naming --resume, never a traceback.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

from pipeline.folder_lock import open_new
from pipeline.train.clip import CheckpointError, UsageError, one_line, read_checkpoint

# Resuming with a different value of these would change which rows a step sees or the schedule's length.
SAME_ON_RESUME = ("model", "seed", "batch_size", "epochs", "positive_types", "negative_types")
NOT_COMPARED = ("resume", "max_steps", "save_every", "log_every", "workers", "keep_checkpoints", "out", "device",
                "images", "pretrained")
# What save() in finetune.train writes besides "scaler", "epoch" and "quick_gelu".
TRAINING_KEYS = ("model", "optimizer", "scheduler", "step", "rng", "args", "rows_kept", "skipped")


# ------------------------------------------------------------------------------------------------ RNG states

def rng_state() -> dict:
    """The process's RNG states in forms weights_only loads: numpy's as [name, keys tensor, pos, has_gauss,
    cached_gaussian], Python's as its tuple of ints."""
    import numpy as np
    import torch

    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    name, keys, pos, has_gauss, cached = state["numpy"]
    torch.set_rng_state(state["torch"])
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------------- writing

def atomic_save(obj, path: Path) -> None:
    """`path` holds obj whole, or what it held before: nothing partial is left, even when the save fails."""
    import torch

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        # a new file (open_new: a link planted at the temporary name is removed, never written through); through a
        # file object a full disk is OSError(ENOSPC), not torch's RuntimeError
        with os.fdopen(open_new(tmp), "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())  # renamed only once on disk: a crash leaves the old file, never a truncated one
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def link_latest(path: Path) -> None:
    """checkpoints/latest.pt -> `path`, atomically; a hard link where the filesystem allows (no second copy)."""
    latest = path.with_name("latest.pt")
    tmp = path.with_name(".latest.pt.tmp")
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(path, tmp)
        except OSError:
            with open(path, "rb") as source, os.fdopen(open_new(tmp), "wb") as copy:
                shutil.copyfileobj(source, copy)
        os.replace(tmp, latest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# The files a run writes in --out: checkpoints, and the temporary names they are saved under (atomic_save). Entries
# of these names must be files (finetune's start-up check): a folder there would stop a run at its first save.
OWN_FILES = re.compile(r"checkpoints/\.?step_[0-9]+\.pt(\.tmp)?|checkpoints/\.latest\.pt\.tmp|\.final\.pt\.tmp")
STEP_FILE = re.compile(r"step_([1-9][0-9]*)\.pt")  # the names save gives: ASCII digits, no leading 0


def prune_checkpoints(folder: Path, keep: int, step: int) -> None:
    """Removes all but the `keep` latest step_<N>.pt of this run, just saved at `step`: a name save gives, N at
    most `step`. Files of other names (a user's step_final.pt, step_１.pt) and steps past this one (a user's
    step_99999999999999999999.pt, which would otherwise count as the latest) stay."""
    if keep <= 0:
        return
    steps = sorted((n, p) for p in folder.glob("step_*.pt")
                   if (m := STEP_FILE.fullmatch(p.name)) and (n := int(m.group(1))) <= step)
    for _, old in steps[:-keep]:
        old.unlink()


def remove_partial_files(out: Path) -> list[Path]:
    """The temporary files of saves that a killed run left in --out (under its lock, so no save is running)."""
    checkpoints = out / "checkpoints"
    named = [out / ".final.pt.tmp", checkpoints / ".latest.pt.tmp",
             *(p for p in checkpoints.glob(".step_*.pt.tmp") if STEP_FILE.fullmatch(p.name[1:-len(".tmp")]))]
    found = [path for path in named if os.path.lexists(path)]
    for path in found:
        path.unlink()
    return found


# -------------------------------------------------------------------------------------------------- resuming

def resume_path(args) -> Path | None:
    if not args.resume:
        return None
    if args.resume == "latest":
        latest = Path(args.out) / "checkpoints" / "latest.pt"
        if not latest.is_file():
            print(f"--resume latest: no {latest}; starting from the beginning")
            return None
        return latest
    path = Path(args.resume)
    if not path.is_file():
        raise UsageError(f"--resume: no such checkpoint {args.resume}")
    return path


def read_training_checkpoint(path: Path) -> dict:
    """The checkpoint a run resumes from, loaded safely and checked to be one that train() wrote."""
    try:
        state = read_checkpoint(str(path))
    except CheckpointError as e:
        raise UsageError(f"--resume: {e}") from None
    missing = [k for k in TRAINING_KEYS if k not in state]
    if missing:
        raise UsageError(f"--resume: {path} is not a training checkpoint of pipeline.train.finetune (it has no "
                         f"{', '.join(missing)}); final.pt holds weights only: resume from checkpoints/latest.pt "
                         f"or a step_N.pt, or start from its weights with --pretrained={path}")
    if not (type(state["step"]) is int and state["step"] >= 0 and type(state["rows_kept"]) is int
            and isinstance(state["args"], dict) and isinstance(state["skipped"], dict)):
        raise UsageError(f"--resume: {path}: its step, rows_kept, args or skipped are not what the trainer writes")
    return state


def check_resume_args(saved: dict, args, rows_kept: int, train_table: dict | None = None) -> None:
    if saved["rows_kept"] != rows_kept:
        raise UsageError(f"--data: {rows_kept:,} rows kept but the checkpoint was trained on {saved['rows_kept']:,}; "
                         f"a resumed run must see the same rows")
    if isinstance(saved.get("train_table"), dict):  # checkpoints from before the record have nothing to compare
        before, now = saved["train_table"].get("fingerprint"), (train_table or {}).get("fingerprint")
        if before != now or (before is None and saved["train_table"].get("data") != args.data):
            # a table that records no fingerprint (the Hub, a folder without manifest) is taken for the one trained
            # on only under the same name, and never for one that recorded a fingerprint
            said = lambda fp: f"fingerprint {fp[:12]}…" if fp else "no fingerprint"  # noqa: E731
            raise UsageError(f"--data: {args.data} is not the train table the checkpoint was trained on (its shards' "
                             f"{said(now)}, the checkpoint recorded {saved['train_table'].get('data')!r} with "
                             f"{said(before)}); a resumed run must see the same rows")
    saved = saved["args"]
    for key in SAME_ON_RESUME:
        if saved.get(key) != getattr(args, key):
            raise UsageError(f"--{key}: {getattr(args, key)!r} but the checkpoint was trained with {saved.get(key)!r}; "
                             f"a resumed run must keep it")
    changed = [k for k in vars(args) if k not in SAME_ON_RESUME + NOT_COMPARED and saved.get(k) != getattr(args, k)]
    if changed:
        print("note: resuming with changed " + ", ".join(f"--{k} {saved.get(k)!r} -> {getattr(args, k)!r}"
                                                      for k in changed))


def restore(state: dict, path: Path, model, optimizer, scheduler, scaler) -> None:
    """Weights, optimizer, schedule, scaler and RNG from `state`; one line when they do not fit this run's model
    (another architecture or config under the same --model name, a state of another shape)."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise UsageError(f"--resume: checkpoint {path} does not fit this run's model and optimizer "
                         f"({one_line(e)})") from None
