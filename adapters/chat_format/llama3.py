"""Llama 3.1 / 3.2 / 3.3 Instruct with JSON tool calling, as their published template writes it.

The template lists the tools in the first user message and writes a call as
``{"name": ..., "parameters": {...}}<|eot_id|>``; a tool result is an ``ipython`` turn whose content
is the result as a JSON string (the template's ``tojson`` of a string). The model ends a turn with
``<|eot_id|>``, or ``<|eom_id|>`` when it expects a tool result: both stop generation, and a turn
that stopped on neither is closed with ``<|eot_id|>``. Llama 3.1's built-in tools (``<|python_tag|>``
calls of brave_search, wolfram_alpha, code_interpreter) are not rendered.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from envhub.adapters.chat_format.base import ChatFormat
from envhub.parsing import JsonParser
from envhub.types import ToolCall


class Llama3Format(ChatFormat):
    name = "llama3"
    models = "Llama 3.1, 3.2, 3.3 Instruct"
    end_token = "<|eot_id|>"
    stop_tokens = ("<|eot_id|>", "<|eom_id|>")
    special_tokens = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>")
    generation_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    parser = JsonParser

    def call_text(self, calls: Sequence[ToolCall]) -> str | None:
        """``{"name": ..., "parameters": {...}}``, as the template writes a call; one per turn (the
        template refuses several)."""
        if len(calls) != 1:
            return None
        (call,) = calls
        return f'{{"name": {json.dumps(call.name)}, "parameters": {json.dumps(call.arguments, ensure_ascii=False)}}}'

    def turn_text(self, message: dict[str, str]) -> str:
        if message["role"] == "tool":
            result = json.dumps(message["content"], ensure_ascii=False)  # the template's tojson of a string
            return f"<|start_header_id|>ipython<|end_header_id|>\n\n{result}<|eot_id|>"
        return f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n{message['content'].strip()}<|eot_id|>"
