"""Adapters: everything between envhub and a model or a trainer.

Nothing heavy is imported here; each integration is its own module with its own optional extra:

* :mod:`envhub.adapters.engines` -- token-in/token-out engines (protocol, transformers, SGLang,
  scripted), model resolution (``envhub models``) and the ``hf:`` / ``sglang:`` policy specs;
* :mod:`envhub.adapters.token_record` -- ``TokenRecord``, the one token record (sampled tokens
  mask 1, observation tokens mask 0) of the model policy, TITO and the audit;
* :mod:`envhub.adapters.model_policy` -- the model policy (token in, token out);
* :mod:`envhub.adapters.audit` -- the token audit (``envhub audit``); :mod:`envhub.adapters.bench` --
  ``envhub bench trajectory``;
* :mod:`envhub.adapters.export` -- ``export_run`` and the readers back (``envhub export DIR --format
  verl|slime|miles|trl|skyrl|parquet``: :mod:`envhub.adapters.export.cli`) and the Parquet schema
  (docs/trajectory-schema.md);
* :mod:`envhub.adapters.tito` -- the TITO session server (``envhub tito``: :mod:`envhub.adapters.tito.cli`);
* :mod:`envhub.adapters.openai_policy` -- a policy that plays episodes through any
  OpenAI-compatible chat endpoint (token-exact against the TITO server);
* :mod:`envhub.adapters.verl` -- ``EnvhubAgentLoop``, a veRL ``AgentLoopBase``;
* :mod:`envhub.adapters.slime` / :mod:`envhub.adapters.miles` -- custom generate, agent and reward
  functions;
* :mod:`envhub.adapters.trl` -- a ``rollout_func`` for TRL's ``GRPOTrainer``;
* :mod:`envhub.adapters.skyrl` -- ``EnvhubTextEnv``, a SkyRL-Gym ``BaseTextEnv``.

See docs/integrations.md.
"""
