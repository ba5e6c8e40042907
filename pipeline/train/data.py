"""Training batches: (image, caption, hard positive, hard negatives) from the released `train` table.

Rows come from `load_table(--data, "train")` (a run folder, a published folder or a Hub repository), kept when
their positive_type / negative_type is in --positive_types / --negative_types; images from
`ImageLookup(--images)` (the images stage's shards, the corpus's own img2dataset shards by the row's key, or a
local COCO folder). A row whose image is missing (no key in the shards included), unreadable, too large to decode
(pixels x channels past the bound, read from its header) or named outside --images (absolute, "..") is dropped
from its batch and counted by reason, never an error.

Determinism (what makes `--resume` exact): the order of an epoch is a permutation drawn from (seed, epoch); a
step's batch is fixed by its index, so a resumed run starts at the right batch without replaying the earlier
ones; each row's augmentation draws from a torch RNG seeded with (seed, epoch, example_id), inside
`torch.random.fork_rng`, so it depends neither on worker count or order nor on where a run was resumed, and it
leaves the training process's own RNG untouched.
"""
from __future__ import annotations

import hashlib
from collections import Counter

from pipeline.publish.images import MAX_PIXEL_VALUES, ImageTooLarge

ALL = "all"


def seed_of(*parts) -> int:
    """A 63-bit seed from any parts (stable across processes and Python runs, unlike hash())."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def type_filter(flag: str, value: str) -> set[str] | None:
    """None (keep every row) for "all", else the set of the comma-separated names."""
    names = {n.strip() for n in value.split(",") if n.strip()}
    if not names:
        raise ValueError(f"{flag}: empty; give type names (e.g. replace,swap) or all")
    return None if names == {ALL} else names


def load_rows(data: str, positive_types: set[str] | None, negative_types: set[str] | None, **load_kwargs):
    """(the train table as a datasets.Dataset, row numbers kept by the type filters, counts by reason, its
    LocalTable: the check its rows were read under, None from the Hub)."""
    import numpy as np

    from pipeline.tables.load import load_checked

    table, checked = load_checked(data, "train", **load_kwargs)
    missing = {"caption", "hard_positive", "hard_negative", "positive_type", "negative_type",
               "example_id"} - set(table.column_names)
    if missing:
        raise ValueError(f"--data: {data} has no column {', '.join(sorted(missing))} in its train table")
    keep = np.ones(len(table), dtype=bool)
    counts = Counter(read=len(table))
    for column, wanted, flag in (("positive_type", positive_types, "--positive_types"),
                                 ("negative_type", negative_types, "--negative_types")):
        if wanted is None:
            continue
        values = np.asarray(table[column], dtype=object)
        matches = np.isin(values, list(wanted))
        counts[f"{column} not in {flag}"] = int((keep & ~matches).sum())
        keep &= matches
        if not keep.any():
            raise ValueError(f"{flag}: no row left (types in {data}: {', '.join(sorted(set(values)))})")
    indices = np.flatnonzero(keep)
    counts["kept"] = len(indices)
    return table, indices, counts, checked


class TrainDataset:
    """Map-style dataset: item (epoch, i) is row indices[i] with its image transformed under the seed of
    (seed, epoch, example_id); a row without a usable image gives {"skip": reason}."""

    def __init__(self, table, indices, images: str, transform, seed: int, max_pixel_values: int = MAX_PIXEL_VALUES):
        from pipeline.train.images import ImageLookup

        self.table, self.indices, self.images = table, indices, images
        self.transform, self.seed = transform, seed
        # Checks --images and indexes its shards up front, once: forked DataLoader workers share the index (no shard
        # file stays open to share a position with them: image_shards.py).
        self._lookup = ImageLookup(images, max_pixel_values)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, key: tuple[int, int]) -> dict:
        import torch

        from pipeline.train.images import ImageMissing, ImageOfAnotherRow, ImageOutsideRoot

        epoch, i = key
        row = self.table[int(self.indices[i])]
        try:
            image = self._lookup(row, crop=False)
        except ImageOutsideRoot:  # never opened
            return {"skip": "path outside image root", "example_id": row["example_id"]}
        except ImageOfAnotherRow:  # its key finds another sample's image: never trained on as this row's
            return {"skip": "image of another row", "example_id": row["example_id"]}
        except ImageMissing:
            return {"skip": "image missing", "example_id": row["example_id"]}
        except ImageTooLarge:  # never decoded: its header says it holds more than the bound
            return {"skip": "image too large", "example_id": row["example_id"]}
        except (OSError, ValueError, SyntaxError):  # PIL: truncated/undecodable files
            return {"skip": "image unreadable", "example_id": row["example_id"]}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_of(self.seed, epoch, row["example_id"]))
            pixels = self.transform(image)
        return {"image": pixels, "caption": row["caption"], "hard_positive": row["hard_positive"],
                "hard_negatives": [row["hard_negative"]], "example_id": row["example_id"]}


def epoch_order(n: int, seed: int, epoch: int):
    """The epoch's permutation of range(n), from (seed, epoch) alone."""
    import torch

    return torch.randperm(n, generator=torch.Generator().manual_seed(seed_of(seed, "order", epoch))).tolist()


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, start: int = 0) -> list[list[tuple[int, int]]]:
    """Batches start.. of the epoch as lists of dataset keys (epoch, i); the last partial batch is dropped
    (as open_clip's trainer does: a tiny batch gives a near-trivial contrastive loss)."""
    order = epoch_order(n, seed, epoch)
    return [[(epoch, i) for i in order[b * batch_size:(b + 1) * batch_size]] for b in range(start, n // batch_size)]


class Collate:
    """Stacks the usable items and tokenizes their texts; reports the dropped ones by reason."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, items: list[dict]) -> dict:
        import torch

        kept = [item for item in items if "skip" not in item]
        skipped = Counter(item["skip"] for item in items if "skip" in item)
        batch = {"skipped": dict(skipped), "skipped_ids": [item["example_id"] for item in items if "skip" in item],
                 "example_ids": [item["example_id"] for item in kept], "size": len(kept)}
        if not kept:
            return batch
        k = len(kept[0]["hard_negatives"])
        batch["images"] = torch.stack([item["image"] for item in kept])
        batch["captions"] = self.tokenizer([item["caption"] for item in kept])
        batch["positives"] = self.tokenizer([item["hard_positive"] for item in kept])
        negatives = self.tokenizer([text for item in kept for text in item["hard_negatives"]])
        batch["negatives"] = negatives.view(len(kept), k, -1)
        return batch
