"""Mistral's v3-Tekken tool calling, as the template of Mistral-Nemo-Instruct-2407 writes it.

``[AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS][INST]system\\n\\nuser[/INST]``, a call as
``[TOOL_CALLS][{"name": ..., "arguments": {...}}]</s>``, each result as
``[TOOL_RESULTS]{"content": ..., "call_id": "..."}[/TOOL_RESULTS]``, a later user message as
``[INST]...[/INST]``; no generation prompt.

The template moves things as a conversation grows, which an append-only record cannot follow: it
writes the tool list before the *last* user message, and the system prompt only into a user message
that ends the conversation (so only into the first prompt). The record keeps both where the first
prompt put them; a later user message is appended as a plain ``[INST]`` turn, and a system message
from the env as one too (the template refuses one there). A result needs the call's id of nine
characters: when the call had none (the model may write ``"id"``; mistral-common and vLLM make one
up otherwise), the id is the first nine hex digits of the SHA-256 of the tool's name and result.
Mistral's v3 (SentencePiece: ``[INST] ``, ``[TOOL_CALLS] [``) and v7 (``[SYSTEM_PROMPT]``) templates
space their markers differently and are not this format.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from envhub.adapters.chat_format.base import ChatFormat
from envhub.parsing import MistralParser
from envhub.types import Message, ToolCall


def call_id(message: Message) -> str:
    """The id a tool result is written with: its call's, else one derived from the result."""
    if message.tool_call_id:
        return message.tool_call_id
    return hashlib.sha256(f"{message.name or ''}\n{message.content}".encode()).hexdigest()[:9]


class MistralFormat(ChatFormat):
    name = "mistral"
    models = "Mistral v3-Tekken (Mistral-Nemo-Instruct-2407)"
    end_token = "</s>"
    special_tokens = ("[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                      "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "</s>")
    parser = MistralParser
    call_marker = "[TOOL_CALLS]"

    def observation_messages(self, messages: Sequence[Message]) -> list[dict[str, str]]:
        """Tool results with their call ids; every other message as a user message."""
        return [{"role": "tool", "content": m.content, "tool_call_id": call_id(m)} if m.role == "tool"
                else {"role": "user", "content": m.content} for m in messages]

    def call_text(self, calls: Sequence[ToolCall]) -> str | None:
        """``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]``, as the template writes calls (a
        call without an id is written without one)."""
        if not calls:
            return None
        items = [json.dumps({"name": c.name, "arguments": c.arguments, **({"id": c.id} if c.id else {})},
                            ensure_ascii=False) for c in calls]
        return f"[TOOL_CALLS][{', '.join(items)}]"

    def turn_text(self, message: dict[str, str]) -> str:
        if message["role"] == "tool":
            result = f'{{"content": {message["content"]}, "call_id": "{message["tool_call_id"]}"}}'
            return f"[TOOL_RESULTS]{result}[/TOOL_RESULTS]"
        return f"[INST]{message['content']}[/INST]"
