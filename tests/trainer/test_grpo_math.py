"""The GRPO math against hand-computed numbers: each test fails if its formula were wrong."""

import math

import pytest
import torch

from envhub.trainer.grpo import (
    LOSSES,
    entropy,
    group_advantages,
    group_normalized_weights,
    kl_k3,
    mismatch_weights,
    policy_loss,
    select_samples,
    token_logprobs,
)
from envhub.types import OutcomeClass

D = torch.float64
LN = math.log


def t(*values):
    return torch.tensor(values, dtype=D)


def close(actual, expected, tol=1e-9):
    assert torch.allclose(torch.as_tensor(actual, dtype=D), torch.as_tensor(expected, dtype=D), atol=tol, rtol=0), (
        actual, expected)


# -- advantages and selection ------------------------------------------------------------------


def test_group_advantages_centred_and_unbiased_std():
    rewards, one_group = t(0, 0, 1, 1), torch.zeros(4, dtype=torch.long)
    close(group_advantages(rewards, one_group, std_normalize=False), [-0.5, -0.5, 0.5, 0.5])
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # unbiased std of [0,0,1,1] is sqrt(1/3); population std would give 1.0
    close(group_advantages(rewards, one_group), [-a, -a, a, a])
    close(group_advantages(rewards, one_group, eps=0.5), [-0.5 / (math.sqrt(1 / 3) + 0.5)] * 2
          + [0.5 / (math.sqrt(1 / 3) + 0.5)] * 2)


def test_group_advantages_keep_interleaved_groups_apart():
    rewards, groups = t(0, 5, 1, 7, 3), torch.tensor([3, 9, 3, 9, 42])
    close(group_advantages(rewards, groups, std_normalize=False), [-0.5, -1, 0.5, 1, 0])
    a = 1 / math.sqrt(2)  # 0.5 / std([0, 1]) and 1 / std([5, 7]); a group of one gets 0
    close(group_advantages(rewards, groups, eps=0.0), [-a, -a, a, a, 0])
    close(group_advantages(torch.tensor([0, 2]), torch.tensor([1, 1]), std_normalize=False), [-1, 1])


# group 0 varies over its non-infra members; group 1 is all equal; group 2 is equal once its infra
# members (one below, one above the others) are gone; group 3 is all infra.
CLASSES = ["success", "policy_failure", "infra_failure", "success",
           "success", "success", "success", "success",
           "success", OutcomeClass.INFRA_FAILURE, "success", "infra_failure",
           "infra_failure", "infra_failure"]
REWARDS = t(1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 2, 0, 0)
GROUPS = torch.tensor([0] * 4 + [1] * 4 + [2] * 4 + [3] * 2)
NOT_TRUNCATED = [False] * 14


def test_select_samples_excludes_infra_and_drops_zero_variance_groups():
    keep, weight, stats = select_samples(CLASSES, REWARDS, GROUPS, NOT_TRUNCATED)
    assert keep.tolist() == [True, True, False, True] + [False] * 10
    assert weight.tolist() == [1.0, 1.0, 0.0, 1.0] + [0.0] * 10
    assert stats == {"excluded_infra": 5.0, "groups": 4.0, "zero_variance_groups": 3.0,
                     "zero_variance_fraction": 0.75, "kept": 3.0, "masked_truncated": 0.0}
    # The contract: advantages over the kept members only; the infra member's 0 does not shift the mean.
    close(group_advantages(REWARDS[keep], GROUPS[keep], std_normalize=False), [1 / 3, -2 / 3, 1 / 3])


def test_select_samples_keeps_zero_variance_groups_when_asked():
    keep, _, stats = select_samples(CLASSES, REWARDS, GROUPS, NOT_TRUNCATED, drop_zero_variance=False)
    assert keep.tolist() == [True, True, False, True, True, True, True, True, True, False, True, False,
                             False, False]
    assert stats["zero_variance_groups"] == 3.0 and stats["kept"] == 9.0
    keep, _, stats = select_samples(CLASSES, REWARDS, GROUPS, NOT_TRUNCATED, exclude_classes=())
    assert stats["excluded_infra"] == 0.0 and stats["zero_variance_groups"] == 2.0  # groups 1 and 3
    assert keep.sum() == 8


