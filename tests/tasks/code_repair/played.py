"""One tool call of a code-repair episode played in a test, which must leave the episode going."""

from __future__ import annotations

from envhub.parsing import format_tool_call


def tool(env, name: str, **arguments: object) -> str:
    """One tool call; the episode must go on after it."""
    obs = env.step(format_tool_call(name, arguments))
    assert not obs.done, (name, arguments, obs.outcome, obs.verdict and obs.verdict.detail)
    return obs.messages[-1].content
