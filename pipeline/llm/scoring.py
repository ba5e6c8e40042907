"""Sentence log-probabilities under a causal language model: the `lm` ranker of the hard negatives
(perturb/rank.py) scores a caption and its candidates with it. Loaded once per worker (DoFn.setup).

Each group (a caption and its candidates) is scored in forward passes of its own, padded within the group, so
a text's score never depends on which other captions shared its batch; the drops are rounded before they are
compared (rank.SCORE_DECIMALS). On one machine and thread count the choice is therefore reproducible.
"""
from __future__ import annotations

from pipeline.llm.models import load_causal_lm, resolve


class LMScorer:
    name = "lm"

    def __init__(self, model: str | None = None, device: str = "auto", batch_size: int = 64):
        self.model_name = resolve(model).name
        self.tokenizer, self.model, self.torch, self.device = load_causal_lm(model, device)
        self.batch_size = batch_size
        # Every text is scored after one start token, so its first word is scored too.
        self.start = self.tokenizer.bos_token or self.tokenizer.eos_token or ""
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else \
            self.tokenizer.eos_token_id

    def logprobs(self, texts: list[str]) -> list[float]:
        """Natural-log probability of each text's tokens given the start token."""
        torch = self.torch
        ids = [self.tokenizer(self.start + t, add_special_tokens=False)["input_ids"] for t in texts]
        width = max(len(x) for x in ids)
        batch = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for k, x in enumerate(ids):
            batch[k, :len(x)] = torch.tensor(x)
            mask[k, :len(x)] = 1
        batch, mask = batch.to(self.device), mask.to(self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=batch, attention_mask=mask).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(2, batch[:, 1:, None])[..., 0]
        return (logp * mask[:, 1:]).sum(dim=1).tolist()

    def drop_groups(self, groups: list[tuple[str, list]]) -> list[list[float]]:
        """Each candidate's drop in log-probability from its caption (perturb/rank.py's Scorer)."""
        from pipeline.perturb.rank import drops

        texts = [[caption, *(c.text for c in candidates)] for caption, candidates in groups]
        return [drops(logprobs) for logprobs in self.logprob_groups(texts)]

    def logprob_groups(self, groups: list[list[str]]) -> list[list[float]]:
        out = []
        for group in groups:
            scores = []
            for start in range(0, len(group), self.batch_size):
                scores.extend(self.logprobs(group[start:start + self.batch_size]))
            out.append(scores)
        return out
