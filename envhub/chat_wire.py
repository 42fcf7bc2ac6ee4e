"""OpenAI's chat-completions wire, read and written with envhub's types: what the TITO session
server and bridges whose harness calls a model endpoint (``verifiers:``) both speak.

Bad input raises :class:`ValueError` with a one-line reason; a server answers it as a 400.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from envhub.types import Message, ToolCall, ToolSpec


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
                raise ValueError("only text content parts are supported")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise ValueError(f"unsupported message content of type {type(content).__name__}")


def to_message(msg: dict[str, Any]) -> Message:
    """One OpenAI message as an envhub :class:`~envhub.types.Message` (``developer`` is ``system``)."""
    role = msg.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"unsupported message role {role!r}")
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
                    raise ValueError(f"tool call arguments are not JSON: {args[:100]!r}") from None
            if not isinstance(args, dict) or not fn.get("name"):
                raise ValueError("a tool call needs a function name and object arguments")
            calls.append(ToolCall(name=str(fn["name"]), arguments=args, id=call.get("id")))
    return Message(role=role, content=content_text(msg.get("content")), name=msg.get("name"),
                   tool_call_id=msg.get("tool_call_id"), tool_calls=calls)


def to_tool_spec(tool: dict[str, Any]) -> ToolSpec:
    """An OpenAI function tool (``{"type": "function", "function": {...}}``) as a ToolSpec."""
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    if not isinstance(fn, dict) or not fn.get("name"):
        raise ValueError("a tool needs a function with a name")
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    return ToolSpec(name=str(fn["name"]), description=str(fn.get("description") or ""), parameters=params)


def completion(content: str, tool_calls: list[ToolCall], *, model: str, finish_reason: str | None = None,
               usage: dict[str, int] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``chat.completion`` object with one choice; tool calls get ids where they have none."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": call.id or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
            for call in tool_calls
        ]
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    body = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    return body | (extra or {})


def stream_events(result: dict[str, Any]) -> list[str]:
    """A completion as server-sent events, the way ``stream=true`` is answered: one content chunk
    (generation is not incremental here), the finish chunk with the usage, then ``[DONE]``."""
    choice = result["choices"][0]
    base = {k: result[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": choice["message"].get("content")}
    if choice["message"].get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(choice["message"]["tool_calls"])]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
         "usage": result["usage"]},
    ]
    return [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]


__all__ = ["completion", "content_text", "stream_events", "to_message", "to_tool_spec"]
