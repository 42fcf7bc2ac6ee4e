"""The dtype forward passes compute in, for the in-process engine and the trainer alike.

Weights stay as they are loaded (fp32: the master weights the optimizer updates); a bf16 forward
runs under ``torch.autocast``, so matrix products are bf16 and reductions (softmax, norms) fp32.
Logits leave in fp32 either way, so logprobs are computed the same way in both dtypes.
"""

from __future__ import annotations

import contextlib

import torch

#: config names (``TrainConfig.dtype``) to torch dtypes
COMPUTE_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def forward_precision(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager[None]:
    """The context a forward pass on ``device`` runs in to compute in ``dtype`` (nothing for fp32)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
