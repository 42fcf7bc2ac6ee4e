"""The bundled trainer's math: pure torch functions, every formula in its docstring.

Conventions. N episodes (flat, one reward each); B sequences and T response positions in a
batch; V the vocabulary. ``mask`` is the response_mask [B, T] (bool or float; 1 = a token
sampled by the policy, 0 = prompt, tool output or padding), optionally times a per-sequence
``loss_weight``. Tokens with mask 0 get exactly zero gradient from every function here.
Statistics come back as plain dicts of python floats; nothing is logged from here.

Pipeline, in the order the loop calls it:

1. ``select_samples`` -> ``keep`` [N] and ``loss_weight`` [N]: infra outcomes excluded,
   zero-variance groups dropped, truncated samples optionally masked.
2. ``group_advantages(rewards[keep], group_index[keep])`` -> A over the kept members only (the
   caller applies ``keep`` before, so excluded episodes never shift a group's mean or std).
3. ``token_logprobs`` for the current policy (with grad), the old policy and the reference.
4. ``mismatch_weights`` (decoupled mode only): trainer-old vs engine logprob correction, optionally
   ``group_normalized_weights`` (self-normalized within each group, the advantages re-centred to match).
5. ``policy_loss`` by name (``LOSSES``) with an optional ``kl_k3`` term; ``entropy`` for stats.

Off-policy modes. Bypass: the engine's sampled logprobs are the old policy (``old_logp``) and
``is_weights`` is None. Decoupled: ``old_logp`` is recomputed by the trainer before the update
and ``is_weights = mismatch_weights(old_logp, engine_logp, mask)`` corrects the engine/trainer gap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

LOSSES = ("grpo", "dr_grpo", "dapo", "gspo", "cispo")
#: The losses with veRL's dual clip (``clip_ratio_c``): the token-ratio PPO surrogates. As in veRL,
#: gspo's sequence ratio and cispo's detached, already clipped weight are not dual-clipped.
DUAL_CLIP_LOSSES = ("grpo", "dr_grpo", "dapo")


def _group_ids(group_index: Tensor) -> tuple[Tensor, int]:
    inverse = torch.unique(group_index, return_inverse=True)[1]
    return inverse, int(inverse.max()) + 1 if inverse.numel() else 0


def _floats(**values: Tensor | float) -> dict[str, float]:
    """One device sync for all statistics."""
    names = list(values)
    flat = torch.stack([torch.as_tensor(values[n], dtype=torch.float64, device="cpu").detach() for n in names])
    return dict(zip(names, flat.tolist(), strict=True))


def group_advantages(rewards: Tensor, group_index: Tensor, *, std_normalize: bool = True,
                     eps: float = 1e-6) -> Tensor:
    """Group-relative advantages (GRPO; Dr.GRPO with ``std_normalize=False``).

        A_i = r_i - mean_g(r)                                  (g = the group of i)
        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)             if std_normalize

    std_g is the unbiased sample std (divisor n_g - 1), as torch.std in TRL and veRL; a group of
    one member (or any zero-variance group) has A = 0, also with eps = 0. Example: [0, 0, 1, 1]
    in one group gives [-0.5, -0.5, 0.5, 0.5], and normalized ±0.5 / (sqrt(1/3) + eps) = ±0.866.
    ``group_index`` may hold any integer ids. Pass only the kept members (``rewards[keep]``, see
    ``select_samples``).
    """
    r = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    inverse, n_groups = _group_ids(group_index)
    zeros = r.new_zeros(n_groups)
    count = zeros.index_add(0, inverse, torch.ones_like(r))
    centred = r - (zeros.index_add(0, inverse, r) / count)[inverse]
    if not std_normalize:
        return centred
    std = (zeros.index_add(0, inverse, centred**2) / (count - 1).clamp(min=1)).sqrt()[inverse]
    return torch.where(std > 0, centred / (std + eps), 0.0)


def select_samples(outcome_classes: Sequence[str], rewards: Tensor, group_index: Tensor,
                   truncated: Sequence[bool], *, exclude_classes: Sequence[str] = ("infra_failure",),
                   drop_zero_variance: bool = True,
                   mask_truncated: bool = False) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Which episodes enter the loss, and with which weight.

        member_i = outcome_class_i not in exclude_classes
        zero_variance(g) = max_g(r) == min_g(r) over the members of g (a group left with fewer
                           than 2 members, or none, counts as zero variance)
        keep_i = member_i and not (drop_zero_variance and zero_variance(g_i))
        loss_weight_i = keep_i * (0 if mask_truncated and truncated_i else 1)

    Contract: the caller computes ``group_advantages(rewards[keep], group_index[keep])`` and
    trains on the kept episodes with ``mask = response_mask * loss_weight[keep][:, None]``. A
    masked truncated episode stays in its group's advantage statistics (its reward is real) but
    contributes no loss (DAPO overlong filtering). Stats (counts as floats): excluded_infra,
    groups, zero_variance_groups, zero_variance_fraction (of groups), kept, masked_truncated.
    """
    n = rewards.shape[0]
    if len(outcome_classes) != n or len(truncated) != n or group_index.shape[0] != n:
        raise ValueError(f"select_samples: outcome_classes ({len(outcome_classes)}), truncated "
                         f"({len(truncated)}), group_index ({group_index.shape[0]}) and rewards ({n}) differ")
    excluded = {str(getattr(c, "value", c)) for c in exclude_classes}
    device = rewards.device
    member = torch.tensor([str(getattr(c, "value", c)) not in excluded for c in outcome_classes],
                          dtype=torch.bool, device=device)
    trunc = torch.as_tensor(list(truncated), dtype=torch.bool, device=device).reshape(n)
    inverse, n_groups = _group_ids(group_index)
    r = rewards.to(torch.float64)
    high = r.new_zeros(n_groups).scatter_reduce(0, inverse[member], r[member], "amax", include_self=False)
    low = r.new_zeros(n_groups).scatter_reduce(0, inverse[member], r[member], "amin", include_self=False)
    count = r.new_zeros(n_groups).index_add(0, inverse, member.to(r.dtype))
    zero_var = (count < 2) | (high == low)
    keep = member & ~zero_var[inverse] if drop_zero_variance else member
    masked = keep & trunc if mask_truncated else torch.zeros_like(keep)
    loss_weight = (keep & ~masked).to(torch.float32)
    stats = _floats(excluded_infra=(~member).sum(), groups=float(n_groups),
                    zero_variance_groups=zero_var.sum(),
                    zero_variance_fraction=zero_var.sum() / max(n_groups, 1),
                    kept=keep.sum(), masked_truncated=masked.sum())
    return keep, loss_weight, stats


