"""TITO's view of the client's messages: OpenAI's form, how two messages compare, and how a
re-sent history that does not extend the record is named (see :mod:`envhub.adapters.tito`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from envhub.types import Message, ToolCall


class TitoError(Exception):
    """An error answered to the client in OpenAI's error shape."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.type = status, message, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": None}}



def content_text(content: Any) -> str:
    """OpenAI content: a string, None, or a list of parts of which only text parts are supported."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise TitoError(400, "only text content parts are supported", "unsupported_content")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise TitoError(400, f"unsupported message content of type {type(content).__name__}")


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
    role = msg.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise TitoError(400, f"unsupported message role {role!r}")
    calls = None
    if msg.get("tool_calls"):
        calls = []
        for call in msg["tool_calls"]:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            args = fn.get("arguments") or {}
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    raise TitoError(400, f"tool call arguments are not JSON: {args[:100]!r}") from None
            if not isinstance(args, dict) or not fn.get("name"):
                raise TitoError(400, "a tool call needs a function name and object arguments")
            calls.append(ToolCall(name=str(fn["name"]), arguments=args, id=call.get("id")))
    return Message(role=role, content=content_text(msg.get("content")), name=msg.get("name"),
                   tool_call_id=msg.get("tool_call_id"), tool_calls=calls)



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

