"""The Beam RunInference ModelHandler that runs an engine (the only Beam-facing part of llm/).

The model loads once per worker process, or once per worker machine for vLLM (`large_model=True`: Beam's
share_model_across_processes keeps one copy that every SDK process on the worker calls into), so a Dataflow
GPU worker loads the 70B model once. Each element is a batch of prompts (made from the prompts, not from timing:
stages/llm_rewrites.prompt_batches); it is answered (generate, validate, sampled retries), written to the cache as
one file, and returned as PredictionResult(the prompts, their cache entries).
"""
from __future__ import annotations

from collections.abc import Sequence

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from pipeline.llm.cache import write_entries
from pipeline.llm.engines import EngineConfig, Sampling, make_engine
from pipeline.llm.generate import answer_batch, first_accepted


class HardPositiveHandler(ModelHandler):
    def __init__(self, config: EngineConfig, cache_dir: str, base: Sampling, retries: int, retry_temperature: float,
                 validator_factory, batch_size: int, table: str = "hard_positives"):
        # Each element is a batch of prompts already (stages/llm_rewrites.prompt_batches): one element per call, so
        # Beam's timing-based batching never changes which prompts are generated together.
        super().__init__(min_batch_size=1, max_batch_size=1, large_model=config.engine == "vllm")
        self.config, self.cache_dir, self.base = config, cache_dir, base
        self.retries, self.retry_temperature = retries, retry_temperature
        self.validator_factory = validator_factory
        self.table = table
        self._validator = None

    def load_model(self):
        return _LazyEngine(self.config)

    def run_inference(self, batch: Sequence[list[dict]], model, inference_args=None):
        return [PredictionResult(prompts, self._answer(prompts, model)) for prompts in batch]

    def _answer(self, prompts: list[dict], model) -> list[dict]:
        """One batch of prompts answered (generate, validate, sampled retries) and cached as one file."""
        if self._validator is None:
            self._validator = self.validator_factory()
        entries, _ = answer_batch(list(prompts), model, self.base, self.retries, self.retry_temperature,
                                  self._validator)
        for element, entry in zip(prompts, entries, strict=True):
            entry["accepted"] = first_accepted(element, entry["attempts"], self._validator)
            entry["sent_now"] = len(entry["attempts"]) - len(element.get("attempts", []))
        complete = [{k: v for k, v in e.items() if k != "sent_now"} for e in entries if not e["failed"]]
        if complete:  # a failed request is never cached: the next run asks again
            write_entries(self.cache_dir, complete, self.table)
        return entries

    def get_num_bytes(self, batch: Sequence[list[dict]]) -> int:
        return sum(len(e["prompt"]) for prompts in batch for e in prompts)

    def get_metrics_namespace(self) -> str:
        return "hardpos_llm"


class _LazyEngine:
    """The engine, made on the first prompt that reaches it: a run answered wholly from the cache never loads the
    model (RunInference loads it when its DoFn starts, whether any prompt comes or not)."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self._engine = None

    def __getattr__(self, name):
        if self._engine is None:
            self._engine = make_engine(self.config)
        return getattr(self._engine, name)