def _rows(logits: Tensor, temperature: float):
    """Yields logits[b] / temperature in >= fp32, one [T, V] copy at a time (none for fp32/fp64, t=1)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    for row in logits:
        row = row.to(torch.promote_types(row.dtype, torch.float32))
        yield row if temperature == 1.0 else row / temperature


def token_logprobs(logits: Tensor, targets: Tensor, *, temperature: float = 1.0) -> Tensor:
    """log pi(y_t) = z_t[y_t] - logsumexp_v z_t[v], with z = logits / temperature.

    ``logits`` [B, T, V] are already aligned with ``targets`` [B, T] (the caller shifts).
    Computed one sequence at a time, so no full [B, T, V] log_softmax is materialized (autograd
    keeps at most one fp32 [B, T, V] copy, none for fp32 logits at temperature 1). Returns [B, T]
    in fp32 (fp64 for fp64 logits).
    """
    out = [row.gather(-1, tgt.long().unsqueeze(-1)).squeeze(-1) - torch.logsumexp(row, dim=-1)
           for row, tgt in zip(_rows(logits, temperature), targets, strict=True)]
    return torch.stack(out) if out else logits.new_zeros(targets.shape, dtype=torch.float32)


def _masked_mean(x: Tensor, on: Tensor) -> Tensor:
    return torch.where(on, x, 0.0).sum() / on.sum().clamp(min=1)


def entropy(logits: Tensor, mask: Tensor, *, temperature: float = 1.0) -> Tensor:
    """Mean token entropy over mask: H_t = logsumexp(z_t) - sum_v softmax(z_t)_v z_t[v], z = logits / t.

    Scalar (0 for an empty mask); one sequence at a time like ``token_logprobs``, and only at the
    mask-1 positions (a statistic: the softmax of an env reply's or a pad's position is never needed).
    """
    on = mask > 0
    total, count = logits.new_zeros((), dtype=torch.float64), 0
    for row, keep in zip(_rows(logits, temperature), on, strict=True):
        z = row[keep]
        if z.shape[0]:
            total = total + (torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)).sum().double()
            count += z.shape[0]
    return (total / count).float() if count else logits.new_zeros((), dtype=torch.float32)


def kl_k3(logp: Tensor, ref_logp: Tensor, *, clamp: float = 20.0) -> Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) (Schulman 2020), unbiased and >= 0:

        d = clamp(ref_logp - logp, -clamp, clamp);    k3 = exp(d) - d - 1

    The clamp bounds k3 by exp(clamp) so a log-ratio of 1000 gives a finite value, not inf.
    """
    d = (ref_logp - logp).clamp(-clamp, clamp)
    return torch.expm1(d) - d


