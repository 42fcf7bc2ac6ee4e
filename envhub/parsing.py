"""Tool-call parsers: from the model's raw sampled text to structured calls.

Parsing works on the text exactly as sampled, so what is recorded and what was executed are the
same thing. A parser never raises on model output: it returns calls, or an error message written
for the model to read and correct itself. Parsers read a reply's visible text: its reasoning
(``<think>...</think>``, as Qwen3 writes it) is no action.

The default parser reads the tool-call syntax of every chat family envhub renders
(:mod:`envhub.adapters.chat_format`): Hermes ``<tool_call>`` blocks (ChatML, Qwen3), Mistral's
``[TOOL_CALLS]`` list, and a reply that is one JSON call (Llama 3's ``{"name": ..., "parameters": ...}``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from envhub.types import Action, ToolCall

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_MISTRAL = "[TOOL_CALLS]"
#: Llama 3.1's marker of a call it writes for the tool environment, before the JSON.
_PYTHON_TAG = "<|python_tag|>"
_SPECIAL = re.compile(r"<\|[a-z_]+\|>|</s>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
#: A number in prose: commas only as thousands separators (``1,234``), so a list ``1,2,3`` is three numbers.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+)?")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")
#: How deep a call's arguments may nest (dicts and lists); deeper cannot be stored as a record.
MAX_ARGUMENT_DEPTH = 64


def sanitize_text(text: str) -> str:
    """Replace lone surrogates (e.g. a ``\\ud800`` JSON escape) with U+FFFD so the text is valid UTF-8."""
    return _SURROGATE.sub("\ufffd", text)


def sanitize_value(value: Any, max_depth: int | None = None) -> Any:
    """``value`` with every string in it (dict keys included) passed through :func:`sanitize_text`.

    Iterative, so a deeply nested value cannot exhaust the stack; with ``max_depth``, a value
    whose dicts and lists nest deeper than that raises ValueError.
    """
    if isinstance(value, str):
        return sanitize_text(value)
    if not isinstance(value, dict | list):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(root, 0, value, 1)]  # (container, slot, original, depth)
    while stack:
        parent, slot, item, depth = stack.pop()
        if isinstance(item, dict | list) and max_depth is not None and depth > max_depth:
            raise ValueError(f"arguments are nested more than {max_depth} levels deep")
        if isinstance(item, str):
            parent[slot] = sanitize_text(item)
        elif isinstance(item, dict):
            out: dict[Any, Any] = {}
            parent[slot] = out
            for k, v in item.items():
                key = sanitize_text(k) if isinstance(k, str) else k
                out[key] = None
                stack.append((out, key, v, depth + 1))
        elif isinstance(item, list):
            lst: list[Any] = [None] * len(item)
            parent[slot] = lst
            stack.extend((lst, i, v, depth + 1) for i, v in enumerate(item))
        else:
            parent[slot] = item
    return root[0]


def visible_text(text: str) -> str:
    """``text`` without its reasoning: what follows the last ``</think>``; nothing for a reply that
    opens ``<think>`` and never closes it (it was cut off while reasoning)."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return "" if text.lstrip().startswith("<think>") else text


def strip_end_tokens(text: str) -> str:
    """``text`` without the end-of-turn tokens a model samples after its last word (``<|eot_id|>``,
    ``<|eom_id|>``, ``<|im_end|>``, ``</s>``): decoded sampled text carries them."""
    text = text.rstrip()
    while True:
        last = text.rfind("<") if text.endswith(">") else -1
        if last < 0 or not _SPECIAL.fullmatch(text[last:]):
            return text
        text = text[:last].rstrip()


def clean_call(call: ToolCall) -> ToolCall:
    """``call`` with lone surrogates replaced everywhere; ValueError if its arguments nest deeper
    than :data:`MAX_ARGUMENT_DEPTH` (such a call cannot be stored as a record)."""
    return call.model_copy(update={
        "name": sanitize_text(call.name),
        "arguments": sanitize_value(call.arguments, max_depth=MAX_ARGUMENT_DEPTH),
        "id": sanitize_text(call.id) if call.id is not None else None,
    })


@dataclass
class ParseResult:
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


class ToolCallParser(Protocol):
    def parse(self, text: str) -> ParseResult: ...


