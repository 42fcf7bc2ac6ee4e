"""Adapters: envhub episodes for external trainers, and token-exact trajectories from chat clients.

Nothing heavy is imported here; each integration is its own module with its own optional extra:

* :mod:`envhub.adapters.export` -- ``envhub export DIR --format verl|slime|miles|trl|skyrl|parquet``
  (``export_run``, ``export_command``) and the Parquet schema (docs/trajectory-schema.md);
* :mod:`envhub.adapters.tito` -- the TITO session server (``envhub tito``, ``tito_command``);
* :mod:`envhub.adapters.openai_policy` -- a policy that plays episodes through any
  OpenAI-compatible chat endpoint (token-exact against the TITO server);
* :mod:`envhub.adapters.verl` -- ``EnvhubAgentLoop``, a veRL ``AgentLoopBase``;
* :mod:`envhub.adapters.slime` / :mod:`envhub.adapters.miles` -- custom generate, agent and reward
  functions;
* :mod:`envhub.adapters.trl` -- a ``rollout_func`` for TRL's ``GRPOTrainer``;
* :mod:`envhub.adapters.skyrl` -- ``EnvhubTextEnv``, a SkyRL-Gym ``BaseTextEnv``;
* :mod:`token_runs` -- scripted token runs and a local server for integration tests.

See docs/integrations.md.
"""
