"""reasoning-gym datasets as envhub envs (optional extra: ``pip install 'envhub[reasoning-gym]'``).

Registration never imports reasoning-gym: the env is registered by its import path, so envhub
works (and ``envhub list`` reports the missing extra) where the package is not installed.
"""

ENV_ID = "envhub/ReasoningGym-v0"


def register_envs() -> None:
    from envhub.registry import register

    register(
        ENV_ID,
        "envhub.tasks.reasoning_gym.env:ReasoningGymEnv",
        description="any reasoning-gym dataset (env args: dataset=NAME, config={...}); its score_answer grades",
    )


__all__ = ["ENV_ID", "register_envs"]
