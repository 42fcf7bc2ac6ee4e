"""Computation tasks: big integers, fractions, dates, units, statistics, linear systems."""

from envhub.tasks.computation.env import ComputationEnv, ComputationTasks


def register_envs() -> None:
    from envhub.registry import register

    register(
        ComputationEnv.env_id,
        ComputationEnv,
        description="exact computation problems (6 kinds, 3 levels) with a python tool",
        sandbox="any (python tool)",
    )


__all__ = ["ComputationEnv", "ComputationTasks", "register_envs"]
