"""--limit as a seeded random sample: the first N rows of a set are often one subset only (the first 500 of
REPLACE are all attribute rows), so a limited run draws N of each set, the same N for the same seed."""
from __future__ import annotations

import random
from collections.abc import Sequence


def limited_indices(n: int, limit: int | None, seed: int) -> list[int]:
    """The positions of `limit` of n items, drawn with random.Random(seed), in their order; all when limit is None
    or at least n."""
    if limit is None or limit >= n:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), limit))


def limited(items: Sequence, limit: int | None, seed: int) -> list:
    return [items[i] for i in limited_indices(len(items), limit, seed)]