def test_select_samples_masks_kept_truncated_samples():
    truncated = [False, True, False, False, True] + [False] * 9  # index 4 is in a dropped group
    keep, weight, stats = select_samples(CLASSES, REWARDS, GROUPS, truncated, mask_truncated=True)
    assert keep.tolist()[:4] == [True, True, False, True]
    assert weight.tolist()[:5] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert stats["masked_truncated"] == 1.0 and stats["kept"] == 3.0
    _, weight, stats = select_samples(CLASSES, REWARDS, GROUPS, truncated)
    assert weight.tolist()[:4] == [1.0, 1.0, 0.0, 1.0] and stats["masked_truncated"] == 0.0
    with pytest.raises(ValueError, match="differ"):
        select_samples(CLASSES[:3], REWARDS, GROUPS, truncated)


# -- logprobs, entropy, KL, mismatch ------------------------------------------------------------------


def test_token_logprobs_and_temperature():
    logits = torch.tensor([[[0.0, LN(3)], [LN(3), 0.0]]])
    targets = torch.tensor([[1, 1]])
    close(token_logprobs(logits, targets), [[LN(0.75), LN(0.25)]], 1e-6)
    r = math.sqrt(3)  # logits / 2 -> probabilities 1 : sqrt(3)
    close(token_logprobs(logits, targets, temperature=2.0), [[LN(r / (1 + r)), LN(1 / (1 + r))]], 1e-6)
    logits = torch.randn(2, 3, 5)
    targets = torch.randint(0, 5, (2, 3))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    close(token_logprobs(logits, targets, temperature=0.7), expected, 1e-6)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, targets, temperature=0.0)


def test_entropy_is_the_masked_mean():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [50.0, 0.0, 0.0, 0.0], [LN(3), 0.0, -1e9, -1e9]]])
    h3 = -(0.75 * LN(0.75) + 0.25 * LN(0.25))
    close(entropy(logits, torch.tensor([[1, 0, 1]])), (LN(4) + h3) / 2, 1e-6)
    close(entropy(logits, torch.tensor([[0, 1, 0]])), 0.0, 1e-6)


def test_kl_k3_values_and_clamp():
    close(kl_k3(t(0.0, 0.0), t(LN(2), 0.0)), [1 - LN(2), 0.0])
    logp = t(1000.0, -1000.0).requires_grad_()
    k3 = kl_k3(logp, t(0.0, 0.0))
    close(k3, [math.exp(-20) + 20 - 1, math.exp(20) - 20 - 1], 1e-6)
    k3.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_mismatch_weights_token_level_truncate_and_mask():
    old = t(LN(0.5), LN(3), LN(1.5), 1000.0).reshape(1, 4)
    engine = torch.zeros(1, 4, dtype=D)
    mask = torch.tensor([[1, 1, 1, 0]])  # the masked position's log-ratio of 1000 must count nowhere
    w, stats = mismatch_weights(old, engine, mask, cap=2.0)
    close(w, [[0.5, 2.0, 1.5, 0.0]])
    assert stats == pytest.approx({"is_weight_mean": 4 / 3, "is_weight_max": 2.0, "is_capped_fraction": 1 / 3,
                                   "mismatch_abs_mean": (LN(2) + LN(3) + LN(1.5)) / 3})
    w, stats = mismatch_weights(old, engine, mask, mode="mask", cap=2.0)
    close(w, [[0.5, 0.0, 1.5, 0.0]])
    assert stats["is_weight_mean"] == pytest.approx(2 / 3) and stats["is_capped_fraction"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="level"):
        mismatch_weights(old, engine, mask, level="turn")