def mismatch_weights(old_logp: Tensor, engine_logp: Tensor, mask: Tensor, *, level: str = "token",
                     mode: str = "truncate", cap: float = 2.0) -> tuple[Tensor, dict[str, float]]:
    """Train/inference mismatch correction for decoupled mode (detached, 0 where mask is 0).

        log w_t = old_logp_t - engine_logp_t                          level "token"
        log w_t = sum_{s in mask} (old_logp_s - engine_logp_s)         level "sequence" (all t)
        w = min(w, cap)                  mode "truncate" (TIS)
        w = w if w <= cap else 0         mode "mask" (MIS)

    Computed in log space with log w clamped to log(cap) before exp, so nothing overflows. Stats
    over mask tokens: is_weight_mean, is_weight_max (after the cap), is_capped_fraction (raw
    w > cap), mismatch_abs_mean = mean |old_logp - engine_logp|.
    """
    if level not in ("token", "sequence") or mode not in ("truncate", "mask") or not cap > 0:
        raise ValueError(f"mismatch_weights: level must be token|sequence, mode truncate|mask, cap > 0; "
                         f"got {level!r}, {mode!r}, {cap}")
    on = mask > 0
    diff = torch.where(on, old_logp.detach() - engine_logp.detach(), 0.0)
    diff = diff.to(torch.promote_types(diff.dtype, torch.float32))
    log_w = diff if level == "token" else diff.sum(-1, keepdim=True).expand_as(diff)
    over = log_w > math.log(cap)
    w = log_w.clamp(max=math.log(cap)).exp()
    if mode == "mask":
        w = torch.where(over, 0.0, w)
    w = torch.where(on, w, 0.0)
    stats = _floats(is_weight_mean=_masked_mean(w, on), is_weight_max=w.max() if w.numel() else 0.0,
                    is_capped_fraction=_masked_mean(over.float(), on),
                    mismatch_abs_mean=_masked_mean(diff.abs(), on))
    return w, stats


