"""The bundled trainer (config, GRPO math, the training loop, FSDP2 wrapping, weight sync,
checkpoints); empty until it lands.

Engines, model resolution, the model policy and the token audit are adapters:
:mod:`envhub.adapters.engines`, :mod:`envhub.adapters.model_policy`, :mod:`envhub.adapters.audit`.
"""
