"""Asking the LLM for one batch of prompts, with validation and sampled retries; no Beam.

A prompt element is a dict with key (cache key), prompt (rendered), caption, kind (a positive or LLM negative type),
max_new_tokens and attempts (earlier attempts from the cache, if any). Each attempt is a Generation as JSON
plus the sampling it used. Attempt 0 uses the configured sampling (greedy by default); attempts 1..retries
re-ask rejected prompts with sampling at retry_temperature and a seed derived from (key, attempt).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict

from pipeline.llm.engines import Sampling


def retry_seed(key: str, attempt: int) -> int:
    return int(hashlib.sha256(f"{key}\x1f{attempt}".encode()).hexdigest()[:8], 16)


def first_accepted(element: dict, attempts: list[dict], validator) -> int | None:
    for i, attempt in enumerate(attempts):
        if attempt["finish_reason"] != "error" and validator(element, attempt).ok:
            return i
    return None


def answer_batch(batch: list[dict], engine, base: Sampling, retries: int, retry_temperature: float,
                 validator) -> tuple[list[dict], int]:
    """(one cache entry per element, number of prompts sent to the engine)."""
    attempts = {e["key"]: [a for a in e.get("attempts", []) if a["finish_reason"] != "error"] for e in batch}
    failed = set()  # a request that failed after the engine's own retries: not asked again in this run
    sent = 0
    for round_ in range(retries + 1):
        todo = [e for e in batch if e["key"] not in failed and len(attempts[e["key"]]) == round_
                and first_accepted(e, attempts[e["key"]], validator) is None]
        if not todo:
            continue
        params = []
        for e in todo:
            if round_ == 0:
                params.append(Sampling(e["max_new_tokens"], base.temperature, base.top_p,
                                       retry_seed(e["key"], 0) if base.temperature > 0 else None))
            else:
                params.append(Sampling(e["max_new_tokens"], retry_temperature, base.top_p,
                                       retry_seed(e["key"], round_)))
        generations = engine.generate([e["prompt"] for e in todo], params)
        sent += len(todo)
        for e, p, g in zip(todo, params, generations, strict=True):
            attempts[e["key"]].append({**g.to_json(), "sampling": asdict(p)})
            if g.finish_reason == "error":
                failed.add(e["key"])
    entries = [{"key": e["key"], "caption": e["caption"], "kind": e["kind"],
                "attempts": attempts[e["key"]], "failed": e["key"] in failed} for e in batch]
    return entries, sent