def group_normalized_weights(sequence_weights: Tensor, advantages: Tensor, group_index: Tensor) -> tuple[
        Tensor, Tensor, dict[str, float]]:
    """Self-normalized mismatch weights per group, with the matching weighted baseline.

        m_g  = mean_{i in g} w_i                    (w_i: sample i's weight, its mask tokens' mean)
        s_i  = 1 / m_g                              (the factor for i's token weights: a group's mean 1)
        c_g  = mean_{i in g} (w_i / m_g) A_i        (the tilt: 0 when every weight in g is equal)
        A'_i = A_i - c_g

    so that sum_{i in g} (w_i / m_g) A'_i = 0: the weights rescale a group's samples against each
    other but never tilt its zero-sum advantages toward pushing down (or up) what was sampled. With
    A_i = (r_i - mean_g r) / std_g this is the self-normalized importance-sampling estimate with the
    weighted mean reward as the baseline, A'_i = (r_i - sum w r / sum w) / std_g. A group whose weights
    are all 0 (``mask`` weights over the cap) keeps s = 1 and A. Returns (s [N], A' [N], stats):
    is_group_tilt = mean of |c_g| over the groups with a nonzero advantage (zero-variance ones have none).
    """
    inverse, n_groups = _group_ids(group_index)
    dtype = torch.promote_types(torch.promote_types(sequence_weights.dtype, advantages.dtype), torch.float32)
    w, a = sequence_weights.to(dtype), advantages.to(dtype)
    zeros = w.new_zeros(n_groups)
    count = zeros.index_add(0, inverse, torch.ones_like(w))
    mean = zeros.index_add(0, inverse, w) / count.clamp(min=1)
    alive = mean > 0
    scale = torch.where(alive, 1.0 / torch.where(alive, mean, 1.0), 1.0)
    tilt = zeros.index_add(0, inverse, w * scale[inverse] * a) / count.clamp(min=1)
    tilt = torch.where(alive, tilt, 0.0)
    # over the groups with a signal only: a zero-variance group (all A = 0) has no tilt to remove
    informative = zeros.index_add(0, inverse, a.abs()) > 0
    stats = _floats(is_group_tilt=tilt.abs()[informative].mean() if bool(informative.any()) else 0.0)
    return scale[inverse], a - tilt[inverse], stats


