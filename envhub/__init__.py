"""envhub: environments and rewards for reinforcement learning of LLM agents.

``import envhub`` registers every installed env (built-in families and ``envhub.envs`` plugins)
with envhub's registry and with Gymnasium as ``envhub/<Name>-v0``.
"""

from envhub._version import __version__
from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.errors import ContextOverflowError, EngineError, InfraError, ToolError
from envhub.registry import EnvSpec, get_spec, list_envs, load_plugins, make, register
from envhub.tools import tool
from envhub.types import (
    Action,
    Message,
    Observation,
    Outcome,
    OutcomeClass,
    Task,
    ToolCall,
    ToolSpec,
    TrajectoryRecord,
    Turn,
    Verdict,
)


def connect(url: str, token: str | None = None, **options: object) -> object:
    """A remote env served by ``envhub serve`` with the local env's reset/step API (needs httpx)."""
    from envhub.server.client import connect as _connect

    return _connect(url, token, **options)


load_plugins()

__all__ = [
    "Action",
    "Budget",
    "ContextOverflowError",
    "EngineError",
    "Env",
    "EnvSpec",
    "Episode",
    "InfraError",
    "Message",
    "Observation",
    "Outcome",
    "OutcomeClass",
    "Task",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "TrajectoryRecord",
    "Turn",
    "Verdict",
    "__version__",
    "connect",
    "get_spec",
    "list_envs",
    "load_plugins",
    "make",
    "register",
    "tool",
]
