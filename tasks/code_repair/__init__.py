"""Code-repair tasks: small real projects with validated synthetic bugs and hidden tests."""


def register_envs() -> None:
    from envhub.registry import register

    from .env import CodeRepairEnv

    register(
        CodeRepairEnv.env_id,
        CodeRepairEnv,
        description="fix planted bugs in 25 small Python projects; hidden tests grade",
        sandbox="docker | bwrap (runs agent code)",
    )
