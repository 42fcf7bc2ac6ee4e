"""What every chat family shares: the tokenizer envhub uses, message dicts, and :class:`ChatFormat`.

A family subclass says how its template writes the turns that follow a sampled one (role markers,
tool results, the generation prompt), which tokens end a turn, and which syntax its tool calls use;
rendering the first prompt, closing a turn, parsing, and checking a tokenizer's template against
the incremental rendering are the same for every family and live here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from envhub.parsing import ParseResult, ToolCallParser, format_tool_call, visible_text
from envhub.types import Message, ToolCall, ToolSpec


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer that envhub uses."""

    chat_template: Any

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str: ...

    def convert_tokens_to_ids(self, token: str) -> int: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


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


#: The conversation a tokenizer's template is checked on: one assistant turn answered by two tool
#: results (ids of nine alphanumerics, as Mistral's template demands).
PROBE_TOOL = ToolSpec(name="probe_lookup", description="Look a word up.", parameters={
    "type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]})
PROBE = (Message(role="user", content="What does probe mean?"),
         Message(role="assistant", content="Let me look."),
         Message(role="tool", name="probe_lookup", tool_call_id="probe0001", content="to examine"),
         Message(role="tool", name="probe_lookup", tool_call_id="probe0002", content="a device"))


class ChatFormat:
    """Role markers, stop tokens, tool-call syntax and incremental rendering of one model family."""

    name: ClassVar[str] = ""
    #: the models it is for, as error messages and docs name them
    models: ClassVar[str] = ""
    #: The Jinja template a converted model is stored with (tool-aware); empty: the model's own.
    template: ClassVar[str] = ""
    #: The token that ends an assistant turn; inserted (mask 0) after a turn that stopped without it.
    end_token: ClassVar[str] = ""
    #: Every token a sampled turn may end with; generation stops on each. Default: the end token.
    stop_tokens: ClassVar[tuple[str, ...]] = ()
    #: The added tokens a tokenizer of the family has (the first test of detection).
    special_tokens: ClassVar[tuple[str, ...]] = ()
    #: What joins the end token to the next turn's markers.
    after_end: ClassVar[str] = ""
    #: What the template writes after the env's reply for the model to answer.
    generation_prompt: ClassVar[str] = ""
    #: The parser of the family's tool-call syntax.
    parser: ClassVar[type[ToolCallParser]]
    #: What a tool call starts with; None when the call is the whole reply.
    call_marker: ClassVar[str | None] = None
    #: What the template leaves out of an earlier turn's generation prompt when it renders history
    #: (Qwen3 without thinking: the empty think block); the record keeps it.
    history_drops: ClassVar[str] = ""
    #: Extra keyword arguments of ``apply_chat_template`` (template switches such as ``enable_thinking``).
    template_kwargs: ClassVar[dict[str, Any]] = {}
    #: False: only chosen by name, never detected.
    detected: ClassVar[bool] = True

    # ---- detection -------------------------------------------------------------------------------

    @classmethod
    def missing_tokens(cls, tokenizer: Tokenizer) -> list[str]:
        """The family's special tokens the tokenizer does not know (it maps them to None or ``unk``)."""
        unk_id, unk = getattr(tokenizer, "unk_token_id", None), getattr(tokenizer, "unk_token", None)
        missing = []
        for token in cls.special_tokens:
            i = tokenizer.convert_tokens_to_ids(token)
            if i is None or (i == unk_id and token != unk):
                missing.append(token)
        return missing

    def disagreement(self, tokenizer: Tokenizer) -> str | None:
        """Where the tokenizer's chat template parts from this format on :data:`PROBE` (the prompt,
        then the turn and tool results appended as :meth:`observation_text` writes them, against the
        template's rendering of the whole conversation, less :attr:`history_drops`); None when they
        agree byte for byte."""
        tools = [PROBE_TOOL.to_openai()]
        try:
            prompt = self.render_prompt(tokenizer, PROBE[:1], [PROBE_TOOL])
            full = str(tokenizer.apply_chat_template(message_dicts(PROBE), tools=tools, add_generation_prompt=True,
                                                     tokenize=False, **self.template_kwargs))
        except Exception as exc:  # a template that raises on a tool round is not this family's
            return f"its template fails on a tool round ({type(exc).__name__}: {exc})"
        if PROBE_TOOL.name not in prompt:
            return "its template does not list the tools in the prompt"
        appended = (prompt.removesuffix(self.history_drops) + PROBE[1].content + self.end_token
                    + self.observation_text(PROBE[2:], closed=True))
        if full == appended:
            return None
        at = next((i for i, (a, b) in enumerate(zip(full, appended, strict=False)) if a != b),
                  min(len(full), len(appended)))
        around = slice(max(0, at - 30), at + 40)
        return f"its template writes a tool round as {full[around]!r} where {self.name} appends {appended[around]!r}"

    # ---- rendering -------------------------------------------------------------------------------

    def render_prompt(self, tokenizer: Tokenizer, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        """The first prompt, with the generation prompt, rendered by the tokenizer's own template."""
        return str(tokenizer.apply_chat_template(
            message_dicts(messages), tools=[t.to_openai() for t in tools] or None,
            add_generation_prompt=True, tokenize=False, **self.template_kwargs,
        ))

    def observation_text(self, messages: Sequence[Message], *, closed: bool) -> str:
        """The env's reply as the template would write it after an assistant turn, followed by the
        generation prompt. ``closed``: the model's sampled turn already ends with a stop token;
        otherwise the end token is inserted here (it is then a template token, mask 0)."""
        turns = "".join(self.turn_text(m) for m in self.observation_messages(messages))
        return f"{'' if closed else self.end_token}{self.after_end}{turns}{self.generation_prompt}"

    def observation_messages(self, messages: Sequence[Message]) -> list[dict[str, str]]:
        """The env's reply as chat messages in roles every template of the family knows, which a
        template renders to exactly :meth:`observation_text` (for harnesses that template the
        conversation themselves, e.g. SkyRL's generator)."""
        return [{"role": m.role, "content": m.content} for m in messages]

    def turn_text(self, message: dict[str, str]) -> str:
        """One of :meth:`observation_messages` as the template writes it."""
        raise NotImplementedError

    def system_with_tools(self, system: str, tools: Sequence[ToolSpec]) -> str:
        """A system message's content with the tool instructions the template writes for
        ``tools``: templated without a tool list, it renders as the prompt with them would."""
        raise NotImplementedError(f"the {self.name} template does not list tools in the system message")

    # ---- the sampled turn ------------------------------------------------------------------------

    def strip_end(self, text: str) -> str:
        """An action text without the stop token the model sampled (for re-rendering as a message)."""
        for token in self.stops():
            if token and text.endswith(token):
                return text[: -len(token)]
        return text

    def split_reasoning(self, text: str) -> tuple[str, str]:
        """``(reasoning, content)`` of a sampled text; families without reasoning have none."""
        return "", text

    def call_text(self, calls: Sequence[ToolCall]) -> str | None:
        """A reply of just ``calls`` in the family's tool-call syntax (what SFT teaches a scripted turn
        as); None when the family cannot write them in one turn. Here: Hermes blocks, as scripted
        policies write them (:func:`envhub.parsing.format_tool_call`)."""
        return "".join(format_tool_call(c.name, c.arguments) for c in calls)

    def parse_tool_calls(self, text: str) -> ParseResult:
        """The tool calls of a sampled text in the family's syntax (its reasoning is not read)."""
        return self.parser().parse(text)

    def assistant_message(self, text: str) -> tuple[str, str, list[ToolCall]]:
        """``(reasoning, content, calls)`` of a sampled text without its stop token, as an OpenAI
        assistant message shows it: the content before the calls when they parse, else all of it."""
        reasoning, content = self.split_reasoning(text)
        visible = visible_text(content)
        marked = self.call_marker is None or self.call_marker in visible
        parsed = self.parse_tool_calls(content) if marked else ParseResult()
        if parsed.error or not parsed.calls:
            return reasoning, content, []
        before = visible.split(self.call_marker, 1)[0].strip() if self.call_marker else ""
        return reasoning, before, parsed.calls

    # ---- tokens ----------------------------------------------------------------------------------

    @classmethod
    def stops(cls) -> tuple[str, ...]:
        return cls.stop_tokens or (cls.end_token,)

    def end_token_id(self, tokenizer: Tokenizer) -> int:
        return int(tokenizer.convert_tokens_to_ids(self.end_token))

    def stop_token_ids(self, tokenizer: Tokenizer) -> tuple[int, ...]:
        """The ids of :meth:`stops`, the end token first."""
        return tuple(dict.fromkeys(int(tokenizer.convert_tokens_to_ids(t)) for t in self.stops()))
