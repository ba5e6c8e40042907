"""Image-text scoring shared by the evaluator's suites: a DataLoader dataset of row images whose problems become
skips (never a crash), its collate function, autocast for the amp precisions, and the generic "one image, several
captions" scorer the ranking suites (SugarCrepe, ARO, VL-CheckList) use.

Scores are cosine similarities of L2-normalised embeddings (no logit scale), as in REPLACE/SWAP.
"""
from __future__ import annotations

import contextlib
import sys
import time

import numpy as np

from pipeline.publish.images import BadBox, ImageTooLarge
from pipeline.train.images import ImageLookup, ImageMissing, ImageOutsideRoot

PROGRESS_SECONDS = 10.0
INPUT_DTYPES = {"fp16": "float16", "pure_fp16": "float16", "bf16": "bfloat16", "pure_bf16": "bfloat16"}


class RowImages:
    """Map-style dataset for torch's DataLoader: position -> (position, image tensor or None, skip or None).
    Image problems become a skip (reason, detail), so one bad file never stops the run."""

    def __init__(self, rows: list[dict], lookup: ImageLookup, transform):
        self.rows, self.lookup, self.transform = rows, lookup, transform

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i: int):
        from PIL import Image

        row = self.rows[i]
        try:
            image = self.lookup(row, crop=True)
        except ImageOutsideRoot as e:
            return i, None, ("path_outside_image_root", str(e))
        except ImageMissing as e:
            return i, None, ("image_missing", str(e))
        except ImageTooLarge as e:
            return i, None, ("image_too_large", str(e))
        except BadBox as e:
            return i, None, ("bad_box", str(e))
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            return i, None, ("image_unreadable", f"{type(e).__name__}: {e}")
        if min(image.size) == 0:  # a box of zero width or height after rounding
            return i, None, ("empty_crop", f"crop of size {image.size}")
        return i, self.transform(image), None


def collate(items):
    import torch

    kept = [(i, tensor) for i, tensor, skip in items if skip is None]
    images = torch.stack([tensor for _, tensor in kept]) if kept else None
    return [i for i, _ in kept], images, [(i, *skip) for i, _, skip in items if skip is not None]


def autocast(precision: str, device: str):
    import torch

    if precision.startswith("amp"):
        return torch.autocast(device_type=device, dtype=torch.bfloat16 if "bf16" in precision else torch.float16)
    return contextlib.nullcontext()


def input_dtype(precision: str):
    import torch

    name = INPUT_DTYPES.get(precision)
    return getattr(torch, name) if name else None


def score_options(clip, tokenizer, transform, lookup: ImageLookup, rows: list[dict], *, device: str = "cpu",
                  precision: str = "fp32", batch_size: int = 64, workers: int = 0, label: str = ""):
    """([(row position, [s(option) for option in row["options"]])], [(row position, reason, detail)]).

    Each row has an image (ImageLookup's image_path / file_name, an ARO box when it has one) and its caption
    options; the suites decide which option is the correct one."""
    import torch
    import torch.nn.functional as F

    loader = torch.utils.data.DataLoader(RowImages(rows, lookup, transform), batch_size=batch_size,
                                         num_workers=workers, collate_fn=collate, shuffle=False,
                                         pin_memory=device == "cuda")
    scored, skipped = [], []
    started = last = time.monotonic()
    clip.eval()
    with torch.no_grad():
        for positions, images, skips in loader:
            skipped += skips
            if positions:
                texts = [t for i in positions for t in rows[i]["options"]]
                with autocast(precision, device):
                    image_emb = clip.encode_image(images.to(device=device, dtype=input_dtype(precision)))
                    text_emb = clip.encode_text(tokenizer(texts).to(device))
                image_emb = F.normalize(image_emb.float(), dim=-1)
                text_emb = F.normalize(text_emb.float(), dim=-1).cpu()
                image_emb = image_emb.cpu()
                start = 0
                for k, i in enumerate(positions):
                    n = len(rows[i]["options"])
                    scores = (text_emb[start:start + n] @ image_emb[k]).tolist()
                    start += n
                    if np.isfinite(scores).all():
                        scored.append((i, scores))
                    else:  # fp16 overflow and the like: counted, not fed to the figures
                        skipped.append((i, "non_finite_score", f"scores={scores}"))
            if time.monotonic() - last >= PROGRESS_SECONDS:
                last = time.monotonic()
                done = len(scored) + len(skipped)
                print(f"{label}: {done}/{len(rows)} rows ({done / (last - started):.1f} rows/s)", file=sys.stderr)
    return scored, skipped
