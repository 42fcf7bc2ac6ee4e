"""Per-episode limits: :class:`Budget`, and how an env's ``budget`` argument becomes one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Budget:
    """Limits per episode. Exceeding turns, tool calls or seconds ends it as ``budget_exhausted``;
    more than ``max_format_errors`` unparseable or invalid actions end it as ``format_error``.
    """

    max_turns: int = 8
    max_tool_calls: int = 16
    max_agent_seconds: float = 600.0
    max_format_errors: int = 2
    max_action_chars: int = 32_768
    max_observation_chars: int = 8_192

    def __post_init__(self) -> None:
        """A wrong type fails when the budget is made, not in every episode it would run."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            wants_int = isinstance(f.default, int)
            ok_types = (int,) if wants_int else (int, float)
            if isinstance(value, bool) or not isinstance(value, ok_types):
                kind = "an integer" if wants_int else "a number"
                raise TypeError(f"budget field {f.name} must be {kind}, got {value!r}")
            if value < 0 or value != value:  # negative, or NaN
                raise ValueError(f"budget field {f.name} must not be negative, got {value!r}")


def check_budget(budget: Any, default: Budget) -> Budget:
    """``budget``: a Budget, a dict of Budget fields, or None for ``default``."""
    if budget is None:
        return default
    if isinstance(budget, dict):
        known = {f.name: f for f in dataclasses.fields(Budget)}
        unknown = sorted(set(budget) - set(known))
        if unknown:
            raise TypeError(f"unknown budget fields {unknown}; known: {', '.join(known)}")
        budget = replace(default, **budget)
    elif not isinstance(budget, Budget):
        raise TypeError(
            f"budget must be a Budget or a dict of its fields (e.g. {{\"max_turns\": 4}}), "
            f"not {type(budget).__name__} {budget!r}"
        )
    return budget
