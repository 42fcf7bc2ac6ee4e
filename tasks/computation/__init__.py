"""Computation tasks: big integers, fractions, dates, units, statistics, linear systems.

Registration imports nothing of the family: the env is registered by its import path and loads on
first use (``envhub.make``, ``envhub list``).
"""

ENV_ID = "envhub/Computation-v0"


def register_envs() -> None:
    from envhub.registry import register

    register(ENV_ID, "envhub.tasks.computation.env:ComputationEnv",
             description="exact computation problems (6 kinds, 3 levels) with a python tool")


__all__ = ["ENV_ID", "register_envs"]