def test_mismatch_weights_sequence_level():
    old = t(LN(1.5), LN(1.2), 7.0, LN(2), LN(1.5), 0.0, 500.0, 600.0, 0.0).reshape(3, 3)
    engine = torch.zeros(3, 3, dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0]])
    w, stats = mismatch_weights(old, engine, mask, level="sequence", cap=2.0)  # products 1.8, 3, e^1100
    close(w, [[1.8, 1.8, 0], [2, 2, 0], [2, 2, 0]])
    assert stats["is_capped_fraction"] == pytest.approx(2 / 3) and stats["is_weight_max"] == 2.0
    w, _ = mismatch_weights(old, engine, mask, level="sequence", mode="mask", cap=2.0)
    close(w, [[1.8, 1.8, 0], [0, 0, 0], [0, 0, 0]])
    assert not w.requires_grad


def test_group_normalized_weights_rescale_but_never_tilt():
    # group 0: weights 0.5 on the right answers (A > 0), 1.5 on the wrong ones: a raw sum of w A < 0
    w = t(0.5, 0.5, 1.5, 1.5, 1.0, 2.0, 0.0, 0.0)
    a = t(1.0, 1.0, -1.0, -1.0, 0.7, -0.7, 1.0, -1.0)
    group = torch.tensor([5, 5, 5, 5, 9, 9, 2, 2])
    assert float((w[:4] * a[:4]).sum()) == pytest.approx(-2.0)
    scale, centred, stats = group_normalized_weights(w, a, group)
    # group 0: mean 1, scale 1, tilt (0.5 + 0.5 - 1.5 - 1.5) / 4 = -0.5; group 1: mean 1.5, tilt
    # (1/1.5 * 0.7 - 2/1.5 * 0.7) / 2 = -0.7/3; group 2: weights all 0 -> left alone
    close(scale, [1, 1, 1, 1, 1 / 1.5, 1 / 1.5, 1, 1])
    close(centred, [1.5, 1.5, -0.5, -0.5, 0.7 + 0.7 / 3, -0.7 + 0.7 / 3, 1.0, -1.0])
    assert stats["is_group_tilt"] == pytest.approx((0.5 + 0.7 / 3 + 0) / 3)
    # a zero-variance group (all A = 0) adds nothing to the mean tilt
    with_flat = group_normalized_weights(torch.cat([w, t(0.5, 2.0)]), torch.cat([a, t(0.0, 0.0)]),
                                         torch.cat([group, torch.tensor([4, 4])]))[2]
    assert with_flat["is_group_tilt"] == pytest.approx(stats["is_group_tilt"])
    for g in (5, 9):
        on = group == g
        assert float((w[on] * scale[on] * centred[on]).sum()) == pytest.approx(0.0, abs=1e-6)
        assert float((w[on] * scale[on]).mean()) == pytest.approx(1.0)
    # the self-normalized estimate: group 0's A = 2 (r - mean r) for rewards 1, 1, 0, 0, and A' = 2 (r - b)
    # with b the weighted mean reward
    r = t(1.0, 1.0, 0.0, 0.0)
    baseline = float((w[:4] * r).sum() / w[:4].sum())
    close(centred[:4], 2 * (r - baseline))
    # equal weights change nothing
    scale, centred, stats = group_normalized_weights(t(0.8, 0.8, 0.8), t(1.0, 0.0, -1.0), torch.tensor([0, 0, 0]))
    close(scale, [1.25] * 3)
    close(centred, [1.0, 0.0, -1.0])
    assert stats["is_group_tilt"] == pytest.approx(0.0)


# -- losses -----------------------------------------------------------------------------------------


def _leaf(values):
    return t(*values).reshape(len(values), -1).requires_grad_()


