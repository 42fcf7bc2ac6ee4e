"""TITO's view of the client's messages: OpenAI's form, how two messages compare, and how a
re-sent history that does not extend the record is named (see :mod:`envhub.adapters.tito`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from envhub import chat_wire
from envhub.chat_wire import content_text
from envhub.types import Message


class TitoError(Exception):
    """An error answered to the client in OpenAI's error shape."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.type = status, message, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": None}}



def calls_key(calls: Any) -> str:
    out = []
    for call in calls or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args) if args.strip() else {}
        out.append([fn.get("name"), args])
    return json.dumps(out, sort_keys=True)


def message_key(msg: dict[str, Any]) -> tuple[str, str, str]:
    return (str(msg.get("role")), content_text(msg.get("content")), calls_key(msg.get("tool_calls")))


def to_message(msg: dict[str, Any]) -> Message:
    """One OpenAI message as an envhub Message; a malformed one is answered as a 400."""
    try:
        return chat_wire.to_message(msg)
    except ValueError as exc:
        raise TitoError(400, str(exc)) from None


def classify_divergence(history: list[dict[str, Any]], incoming: list[dict[str, Any]],
                        same: Callable[[int, dict[str, Any]], bool]) -> str:
    """Name what the client did to the history (information for people; every kind re-bases).
    ``same(j, msg)``: whether ``msg`` is history message ``j`` (sampled turns compare leniently)."""
    n = len(history)
    if len(incoming) < n and all(same(i, m) for i, m in enumerate(incoming)):
        return "truncated"
    if len(incoming) >= n:
        unused = set(range(n))
        for j in range(n):
            hit = next((i for i in sorted(unused) if same(j, incoming[i])), None)
            if hit is None:
                break
            unused.discard(hit)
        else:
            return "reordered"
    if len(incoming) < n:
        return "compressed"
    return "edited"


def brief(msg: dict[str, Any] | None, limit: int = 120) -> dict[str, Any] | None:
    if msg is None:
        return None
    text = content_text(msg.get("content"))
    return {"role": msg.get("role"), "content": text[:limit] + ("…" if len(text) > limit else ""),
            "tool_calls": json.loads(calls_key(msg.get("tool_calls"))) or None}

