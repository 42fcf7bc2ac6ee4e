"""ChatML (``<|im_start|>role\\n...<|im_end|>\\n``) with Qwen2.5 / Hermes ``<tool_call>`` tool calls:
SmolLM2, Qwen2.5, Hermes."""

from __future__ import annotations

import json
from collections.abc import Sequence

from envhub.adapters.chat_format.base import ChatFormat
from envhub.parsing import HermesParser
from envhub.types import Message, ToolSpec

#: Qwen2.5-style tool instructions in the system turn, with SmolLM2's default system prompt when a
#: conversation has none. Tool results become one user turn of ``<tool_response>`` blocks, so the
#: model only ever sees the roles it was trained on. ``tojson`` is transformers' filter
#: (``json.dumps`` with ``ensure_ascii=False``), which :meth:`ChatMLFormat.tools_text` mirrors.
CHATML_TOOL_TEMPLATE = (
    "{%- set default_system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system_message = default_system %}{%- set rest = messages %}{%- endif %}"
    "{{- '<|im_start|>system\\n' + system_message }}"
    "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\\n</tool_call>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in rest %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- if call['function'] is defined %}{%- set call = call['function'] %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' }}"
    "{%- if call['arguments'] is string %}{{- call['arguments'] }}{%- else %}{{- call['arguments'] | tojson }}"
    "{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class ChatMLFormat(ChatFormat):
    """``<|im_start|>role\\n...<|im_end|>\\n`` with Qwen2.5 / Hermes ``<tool_call>`` tool calls."""

    name = "chatml"
    models = "SmolLM2, Qwen2.5, Hermes"
    template = CHATML_TOOL_TEMPLATE
    start_token = "<|im_start|>"
    end_token = "<|im_end|>"
    special_tokens = ("<|im_start|>", "<|im_end|>")
    after_end = "\n"
    generation_prompt = "<|im_start|>assistant\n"
    parser = HermesParser
    call_marker = "<tool_call>"

    def turn_text(self, message: dict[str, str]) -> str:
        return f"{self.start_token}{message['role']}\n{message['content']}{self.end_token}\n"

    def observation_messages(self, messages: Sequence[Message]) -> list[dict[str, str]]:
        """Consecutive tool results become one user turn of ``<tool_response>`` blocks, as the
        template writes them; every other message keeps its role."""
        out: list[dict[str, str]] = []
        i = 0
        while i < len(messages):
            if messages[i].role != "tool":
                out.append({"role": messages[i].role, "content": messages[i].content})
                i += 1
                continue
            blocks = []
            while i < len(messages) and messages[i].role == "tool":
                blocks.append(f"<tool_response>\n{messages[i].content}\n</tool_response>")
                i += 1
            out.append({"role": "user", "content": "\n".join(blocks)})
        return out

    def system_with_tools(self, system: str, tools: Sequence[ToolSpec]) -> str:
        if not tools:
            return system
        return (f"{system}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                f"{self.tools_text(tools)}\n</tools>\n\nFor each function call, return a json object with "
                "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')

    @staticmethod
    def tools_text(tools: Sequence[ToolSpec]) -> str:
        """The ``<tools>`` block as the template writes it (used by tests to pin the template)."""
        return "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
