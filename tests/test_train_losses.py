"""The finetuning losses on hand-made embeddings (pipeline/train/losses.py): no model, no data."""
import math

import pytest
import torch

from pipeline.train.losses import (
    LossConfig,
    clip_loss,
    hard_negative_loss,
    hard_positive_loss,
    local_hard_negative_loss,
    local_scores,
    ranked_loss,
    text_token_mask,
    total_loss,
)

F = torch.nn.functional
B, K, D = 6, 2, 16
SCALE = torch.tensor(1 / 0.07)


def unit(*shape, seed=0):
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


@pytest.fixture
def features():
    return {"image": unit(B, D, seed=1), "caption": unit(B, D, seed=2), "positive": unit(B, D, seed=3),
            "negatives": unit(B, K, D, seed=4)}


def test_zero_weights_total_equals_open_clip_clip_loss(features):
    from pipeline.train.clip import import_open_clip

    expected = import_open_clip().loss.ClipLoss()(features["image"], features["caption"], SCALE)
    terms = total_loss(features, SCALE, LossConfig(hn_weight=0, hp_weight=0))
    assert torch.equal(terms["total"], expected)
    assert terms["hn"] > 0 and terms["hp"] > 0  # still computed (for the log), just not in the total
    weighted = total_loss(features, SCALE, LossConfig(hn_weight=0.5, hp_weight=2.0))
    assert torch.allclose(weighted["total"], expected + 0.5 * weighted["hn"] + 2.0 * weighted["hp"])


def test_hard_positive_excess_is_exactly_zero_when_positive_equals_caption(features):
    image, caption = features["image"], features["caption"]
    positive = caption.clone().requires_grad_(True)
    loss = hard_positive_loss(image, caption, positive, SCALE)
    assert loss.item() == 0.0
    loss.backward()
    assert positive.grad.abs().max().item() < 1e-6  # at its minimum: no push on a positive that already matches
    other = hard_positive_loss(image, caption, features["positive"], SCALE)
    slightly = hard_positive_loss(image, caption, F.normalize(caption + 0.05 * features["positive"], dim=-1), SCALE)
    assert other > slightly > 0


def test_hard_positive_ce_is_svlc_positive_loss(features):
    image, caption, positive = features["image"], features["caption"], features["positive"]
    labels = torch.arange(B)
    expected = (F.cross_entropy(SCALE * image @ positive.T, labels)
                + F.cross_entropy(SCALE * caption @ positive.T, labels)) / 2
    assert torch.allclose(hard_positive_loss(image, caption, positive, SCALE, kind="ce"), expected)
    # unlike the excess form, plain CE is not 0 for a positive identical to its caption
    assert hard_positive_loss(image, caption, caption, SCALE, kind="ce") > 0


def test_hard_positive_excess_is_cross_entropy_minus_entropy(features):
    image, caption, positive = features["image"], features["caption"], features["positive"]

    def excess(reference_logits, logits):
        p = reference_logits.softmax(-1)
        return (-(p * logits.log_softmax(-1)).sum(-1) + (p * p.log()).sum(-1)).mean()

    expected = (excess(SCALE * image @ caption.T, SCALE * image @ positive.T)
                + excess(SCALE * caption @ caption.T, SCALE * caption @ positive.T)) / 2
    assert torch.allclose(hard_positive_loss(image, caption, positive, SCALE), expected, atol=1e-6)


def test_hard_negative_loss_matches_hand_computation(features):
    image, caption, negatives = features["image"], features["caption"], features["negatives"]
    by_hand = 0.0
    for b in range(B):
        scores = [SCALE * image[b] @ caption[b]] + [SCALE * image[b] @ negatives[b, k] for k in range(K)]
        by_hand += -(scores[0] - torch.logsumexp(torch.stack(scores), 0)) / B
    assert torch.allclose(hard_negative_loss(image, caption, negatives, SCALE), by_hand, atol=1e-6)
    # a caption the image already prefers by far gives a near-zero loss
    far = hard_negative_loss(image, image, -image.unsqueeze(1).expand(B, K, D), SCALE)
    assert far < 1e-6


def test_negclip_adds_the_negatives_as_image_to_text_columns(features):
    image, caption, negatives = features["image"], features["caption"], features["negatives"]
    extra = negatives.flatten(0, 1)
    labels = torch.arange(B)
    expected = (F.cross_entropy(SCALE * image @ torch.cat([caption, extra]).T, labels)
                + F.cross_entropy(SCALE * caption @ image.T, labels)) / 2
    got = clip_loss(image, caption, SCALE, extra_text=extra)
    assert torch.allclose(got, expected)
    assert got > clip_loss(image, caption, SCALE)  # more columns: a harder classification
    terms = total_loss(features, SCALE, LossConfig(recipe="negclip", hn_weight=0, hp_weight=0))
    assert torch.equal(terms["total"], terms["clip"]) and torch.allclose(terms["clip"], expected)