def test_grpo_clips_on_both_sides():
    # one token per sequence: ratio r = exp(logp - old); A = +1, -1, +1, -1
    logp = _leaf([LN(1.5), LN(0.5), LN(0.5), LN(1.5)])
    old, adv, mask = torch.zeros(4, 1, dtype=D), t(1, -1, 1, -1), torch.ones(4, 1)
    loss, stats = policy_loss(logp, old, adv, mask, clip_low=0.2)
    # -min(1.5, 1.2) = -1.2 (clipped above), -min(-0.5, -0.8) = 0.8 (clipped below), -0.5, 1.5
    close(loss, (-1.2 + 0.8 - 0.5 + 1.5) / 4)
    loss.backward()
    close(logp.grad, [[0.0], [0.0], [-0.5 / 4], [1.5 / 4]])  # d(-rA)/dlogp = -rA; clipped -> 0
    assert stats == pytest.approx({"clip_fraction": 0.5, "ratio_mean": 1.0, "ratio_max": 1.5, "loss": 0.15})
    # asymmetric (DAPO-style) bounds come from the arguments: r = 1.25 is inside 1 + 0.28, not 1 + 0.2
    one = _leaf([LN(1.25)])
    close(policy_loss(one, old[:1], t(1), mask[:1], clip_high=0.28)[0], -1.25)
    close(policy_loss(one, old[:1], t(1), mask[:1])[0], -1.2)
    close(policy_loss(one, old[:1], t(1), mask[:1], loss="dapo", clip_low=0.2, clip_high=0.28)[0], -1.25)


# two sequences of lengths 3 and 1; ratio 1, so l_t = -A_i: -1 on the first, +2 on the second
AGG_MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])
AGG_ADV = t(1, -2)


@pytest.mark.parametrize(("loss", "kwargs", "expected"), [
    ("grpo", {}, (-1 + 2) / 2),
    ("gspo", {}, (-1 + 2) / 2),
    ("dr_grpo", {"max_response_len": 4}, (-3 + 2) / (2 * 4)),
    ("dr_grpo", {}, (-3 + 2) / (2 * 3)),
    ("dapo", {}, (-3 + 2) / 4),
    ("cispo", {}, (3 * LN(2) - 2 * LN(2)) / 4),  # -w A logp with logp = ln 0.5, w = 1
])
def test_each_aggregation(loss, kwargs, expected):
    logp = torch.full((2, 3), LN(0.5), dtype=D).requires_grad_()
    value, _ = policy_loss(logp, logp.detach(), AGG_ADV, AGG_MASK, loss=loss, **kwargs)
    close(value, expected)


def test_a_fractional_mask_weights_its_tokens_and_a_zero_row_counts_no_tokens():
    logp = torch.full((2, 3), LN(0.5), dtype=D).requires_grad_()
    half = torch.tensor([[1, 1, 1], [0.5, 0, 0]], dtype=D)
    close(policy_loss(logp, logp.detach(), AGG_ADV, half)[0], (-1 + 0.5 * 2) / 2)
    close(policy_loss(logp, logp.detach(), AGG_ADV, half, loss="dapo")[0], (-3 + 0.5 * 2) / 4)
    dropped = torch.tensor([[1, 1, 1], [0, 0, 0]], dtype=D)  # a masked truncated sample: loss_weight 0
    close(policy_loss(logp, logp.detach(), AGG_ADV, dropped, loss="dapo")[0], -3 / 3)


def test_gspo_sequence_ratio_and_its_gradient():
    old = torch.zeros(2, 3, dtype=D)
    logp = t(0.3, 0.0, -0.1, LN(1.5), 99.0, 99.0).reshape(2, 3).requires_grad_()
    loss, stats = policy_loss(logp, old, t(1, 1), AGG_MASK, loss="gspo")
    s = math.exp(0.2 / 3)  # exp(mean log-ratio) over the 3 tokens; the second sequence: s = 1.5 -> clipped 1.2
    close(loss, (-s - 1.2) / 2)
    loss.backward()
    close(logp.grad, [[-s / 3 / 2] * 3, [0.0, 0.0, 0.0]])  # d(-s)/dlogp_t = -s / n_i, then / B
    assert stats == pytest.approx({"clip_fraction": 0.25, "ratio_mean": (s + 1.5) / 2, "ratio_max": 1.5,
                                   "loss": (-s - 1.2) / 2})


