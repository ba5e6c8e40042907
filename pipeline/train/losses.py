"""The finetuning losses, as pure functions of L2-normalised embeddings (so each is tested without a model).

Notation: a batch of B rows; I, C, P (B x D) the image, caption and hard-positive embeddings; N (B x K x D) each
caption's K hard negatives; s the model's logit scale (exp of its parameter). Targets are always the diagonal
(row b's own caption / positive) or column 0 (the caption, before its negatives).

    total = L_clip + hn_weight * L_hn + hp_weight * L_hp  [+ fsc_local_weight * L_local  for --recipe=fsc]

A term whose weight is 0 is left out of the total (it may still be computed, without gradient, for the log), so
with hn_weight = hp_weight = 0 the total is exactly open_clip's ClipLoss.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

RECIPES = ("clip", "negclip", "fsc")
HP_LOSSES = ("excess", "ce")


@dataclass(frozen=True)
class LossConfig:
    hn_weight: float = 1.0
    hp_weight: float = 1.0
    hp_loss: str = "excess"
    recipe: str = "clip"
    fsc_gamma: float = 2.0
    fsc_smoothing: float = 0.02
    fsc_local_weight: float = 0.2

    def __post_init__(self):
        if self.recipe not in RECIPES:
            raise ValueError(f"--recipe: {self.recipe!r}; choose from {', '.join(RECIPES)}")
        if self.hp_loss not in HP_LOSSES:
            raise ValueError(f"--hp_loss: {self.hp_loss!r}; choose from {', '.join(HP_LOSSES)}")

    @property
    def negatives_in_contrastive(self) -> bool:
        # FSC-CLIP builds on NegCLIP's contrastive loss (its ClipLoss keeps the negatives as extra columns).
        return self.recipe in ("negclip", "fsc")


def clip_loss(image, text, logit_scale, extra_text=None):
    """open_clip's ClipLoss: (CE(s I C^T) + CE(s C I^T)) / 2, diagonal targets. `extra_text` (M x D) adds
    columns to the image->text side only (NegCLIP: each image must also rank its caption above every hard
    negative in the batch); the text->image side stays B x B, as in NegCLIP and FSC-CLIP."""
    labels = torch.arange(image.shape[0], device=image.device)
    columns = text if extra_text is None else torch.cat([text, extra_text])
    logits_per_image = logit_scale * image @ columns.T
    logits_per_text = logit_scale * text @ image.T
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2


def ranked_loss(logits, gamma: float = 0.0, smoothing: float = 0.0):
    """Per row, the (1+K)-way cross-entropy with target column 0, optionally with FSC-CLIP's focal weighting
    and label smoothing: sum_k y_k (1 - p_k)^gamma (-log p_k), y = (1 - smoothing) one_hot(0) + smoothing / (1+K).
    gamma = smoothing = 0 is plain cross-entropy."""
    log_p = F.log_softmax(logits, dim=-1)
    target = torch.full_like(log_p, smoothing / logits.shape[1])
    target[:, 0] += 1 - smoothing
    per_class = -log_p
    if gamma:  # (1 - p) by expm1 for precision; clamped so that p == 1 gives no inf * 0 gradient
        per_class = per_class * (-torch.expm1(log_p)).clamp(min=1e-12).pow(gamma)
    return (target * per_class).sum(-1).mean()


def hard_negative_loss(image, text, negatives, logit_scale, gamma: float = 0.0, smoothing: float = 0.0):
    """Per image, cross-entropy over [s(i, c), s(i, n_1) .. s(i, n_K)] with the caption as target:
    the image must prefer its caption to that caption's own hard negatives (SVLC's negative loss)."""
    candidates = torch.cat([text.unsqueeze(1), negatives], dim=1)  # B x (1+K) x D
    logits = logit_scale * torch.einsum("bd,bkd->bk", image, candidates)
    return ranked_loss(logits, gamma, smoothing)


def _kl_rows(reference_logits, logits):
    """Mean over rows of KL(softmax(reference) || softmax(logits)); the reference carries no gradient."""
    reference = F.log_softmax(reference_logits.detach(), dim=-1)
    return F.kl_div(F.log_softmax(logits, dim=-1), reference, log_target=True, reduction="batchmean")


def hard_positive_loss(image, text, positive, logit_scale, kind: str = "excess"):
    """Pulls each hard positive to its image as its caption is.

    kind="ce" is SVLC's positive loss: (CE(s I P^T) + CE(s C P^T)) / 2 with the diagonal as target, i.e. among the
    batch's positives the image, and the caption, must pick their own.

    kind="excess" (default) is the same cross-entropies measured against the caption's own distribution:
        L_hp = 1/2 [ KL(sg softmax(s I C^T) || softmax(s I P^T)) + KL(sg softmax(s C C^T) || softmax(s C P^T)) ]
    row-wise over the batch (sg: stop-gradient) = CE against the caption's distribution minus that
    distribution's entropy. Why relative: plain CE keeps pushing even a positive that already embeds exactly
    like its caption (toward a one-hot the caption itself does not reach), so it reshapes the space around
    every caption; the excess form asks only that the positive be scored as the caption is. It is 0 exactly
    when P = C and has zero gradient there, and > 0 whenever a positive scores differently from its caption.
    """
    if kind not in HP_LOSSES:
        raise ValueError(f"--hp_loss: {kind!r}; choose from {', '.join(HP_LOSSES)}")
    image_to_positive = logit_scale * image @ positive.T
    caption_to_positive = logit_scale * text @ positive.T
    if kind == "ce":
        labels = torch.arange(image.shape[0], device=image.device)
        return (F.cross_entropy(image_to_positive, labels) + F.cross_entropy(caption_to_positive, labels)) / 2
    return (_kl_rows(logit_scale * image @ text.T, image_to_positive)
            + _kl_rows(logit_scale * text @ text.T, caption_to_positive)) / 2


def text_token_mask(tokens):
    """Which token positions count for the local score: real tokens (id != 0, open_clip's pad), not <start>."""
    mask = tokens != 0
    mask[..., 0] = False
    return mask


def local_scores(image_tokens, text_tokens, text_mask):
    """FSC-CLIP-style local alignment: for each text token the best cosine over the image's patch tokens,
    averaged over the text's real tokens. image_tokens B x Q x D; text_tokens B x [K x] T x D; mask B x [K x] T."""
    patches = F.normalize(image_tokens, dim=-1)
    tokens = F.normalize(text_tokens, dim=-1)
    best = torch.einsum("b...td,bqd->b...tq", tokens, patches).amax(dim=-1)
    mask = text_mask.to(best.dtype)
    return (best * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def local_hard_negative_loss(image_tokens, caption_tokens, caption_mask, negative_tokens, negative_mask,
                             logit_scale, gamma: float = 0.0, smoothing: float = 0.0):
    """FSC-CLIP's local hard-negative loss: per image, the focal / label-smoothed (1+K)-way loss over the local
    scores of [caption, its negatives] (negative_tokens B x K x T x D)."""
    positive = local_scores(image_tokens, caption_tokens, caption_mask)
    negative = local_scores(image_tokens, negative_tokens, negative_mask)
    logits = logit_scale * torch.cat([positive.unsqueeze(1), negative], dim=1)
    return ranked_loss(logits, gamma, smoothing)


def total_loss(features: dict, logit_scale, config: LossConfig) -> dict:
    """The terms and their weighted total. `features`: image, caption (B x D); positive (B x D) and negatives
    (B x K x D) where computed; for --recipe=fsc also image_tokens, caption_tokens, caption_mask,
    negative_tokens, negative_mask. A term whose inputs are absent is not reported."""
    image, text = features["image"], features["caption"]
    negatives, positive = features.get("negatives"), features.get("positive")
    extra = None
    if config.negatives_in_contrastive:
        extra = negatives.flatten(0, 1)
    terms = {"clip": clip_loss(image, text, logit_scale, extra_text=extra)}
    fsc = config.recipe == "fsc"
    if negatives is not None:
        terms["hn"] = hard_negative_loss(image, text, negatives, logit_scale,
                                         gamma=config.fsc_gamma if fsc else 0.0,
                                         smoothing=config.fsc_smoothing if fsc else 0.0)
    if positive is not None:
        terms["hp"] = hard_positive_loss(image, text, positive, logit_scale, kind=config.hp_loss)
    if fsc:
        terms["local"] = local_hard_negative_loss(
            features["image_tokens"], features["caption_tokens"], features["caption_mask"],
            features["negative_tokens"], features["negative_mask"], logit_scale,
            gamma=config.fsc_gamma, smoothing=config.fsc_smoothing)
    weights = {"hn": config.hn_weight, "hp": config.hp_weight, "local": config.fsc_local_weight}
    total = terms["clip"]
    for name, value in terms.items():
        if weights.get(name, 0) > 0:
            total = total + weights[name] * value
    terms["total"] = total
    return terms
