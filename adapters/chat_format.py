"""Everything specific to a model family's chat format, in one place.

A model policy renders the first prompt with the chat template once; after that it only ever
*appends*: the tokens the model sampled, and, for each env reply, the tokens of that reply written
with the template's own role markers. :class:`ChatFormat` owns those markers, the tool-call
instructions of the template and the stop token, so that the rendering here and the Jinja template
stored with a model agree byte for byte (``tests/adapters/test_model_policy.py`` checks that they do).

Only the ChatML family (``<|im_start|>`` / ``<|im_end|>``: SmolLM2, Qwen2.5, Hermes) is supported;
a new family is a new subclass registered in :data:`FORMATS`, nothing else changes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from envhub.types import Message, ToolSpec


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer that envhub uses."""

    chat_template: Any

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str: ...

    def convert_tokens_to_ids(self, token: str) -> int: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


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


def template_hash(template: str | None) -> str | None:
    """A short, stable id of a chat template for the trajectory record."""
    if not template:
        return None
    return hashlib.sha256(template.encode("utf-8")).hexdigest()[:16]


def message_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the OpenAI dict form that chat templates read."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.name:
            d["name"] = m.name
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            d["tool_calls"] = [
                {"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        out.append(d)
    return out


class ChatFormat:
    """Role markers, stop token and incremental rendering of one model family."""

    name: ClassVar[str] = ""
    #: The Jinja template a converted model is stored with (tool-aware).
    template: ClassVar[str] = ""
    #: The token that ends an assistant turn; generation stops on it.
    end_token: ClassVar[str] = ""

    @classmethod
    def matches(cls, tokenizer: Tokenizer) -> bool:
        raise NotImplementedError

    def render_prompt(self, tokenizer: Tokenizer, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        """The first prompt, with the generation prompt, rendered by the tokenizer's own template."""
        return str(tokenizer.apply_chat_template(
            message_dicts(messages), tools=[t.to_openai() for t in tools] or None,
            add_generation_prompt=True, tokenize=False,
        ))

    def observation_text(self, messages: Sequence[Message], *, closed: bool) -> str:
        """The env's reply as the template would write it after an assistant turn, followed by the
        generation prompt. ``closed``: the model's sampled turn already ends with the end token;
        otherwise the end token is inserted here (it is then a template token, mask 0)."""
        raise NotImplementedError

    def observation_messages(self, messages: Sequence[Message]) -> list[dict[str, str]]:
        """The env's reply as chat messages in roles every template of the family knows, which a
        template renders to exactly :meth:`observation_text` (for harnesses that template the
        conversation themselves, e.g. SkyRL's generator)."""
        raise NotImplementedError

    def system_with_tools(self, system: str, tools: Sequence[ToolSpec]) -> str:
        """A system message's content with the tool instructions the template writes for
        ``tools``: templated without a tool list, it renders as the prompt with them would."""
        raise NotImplementedError

    def strip_end(self, text: str) -> str:
        """An action text without the end token the model sampled (for re-rendering as a message)."""
        return text[: -len(self.end_token)] if self.end_token and text.endswith(self.end_token) else text

    def end_token_id(self, tokenizer: Tokenizer) -> int:
        return int(tokenizer.convert_tokens_to_ids(self.end_token))


class ChatMLFormat(ChatFormat):
    """``<|im_start|>role\\n...<|im_end|>\\n`` with Qwen2.5 / Hermes ``<tool_call>`` tool calls."""

    name = "chatml"
    template = CHATML_TOOL_TEMPLATE
    start_token = "<|im_start|>"
    end_token = "<|im_end|>"

    @classmethod
    def matches(cls, tokenizer: Tokenizer) -> bool:
        unk = getattr(tokenizer, "unk_token_id", None)
        ids = [tokenizer.convert_tokens_to_ids(t) for t in (cls.start_token, cls.end_token)]
        return all(i is not None and i != unk for i in ids)

    def observation_text(self, messages: Sequence[Message], *, closed: bool) -> str:
        turns = "".join(f"{self.start_token}{m['role']}\n{m['content']}{self.end_token}\n"
                        for m in self.observation_messages(messages))
        return f"{'' if closed else self.end_token}\n{turns}{self.start_token}assistant\n"

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


class SegmentEncoder:
    """``tokenizer.encode(text, add_special_tokens=False)``, faster for chat text, same ids.

    Hugging Face tokenizers cut the text at added tokens (``<|im_start|>``, ...) before anything
    else and encode the pieces in between independently. Doing that cut here lets the pieces be
    cached: the system turn with its tool list is the same in every episode of an env, and a GRPO
    group shares its whole prompt. Used only when every added token is unnormalized and strips no
    whitespace (otherwise the cut would not be the library's); then it falls back to ``encode``.
    ``tests/adapters/test_model_policy.py`` checks equality with ``encode`` on chat text.
    """

    def __init__(self, tokenizer: Tokenizer, cache_size: int = 4096) -> None:
        self.tokenizer = tokenizer
        added = dict(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.exact = backend is not None and all(
            not (getattr(t, "lstrip", False) or getattr(t, "rstrip", False) or getattr(t, "normalized", False)
                 or getattr(t, "single_word", False)) for t in added.values())
        self._ids = {str(getattr(t, "content", t)): int(i) for i, t in added.items()}
        contents = sorted(self._ids, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, contents)) + ")") if contents else None
        self._backend = backend
        self._piece = functools.lru_cache(maxsize=cache_size)(self._encode_piece)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        assert self._backend is not None
        return tuple(self._backend.encode(piece, add_special_tokens=False).ids)

    def clear_cache(self) -> None:
        """Forget every cached piece (a benchmark's cold start)."""
        self._piece.cache_clear()

    def encode(self, text: str) -> list[int]:
        if not self.exact or self._split is None:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        out: list[int] = []
        for piece in self._split.split(text):
            if not piece:
                continue
            special = self._ids.get(piece)
            if special is not None:
                out.append(special)
            else:
                out.extend(self._piece(piece))
        return out


#: Known families, tried in order.
FORMATS: list[type[ChatFormat]] = [ChatMLFormat]


def chat_format_for(tokenizer: Tokenizer) -> ChatFormat:
    """The chat format of a tokenizer's model family; raises for a family envhub does not know."""
    for fmt in FORMATS:
        if fmt.matches(tokenizer):
            return fmt()
    raise ValueError(
        "this tokenizer's chat format is not supported (no <|im_start|>/<|im_end|> tokens); "
        "add a ChatFormat subclass to envhub.adapters.chat_format.FORMATS"
    )