def test_cispo_weight_is_detached_and_not_capped_by_the_lower_clip():
    old = torch.zeros(1, 3, dtype=D)
    logp = t(LN(1.1), LN(1.5), LN(0.5)).reshape(1, 3).requires_grad_()
    loss, stats = policy_loss(logp, old, t(2), torch.ones(1, 3), loss="cispo", clip_low=0.2)
    w = torch.tensor([[1.1, 1.2, 0.8]], dtype=D)  # upper bound 1 + clip_low: 1.1 stays 1.1, not 0.8 or 1.0
    close(loss, (-w * 2 * logp.detach()).sum() / 3)
    loss.backward()
    close(logp.grad, -w * 2 / 3)  # a live weight would add -2 w logp / 3
    assert stats["clip_fraction"] == pytest.approx(2 / 3)


def test_is_weights_and_kl_term():
    logp = torch.zeros(2, 3, dtype=D, requires_grad=True)
    ref = torch.full((2, 3), LN(2), dtype=D)
    is_w = t(2, 2, 2, 0.5, 9, 9).reshape(2, 3)
    close(policy_loss(logp, logp.detach(), AGG_ADV, AGG_MASK, is_weights=is_w)[0], (-2 + 2 * 0.5) / 2)
    k3 = 1 - LN(2)
    for loss, scale in (("grpo", 1.0), ("dapo", 1.0), ("dr_grpo", 4 / (2 * 3))):
        value, stats = policy_loss(logp, logp.detach(), t(0, 0), AGG_MASK, loss=loss, ref_logp=ref, kl_coef=0.1)
        close(value, 0.1 * k3 * scale)
        assert stats["kl"] == pytest.approx(k3)
    assert "kl" not in policy_loss(logp, logp.detach(), AGG_ADV, AGG_MASK)[1]
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp.detach(), AGG_ADV, AGG_MASK, kl_coef=0.1)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 2, 4, 1])
    mask = (torch.arange(5)[None] < lengths[:, None]).to(D)
    old = -torch.rand(4, 5, generator=g, dtype=D)
    logp = (old + 0.4 * torch.randn(4, 5, generator=g, dtype=D)).requires_grad_()
    ref = old + 0.1 * torch.randn(4, 5, generator=g, dtype=D)
    is_w = 0.5 + torch.rand(4, 5, generator=g, dtype=D)
    return logp, old, t(1.0, -0.5, 0.7, -1.2), mask, ref, is_w


@pytest.mark.parametrize("loss", LOSSES)
def test_micro_batches_sum_to_the_full_batch(loss):
    logp, old, adv, mask, ref, is_w = _batch()
    norm = {"batch_sequences": 4, "batch_tokens": int(mask.sum()), "max_response_len": 5}
    extra = {"loss": loss, "ref_logp": ref, "kl_coef": 0.05, "is_weights": is_w, "clip_high": 0.28}
    full, _ = policy_loss(logp, old, adv, mask, **extra)
    (full_grad,) = torch.autograd.grad(full, logp)
    total = 0
    for rows, width in ((slice(0, 2), 5), (slice(2, 4), 4)):  # each micro-batch padded to its own width
        cut = (rows, slice(0, width))
        part, _ = policy_loss(logp[cut], old[cut], adv[rows], mask[cut], **{**extra, "ref_logp": ref[cut],
                              "is_weights": is_w[cut]}, **norm)
        total = total + part
    (micro_grad,) = torch.autograd.grad(total, logp)
    close(total, full, 1e-12)
    close(micro_grad, full_grad, 1e-12)
    # and the micro-batch losses alone, without the full batch's normalizers, would not add up
    alone = sum(policy_loss(logp[r], old[r], adv[r], mask[r], **{**extra, "ref_logp": ref[r], "is_weights": is_w[r]})[0]
                for r in (slice(0, 2), slice(2, 4)))
    assert abs(float(alone.detach()) - float(full.detach())) > 1e-3