def policy_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, loss: str = "grpo",
                clip_low: float = 0.2, clip_high: float | None = None, is_weights: Tensor | None = None,
                ref_logp: Tensor | None = None, kl_coef: float = 0.0, batch_sequences: int | None = None,
                batch_tokens: int | None = None, max_response_len: int | None = None,
                log_ratio_clamp: float = 20.0, clip_ratio_c: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """The policy-gradient loss selected by name; returns (scalar loss, stats).

    With r_t = exp(logp_t - old_logp_t) (log-ratio clamped to ±log_ratio_clamp), A_i the
    sequence's advantage, lo = 1 - clip_low, hi = 1 + clip_high (clip_high None -> clip_low):

        grpo, dr_grpo, dapo:  l_t = -min(r_t A_i, clip(r_t, lo, hi) A_i)         (PPO surrogate)
        gspo:    s_i = exp((1/n_i) sum_{t in mask_i} (logp_t - old_logp_t))   (Zheng et al. 2025)
                 l_t = -min(s_i A_i, clip(s_i, lo, hi) A_i)   on every t of i; grad flows via logp
        cispo:   l_t = -sg[clip(r_t, lo, hi)] A_i logp_t              (MiniMax-M1; sg = detach)
        dual clip (grpo, dr_grpo, dapo; clip_ratio_c = c > 1, veRL's convention, Ye et al. 2020):
                 l_t <- min(l_t, -A_i c)  where A_i < 0
                 (= min(max(-A r_t, -A clip(r_t, lo, hi)), -A c): a negative-advantage token's
                 loss, and its push, stop growing with the ratio once r_t > c; gradient 0 there)
        then     l_t <- l_t * sg[is_weights_t] + kl_coef * k3_t       (k3 only with ref_logp)

    Aggregation (n_i = #{t: mask_it > 0}; S = batch_sequences or B; N = batch_tokens or
    #{mask > 0}; a fractional mask value weights its token's l_t):

        grpo, gspo:    L = (1/S) sum_i (1/n_i) sum_t mask_it l_t
        dr_grpo:       L = (1/(S * max_response_len)) sum_it mask_it l_t   (Liu et al. 2025;
                       max_response_len defaults to T: pass the generation budget)
        dapo, cispo:   L = (1/N) sum_it mask_it l_t

    Gradient accumulation: give every micro-batch the FULL batch's S (batch_sequences), N
    (batch_tokens) and max_response_len, and the micro-batch losses sum exactly to the full
    batch's loss. Masked positions are replaced before any arithmetic, so they get exactly zero
    gradient. Stats (over mask tokens): clip_fraction (tokens where the clip is active: the
    clipped branch wins the min, or for cispo the weight is clipped; gspo counts the tokens of
    clipped sequences), ratio_mean and ratio_max (of s_i over sequences for gspo), kl (mean k3;
    only when ref_logp is given), dual_clip_fraction (tokens whose loss the dual clip capped;
    only when it applies), loss. kl_coef > 0 without ref_logp, or clip_ratio_c <= 1, is a
    ValueError; the IS weights scale the policy term only, not the KL term.
    """
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("policy_loss: kl_coef > 0 needs ref_logp (the reference model's token logprobs)")
    if clip_ratio_c is not None and not clip_ratio_c > 1.0:
        raise ValueError(f"policy_loss: clip_ratio_c must be > 1 (the dual clip's bound), got {clip_ratio_c}")
    lo, hi = 1.0 - clip_low, 1.0 + (clip_low if clip_high is None else clip_high)
    m = mask.to(logp.dtype)
    on = m > 0
    logp = torch.where(on, logp, 0.0)
    log_ratio = torch.where(on, logp - old_logp.detach(), 0.0).clamp(-log_ratio_clamp, log_ratio_clamp)
    adv = advantages.detach().to(logp.dtype).reshape(-1, 1)
    n_seq = on.sum(-1).clamp(min=1).to(logp.dtype)
    if loss == "gspo":
        seq_ratio = (log_ratio.sum(-1, keepdim=True) / n_seq.unsqueeze(-1)).exp()
        ratio = seq_ratio.expand_as(logp)
    else:
        ratio = log_ratio.exp()
    if loss == "cispo":
        per_token = -ratio.clamp(lo, hi).detach() * adv * logp
        clipped = (ratio < lo) | (ratio > hi)
    else:
        per_token = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
        clipped = ((ratio > hi) & (adv > 0)) | ((ratio < lo) & (adv < 0))
    extra = {}
    if clip_ratio_c is not None and loss in DUAL_CLIP_LOSSES:
        cap = -adv * clip_ratio_c
        dual = (adv < 0) & (per_token > cap)
        per_token = torch.where(adv < 0, torch.minimum(per_token, cap), per_token)
        extra["dual_clip_fraction"] = _masked_mean(dual.float(), on)
    if is_weights is not None:
        per_token = per_token * torch.where(on, is_weights.detach(), 0.0)
    if ref_logp is not None:
        k3 = kl_k3(logp, torch.where(on, ref_logp.detach(), 0.0))
        per_token = per_token + kl_coef * k3 if kl_coef > 0 else per_token
        extra["kl"] = _masked_mean(k3, on)
    per_token = per_token * m
    sequences = batch_sequences if batch_sequences is not None else logp.shape[0]
    if loss in ("grpo", "gspo"):
        total = (per_token.sum(-1) / n_seq).sum() / max(sequences, 1)
    elif loss == "dr_grpo":
        width = max_response_len if max_response_len is not None else logp.shape[-1]
        total = per_token.sum() / max(sequences * width, 1)
    else:
        total = per_token.sum() / (max(batch_tokens, 1) if batch_tokens is not None else on.sum().clamp(min=1))
    with torch.no_grad():
        values, where = (seq_ratio.squeeze(-1), on.any(-1)) if loss == "gspo" else (ratio, on)
        stats = _floats(clip_fraction=_masked_mean(clipped.float(), on), ratio_mean=_masked_mean(values, where),
                        ratio_max=torch.where(where, values, 0.0).max() if values.numel() else 0.0,
                        **extra, loss=total)
    return total, stats