def _call_from_obj(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        raise ValueError(f"a tool call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError('a tool call needs a string "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f'"arguments" of `{name}` is a string that is not JSON: {exc.msg}') from None
        except RecursionError:
            raise ValueError(f'"arguments" of `{name}` is a string of JSON nested too deeply') from None
    if not isinstance(args, dict):
        raise ValueError(f'"arguments" of `{name}` must be a JSON object, got {type(args).__name__}')
    unknown = set(obj) - {"name", "arguments", "parameters", "id"}
    if unknown:
        raise ValueError(f"unexpected keys in tool call: {sorted(unknown)}")
    call_id = obj.get("id")
    return clean_call(ToolCall(name=name, arguments=args, id=call_id if isinstance(call_id, str) else None))


def _loads(blob: str, *, prefix: bool = False) -> Any:
    """The JSON value ``blob`` holds; with ``prefix``, the one it starts with (what follows is ignored)."""
    try:
        return json.JSONDecoder().raw_decode(blob)[0] if prefix else json.loads(blob)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:  # e.g. thousands of "[": the model's text, so the model's error to fix
        raise ValueError("invalid JSON (nested too deeply)") from None


def _calls(obj: Any) -> list[ToolCall]:
    return [_call_from_obj(o) for o in (obj if isinstance(obj, list) else [obj])]


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen2.5)."""

    def parse(self, text: str) -> ParseResult:
        blocks = _HERMES.findall(visible_text(text))
        if not blocks:
            return ParseResult(error="no <tool_call> block found")
        calls = []
        for blob in blocks:
            try:
                calls.append(_call_from_obj(_loads(blob)))
            except ValueError as exc:
                return ParseResult(error=f"malformed tool call: {exc}")
        return ParseResult(calls=calls)


class MistralParser:
    """``[TOOL_CALLS]`` followed by a JSON list of ``{"name": ..., "arguments": {...}}`` (Mistral's
    v3 tokenizers); what follows the list (``</s>``) is not read."""

    def parse(self, text: str) -> ParseResult:
        chunks = visible_text(text).split(_MISTRAL)[1:]
        if not chunks:
            return ParseResult(error=f"no {_MISTRAL} block found")
        calls: list[ToolCall] = []
        for chunk in chunks:
            try:
                calls += _calls(_loads(chunk.lstrip(), prefix=True))
            except ValueError as exc:
                return ParseResult(error=f"malformed tool call: {exc}")
        return ParseResult(calls=calls)


class JsonParser:
    """The whole action is a JSON tool call (or a list of them), optionally in a code fence, after
    Llama 3.1's ``<|python_tag|>`` and before the end-of-turn token the model sampled."""

    def parse(self, text: str) -> ParseResult:
        blob = strip_end_tokens(visible_text(text)).strip().removeprefix(_PYTHON_TAG).lstrip()
        fenced = _FENCE.match(blob)
        if fenced:
            blob = fenced.group(1)
        if not blob.startswith(("{", "[")):
            return ParseResult(error="no JSON tool call found")
        try:
            return ParseResult(calls=_calls(_loads(blob)))
        except ValueError as exc:
            return ParseResult(error=f"malformed tool call: {exc}")


class DefaultParser:
    """Hermes blocks when the text has any, else Mistral's ``[TOOL_CALLS]``, else a JSON call."""

    def __init__(self) -> None:
        self.hermes = HermesParser()
        self.mistral = MistralParser()
        self.json = JsonParser()

    @staticmethod
    def marked(text: str) -> bool:
        """Whether ``text`` holds a tool-call marker (a ``<tool_call>`` or ``[TOOL_CALLS]``) outside its reasoning."""
        visible = visible_text(text)
        return "<tool_call>" in visible or _MISTRAL in visible

    def parse(self, text: str) -> ParseResult:
        visible = visible_text(text)
        if "<tool_call>" in visible:
            return self.hermes.parse(visible)
        if _MISTRAL in visible:
            return self.mistral.parse(visible)
        result = self.json.parse(visible)
        if result.error == "no JSON tool call found":
            result.error = f"no tool call found. Call a tool as {TOOL_CALL_EXAMPLE}"
        return result


class AnswerTagParser:
    """Tool calls as the default parser reads them; text without one may give its final answer as
    ``<answer>...</answer>``, which is a call of the terminal tool ``answer``.

    For models that answer in prose without calling tools (an untrained small model, a
    reasoning-gym style prompt). Exactly one tag: two answers are a hedge, not an answer.
    """

    tool = "answer"

    def __init__(self) -> None:
        self.tools = DefaultParser()

    def parse(self, text: str) -> ParseResult:
        text = visible_text(text)
        if self.tools.marked(text):
            return self.tools.parse(text)
        as_json = self.tools.json.parse(text)
        if as_json.calls:
            return as_json
        answers = _ANSWER.findall(text)
        if len(answers) == 1:
            return ParseResult(calls=[clean_call(ToolCall(name=self.tool, arguments={"answer": answers[0].strip()}))])
        if answers:
            return ParseResult(error=f"{len(answers)} <answer> blocks found: give exactly one final answer")
        return ParseResult(error="no final answer found. Write it as <answer>...</answer>, or call a tool as "
                                 f"{TOOL_CALL_EXAMPLE}")


