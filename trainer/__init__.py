"""The bundled GRPO trainer (``envhub train``; :func:`envhub.trainer.loop.train`).

- :mod:`~envhub.trainer.config`: the one config (:class:`~envhub.trainer.config.TrainConfig`), ``--set`` overrides;
- :mod:`~envhub.trainer.loop`: the run and one GRPO step, stage by stage (:class:`~envhub.trainer.loop.Trainer`);
- :mod:`~envhub.trainer.sampling`: the task order each step's groups come from, dynamic sampling;
- :mod:`~envhub.trainer.models`: the trained module, its reference, optimizer, engine, and the weight push;
- :mod:`~envhub.trainer.samples`: the token audit, then selection and advantages, from records to samples;
- :mod:`~envhub.trainer.grpo`: the math (advantages, selection, logprobs, losses, mismatch weights, KL);
- :mod:`~envhub.trainer.update`: one step's micro-batched policy update; :mod:`~envhub.trainer.batch`: padded tensors;
- :mod:`~envhub.trainer.evaluation`: validation evals, as rollouts into ``RUN/eval/TAG/``;
- :mod:`~envhub.trainer.sft`: the supervised warm start; :mod:`~envhub.trainer.preflight`: refusal of configs
  that would train nothing;
- :mod:`~envhub.trainer.fsdp`: FSDP2 wrapping and collectives; :mod:`~envhub.trainer.weight_sync`: new weights
  to the engine; :mod:`~envhub.trainer.checkpoint`: whole-state checkpoints, atomic, claim and resume;
- :mod:`~envhub.trainer.telemetry`: each step's record, progress, Prometheus; :mod:`~envhub.trainer.trackers`:
  TensorBoard, W&B, MLflow, trackio;
- :mod:`~envhub.trainer.bench`, :mod:`~envhub.trainer.bench_trl`: ``envhub bench train``, next to TRL.

The run directory's layout is :class:`envhub.run_dir.TrainingRun`. Engines, model resolution, the model
policy and the token audit are adapters: :mod:`envhub.adapters.engines`, :mod:`envhub.adapters.model_policy`,
:mod:`envhub.adapters.audit`.
"""
