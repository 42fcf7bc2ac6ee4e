"""Code-repair tasks: small real projects with validated synthetic bugs and hidden tests.

Registration imports nothing of the family: the env is registered by its import path.
"""

ENV_ID = "envhub/CodeRepair-v0"


def register_envs() -> None:
    from envhub.registry import register

    register(ENV_ID, "envhub.tasks.code_repair.env:CodeRepairEnv",
             description="fix planted bugs in 25 small Python projects; hidden tests grade")


__all__ = ["ENV_ID", "register_envs"]