class LastNumberParser(AnswerTagParser):
    """As the answer-tag parser; prose without a tag answers with its last number (``-12``, ``3.5``,
    ``7/8``; commas only as thousands separators), as lm-evaluation-harness's flexible extraction reads GSM8K.

    For numeric tasks where the format is not what is being learned: an untrained model that
    writes ``3 + 4 = 7`` has answered 7. Only one value is ever graded, so listing candidates
    gains nothing: the last one is the answer.
    """

    def parse(self, text: str) -> ParseResult:
        text = visible_text(text)
        if self.tools.marked(text) or "<answer>" in text or self.tools.json.parse(text).calls:
            return super().parse(text)
        numbers = _NUMBER.findall(text)
        if not numbers:
            return ParseResult(error="no final answer found: end with the answer as a number, or write it as "
                                     "<answer>...</answer>")
        answer = numbers[-1].replace(",", "")
        return ParseResult(calls=[clean_call(ToolCall(name=self.tool, arguments={"answer": answer}))])


def answer_syntax(parser: ToolCallParser, placeholder: str = "...") -> str:
    """How a final answer is written under ``parser``, for system prompts: an ``<answer>`` tag where
    the parser reads one, else a call of the ``answer`` tool."""
    if isinstance(parser, AnswerTagParser):
        return f"<answer>{placeholder}</answer>"
    return format_tool_call("answer", {"answer": placeholder})


PARSERS: dict[str, type[ToolCallParser]] = {
    "default": DefaultParser,
    "answer_tag": AnswerTagParser,
    "last_number": LastNumberParser,
    "hermes": HermesParser,
    "mistral": MistralParser,
    "json": JsonParser,
}


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The Hermes text form of a call, as a scripted policy would write it and as system prompts
    show it (the form the default and Hermes parsers read)."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


#: The call syntax in general, for prompts and error messages.
TOOL_CALL_EXAMPLE = format_tool_call("<tool>", {"<argument>": "<value>"})


def coerce_action(action: str | Action | dict[str, Any]) -> Action:
    """``action`` (text, an Action or its dict) as an Action with sanitized text; TypeError for anything else."""
    if isinstance(action, Action):
        text = action.text
    elif isinstance(action, str):
        text, action = action, Action(text=action)
    elif isinstance(action, dict):
        action = Action.model_validate(action)
        text = action.text
    else:
        raise TypeError(f"an action is text, an Action or a dict, not {type(action).__name__}")
    clean = sanitize_text(text)
    return action if clean == text else action.model_copy(update={"text": clean})


def sanitize_calls(calls: list[ToolCall]) -> tuple[list[ToolCall], str | None]:
    """Structured calls cleaned as parsed ones are; a too deeply nested one drops them all, with why."""
    clean: list[ToolCall] = []
    for call in calls:
        try:
            clean.append(clean_call(call))
        except ValueError as exc:
            return [], f"malformed tool call `{sanitize_text(call.name)}`: {exc}"
    return clean, None


def read_action(action: str | Action | dict[str, Any]) -> tuple[Action, str | None]:
    """``action`` as an Action with sanitized text and tool calls (:func:`coerce_action`,
    :func:`sanitize_calls`), and why its structured calls cannot run (None: they can, or it has none)."""
    action = coerce_action(action)
    if not action.tool_calls:
        return action, None
    calls, error = sanitize_calls(action.tool_calls)
    return action.model_copy(update={"tool_calls": calls}), error


def action_calls(action: Action, parser: ToolCallParser, max_chars: int) -> tuple[list[ToolCall], str | None]:
    """The tool calls of ``action`` (its structured ones, else those ``parser`` reads in its text), or
    why it has none that can run: it is longer than ``max_chars``, unparseable, or calls nothing."""
    if len(action.text) > max_chars:
        return [], f"your message is {len(action.text)} characters long; the limit is {max_chars}"
    if action.tool_calls is not None:
        calls = action.tool_calls
    else:
        parsed = parser.parse(action.text)
        if parsed.error:
            return [], parsed.error
        calls = parsed.calls
    return calls, None if calls else "no tool call found"
