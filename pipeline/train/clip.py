"""open_clip models, tokenizers and image transforms, loaded the same way by the trainer and the evaluator.

`--model` is an open_clip architecture name (ViT-B-32, ...) or `hardpos-tiny` (model_configs/: a 3M-parameter
config for tests and smoke runs); `--pretrained` is an open_clip tag (openai, laion2b_s34b_b79k, ...), a
checkpoint path (ours or open_clip's), or empty for random weights. Checkpoint files are loaded with torch's
weights_only: tensors and plain values, never pickled code, which a checkpoint from elsewhere may hold.

torchvision comes through pipeline/torchvision_compat.py, which imports a CUDA build of it on CPU-only machines
(without its compiled ops, which CLIP never uses).
"""
from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path

from pipeline.torchvision_compat import import_torchvision

INSTALL_HINT = "pip install -e '.[train]'"
CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"


class TrainDependencyMissing(RuntimeError):
    pass


class UsageError(ValueError):
    """A bad flag or input path of the train/evaluate/patching CLIs: reported as one line naming it, exit 2.
    (Not pipeline.options.UsageError: that module imports Beam, which train/ does not need.)"""


class CheckpointError(UsageError):
    """A checkpoint file that cannot be loaded safely (empty, damaged, foreign, holding more than tensors and plain
    values): one line naming the file; the CLIs put the flag that gave it first."""


def import_open_clip():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise TrainDependencyMissing(f"training and evaluation need torch ({INSTALL_HINT}): {e}") from None
    if import_torchvision() is None:
        raise TrainDependencyMissing(f"open_clip needs torchvision ({INSTALL_HINT})")
    try:
        import open_clip
    except ImportError as e:
        raise TrainDependencyMissing(f"training and evaluation need open_clip ({INSTALL_HINT}): {e}") from None
    if "hardpos-tiny" not in open_clip.list_models():
        open_clip.add_model_config(CONFIG_DIR)
    return open_clip


def resolve_pretrained(model: str, pretrained: str | None) -> str:
    """--pretrained as given, or, not given, "openai" where open_clip has OpenAI's weights for the model, else ""
    (random weights: hardpos-tiny, which has none)."""
    if pretrained is not None:
        return pretrained
    return "openai" if "openai" in import_open_clip().list_pretrained_tags_by_model(model) else ""


def create(model: str, pretrained: str | None, device: str = "cpu", precision: str = "fp32"):
    """(model, train transform, eval transform, tokenizer). `pretrained` may be an open_clip tag or a file.

    OpenAI's CLIP weights were trained with QuickGELU, which open_clip's plain configs (ViT-B-32) do not use:
    with the `openai` tag, or a checkpoint of ours that records quick_gelu, the model is built with it, so
    `--model=ViT-B-32 --pretrained=openai` and its finetuned checkpoints compute what they were trained to."""
    open_clip = import_open_clip()
    if model not in open_clip.list_models():
        raise ValueError(f"--model: unknown open_clip model {model!r} (e.g. ViT-B-32, hardpos-tiny)")
    weights = pretrained or None
    checkpoint = read_checkpoint(weights) if weights and Path(weights).is_file() else None
    quick_gelu = weights == "openai" or bool(checkpoint and checkpoint.get("quick_gelu"))
    # open_clip builds the model without weights and says "initialized randomly"; with a checkpoint that is
    # untrue (its weights are loaded right after), so the line is held back then and kept otherwise.
    quiet = _drop_random_init_warning() if checkpoint is not None else contextlib.nullcontext()
    with quiet:
        clip, train_transform, eval_transform = open_clip.create_model_and_transforms(
            model, pretrained=None if checkpoint is not None else weights, device=device, precision=precision,
            **({"force_quick_gelu": True} if quick_gelu else {}))
    if checkpoint is not None:
        clip.load_state_dict(checkpoint["model"])
        logging.getLogger("hardpos").info("loaded weights for %s from %s", model, weights)
    return clip, train_transform, eval_transform, open_clip.get_tokenizer(model)


RANDOM_INIT_WARNING = "No pretrained weights loaded for model"


@contextlib.contextmanager
def _drop_random_init_warning():
    """open_clip's "No pretrained weights loaded ... initialized randomly" (logged on the root logger) is
    dropped while the model is built; every other record passes."""
    def keep(record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(RANDOM_INIT_WARNING)

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def uses_quick_gelu(clip) -> bool:
    """Whether the model's activations are QuickGELU: saved with our checkpoints (an activation has no weights,
    so a state dict alone cannot tell)."""
    return any(type(m).__name__ == "QuickGELU" for m in clip.modules())


def one_line(e: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line (torch's messages run over several), at most `limit` characters, its URLs
    redacted before the cut."""
    from pipeline.urls import cut

    text = " ".join(str(e).split())
    return cut(f"{type(e).__name__}: {text}" if text else type(e).__name__, limit)


def load_checkpoint_file(path: str, mmap: bool = False):
    """What torch.save wrote to `path`, loaded with weights_only=True: tensors, containers and plain values, never
    code (a pickled os.system is refused, not run). CheckpointError, one line, for anything else: an empty,
    truncated, foreign or hostile file. mmap: tensors are mapped, not read (zip checkpoints; others are read)."""
    import pickle
    import zipfile

    import torch

    if Path(path).stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))
        if found:
            raise CheckpointError(f"checkpoint {path} holds a pickled {found[1]}, not only tensors and plain values: "
                                  f"refused, as loading it could run code") from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(e))
        raise CheckpointError(f"checkpoint {path} is damaged or not a torch checkpoint (its pickle does not parse: "
                              f"{detail[1] if detail else one_line(e)})") from None
    except Exception as e:  # noqa: BLE001 - a damaged file's bytes raise any kind: EOFError, MemoryError, RuntimeError
        raise CheckpointError(f"checkpoint {path} is damaged or not a torch checkpoint ({one_line(e)})") from None


def read_checkpoint(path: str, mmap: bool = False) -> dict:
    """Our checkpoints ({"model": state_dict, "quick_gelu", ...}) or a bare state dict / open_clip checkpoint,
    as {"model": state_dict, ...}, loaded safely (load_checkpoint_file). CheckpointError when it holds no state
    dict of named tensors."""
    import torch

    state = load_checkpoint_file(path, mmap)
    if isinstance(state, dict) and "model" in state:
        checkpoint = dict(state)
    elif isinstance(state, dict) and "state_dict" in state:
        checkpoint = {"model": state["state_dict"]}
    else:
        checkpoint = {"model": state}
    weights = checkpoint["model"]
    if not isinstance(weights, dict) or not weights or \
            not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
        raise CheckpointError(f"checkpoint {path} holds no state dict (names -> tensors) of a model")
    checkpoint["model"] = {k.removeprefix("module."): v for k, v in weights.items()}
    return checkpoint