def test_ranked_loss_without_focal_or_smoothing_is_cross_entropy():
    logits = torch.randn(5, 3, generator=torch.Generator().manual_seed(5)) * 4
    assert torch.allclose(ranked_loss(logits), F.cross_entropy(logits, torch.zeros(5, dtype=torch.long)))


def test_ranked_loss_focal_and_smoothing_by_hand():
    logits = torch.tensor([[3.0, 1.0, -1.0], [0.0, 2.0, 0.5]])
    p = logits.softmax(-1)
    gamma, beta = 2.0, 0.1
    target = torch.full_like(p, beta / 3)
    target[:, 0] += 1 - beta
    expected = (target * -(p.log()) * (1 - p) ** gamma).sum(-1).mean()
    assert torch.allclose(ranked_loss(logits, gamma, beta), expected, atol=1e-6)
    # focal weighting shrinks the easy first row's share the most
    plain = F.cross_entropy(logits, torch.zeros(2, dtype=torch.long), reduction="none")
    focal = (-(p[:, 0].log()) * (1 - p[:, 0]) ** gamma)
    assert focal[0] / plain[0] < focal[1] / plain[1]


def test_ranked_loss_has_finite_gradient_when_a_row_is_certain():
    logits = torch.tensor([[200.0, 0.0], [0.0, 1.0]], requires_grad=True)  # row 0: p == 1 in float32
    for gamma in (0.0, 0.5, 2.0):
        logits.grad = None
        ranked_loss(logits, gamma, 0.02).backward()
        assert torch.isfinite(logits.grad).all()


def test_local_scores_take_the_best_patch_per_token_and_skip_padding():
    patches = torch.eye(4).unsqueeze(0)                 # 1 image, 4 orthogonal patches
    tokens = torch.tensor([[[9.0, 0, 0, 0],             # <start>: not counted
                            [2.0, 0, 0, 0],             # matches patch 0: cosine 1
                            [1.0, 1.0, 0, 0],           # best patch cosine 1/sqrt(2)
                            [0, 0, 0, 5.0]]])           # padding: not counted
    ids = torch.tensor([[49406, 320, 1929, 0]])
    mask = text_token_mask(ids)
    assert mask.tolist() == [[False, True, True, False]]
    assert torch.allclose(local_scores(patches, tokens, mask), torch.tensor([(1 + 1 / math.sqrt(2)) / 2]))
    # the same with K negatives per caption (B x K x T x D)
    stacked = local_scores(patches, tokens.unsqueeze(1).expand(1, 3, 4, 4), mask.unsqueeze(1).expand(1, 3, 4))
    assert stacked.shape == (1, 3) and torch.allclose(stacked, torch.full((1, 3), (1 + 1 / math.sqrt(2)) / 2))


def test_fsc_terms_are_finite_with_gradients():
    T, Q = 7, 5
    image_tokens = torch.randn(B, Q, D, requires_grad=True)
    caption_tokens = torch.randn(B, T, D, requires_grad=True)
    negative_tokens = torch.randn(B, K, T, D, requires_grad=True)
    ids = torch.randint(1, 100, (B, K + 1, T))
    ids[..., -2:] = 0
    features = {"image": unit(B, D, seed=1), "caption": unit(B, D, seed=2), "positive": unit(B, D, seed=3),
                "negatives": unit(B, K, D, seed=4), "image_tokens": image_tokens, "caption_tokens": caption_tokens,
                "caption_mask": text_token_mask(ids[:, 0]), "negative_tokens": negative_tokens,
                "negative_mask": text_token_mask(ids[:, 1:])}
    config = LossConfig(recipe="fsc", hn_weight=0.5, hp_weight=1.0, fsc_gamma=2.0, fsc_smoothing=0.02,
                        fsc_local_weight=0.2)
    terms = total_loss(features, SCALE, config)
    assert set(terms) == {"clip", "hn", "hp", "local", "total"}
    assert all(torch.isfinite(v) and v.ndim == 0 for v in terms.values())
    expected = terms["clip"] + 0.5 * terms["hn"] + 1.0 * terms["hp"] + 0.2 * terms["local"]
    assert torch.allclose(terms["total"], expected)
    terms["total"].backward()
    assert all(torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
               for t in (image_tokens, caption_tokens, negative_tokens))
    # the fsc hard-negative term is the focal / smoothed one
    plain = hard_negative_loss(features["image"], features["caption"], features["negatives"], SCALE)
    assert not torch.allclose(terms["hn"], plain)
    local = local_hard_negative_loss(image_tokens, caption_tokens, features["caption_mask"], negative_tokens,
                                     features["negative_mask"], SCALE)
    assert torch.isfinite(local)


def test_bad_recipe_or_hp_loss_names_the_flag():
    with pytest.raises(ValueError, match="--recipe"):
        LossConfig(recipe="svlc")
    with pytest.raises(ValueError, match="--hp_loss"):
        LossConfig(hp_loss="kl")