@pytest.mark.parametrize("loss", LOSSES)
def test_masked_tokens_get_exactly_zero_gradient(loss):
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0]])
    off = mask == 0
    logits = torch.randn(2, 4, 6, generator=g, dtype=D)
    logits[off] = torch.tensor([1e4, -1e4, 3e3, 0.0, -5e3, 2e4], dtype=D)  # large, finite
    logits.requires_grad_()
    targets = torch.randint(0, 6, (2, 4), generator=g)
    logp = token_logprobs(logits, targets)
    old = logp.detach() + 0.1 * torch.randn(2, 4, generator=g, dtype=D)
    old[off] = -1e4
    ref = torch.where(off, 1e4, old)
    is_w = torch.where(off, 1e6, torch.ones(2, 4, dtype=D))
    value, _ = policy_loss(logp, old, t(1.0, -1.0), mask, loss=loss, ref_logp=ref, kl_coef=0.1, is_weights=is_w)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(logits.grad).all()
    assert (logits.grad[off] == 0.0).all()
    assert (logits.grad[~off].abs().sum(-1) > 0).all()


def test_unknown_loss_lists_the_names():
    with pytest.raises(ValueError, match="grpo, dr_grpo, dapo, gspo, cispo"):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), loss="ppo")


def test_dual_clip_bounds_the_loss_of_negative_advantages():
    # one token per sequence: r = 4, 2, 4, 0.5 with A = -1, -1, +1, -1; clip_low 0.2, c = 3 (veRL's
    # clip_ratio_c): for A < 0, l = min(max(-A r, -A clip(r)), -A c)
    logp = _leaf([LN(4), LN(2), LN(4), LN(0.5)])
    old, adv, mask = torch.zeros(4, 1, dtype=D), t(-1, -1, 1, -1), torch.ones(4, 1)
    loss, stats = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_ratio_c=3.0)
    # min(max(4, 1.2), 3) = 3 (dual clip); min(max(2, 1.2), 3) = 2; A > 0: -min(4, 1.2) = -1.2;
    # min(max(0.5, 0.8), 3) = 0.8
    close(loss, (3 + 2 - 1.2 + 0.8) / 4)
    loss.backward()
    close(logp.grad, [[0.0], [2 / 4], [0.0], [0.0]])  # d(-A r)/dlogp = -A r = 2 on the only unclipped token
    assert stats["dual_clip_fraction"] == pytest.approx(0.25) and stats["clip_fraction"] == pytest.approx(0.5)
    # without it the r = 4, A = -1 token costs 4 and pushes with gradient 4
    close(policy_loss(logp, old, adv, mask, clip_low=0.2)[0], (4 + 2 - 1.2 + 0.8) / 4)
    for name in ("dr_grpo", "dapo"):  # every PPO-surrogate loss (here the same normalizer, 4)
        close(policy_loss(logp, old, adv, mask, loss=name, clip_ratio_c=3.0)[0], (3 + 2 - 1.2 + 0.8) / 4)
    # as in veRL, gspo's sequence ratio and cispo's detached weight are not dual-clipped
    close(policy_loss(logp, old, adv, mask, loss="gspo", clip_ratio_c=3.0)[0], (4 + 2 - 1.2 + 0.8) / 4)
    assert "dual_clip_fraction" not in policy_loss(logp, old, adv, mask, loss="cispo", clip_ratio_c=3.0)[1]
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(logp, old, adv, mask, clip_ratio_c=1.0)
