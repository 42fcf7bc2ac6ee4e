"""Training side of envhub: model engines, the model policy, local models, the token audit.

* :mod:`envhub.adapters.engine` -- the ``Engine`` protocol and ``SamplingParams``;
* :mod:`envhub.trainer.engines` -- in-process transformers, SGLang client, scripted test double;
* :mod:`envhub.trainer.model_policy` -- ``hf:`` / ``sglang:`` policies (token in, token out);
* :mod:`envhub.adapters.chat_format` -- everything specific to a model family's chat format;
* :mod:`envhub.trainer.models` / :mod:`envhub.trainer.tiny` -- the default small model, a tiny test model;
* :mod:`envhub.trainer.audit` -- ``envhub audit``; :mod:`envhub.trainer.bench` -- trajectory benchmark.

Nothing heavy is imported here: torch and transformers load only when an engine or model is used.
"""
