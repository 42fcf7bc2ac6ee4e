"""Every chat family against its published template, token for token.

No model hub is reachable here, so each family's tokenizer is SmolLM2's (the test suite's) with the
family's special tokens added and its published chat template (``tests/fixtures/chat_templates``,
see the README there for where each was read). The model policy renders the first prompt, appends
the sampled tokens (scripted tool calls written as the family's template writes them) and the env's
replies; before every turn the ids handed to the engine must be the template's rendering of the
conversation so far, structured tool calls included, and the record must end as the template ends
the whole conversation. Where a template rewrites history (Qwen3's reasoning, Mistral's system
prompt and tool list) the record keeps what was sampled, and the tests pin exactly what differs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from token_runs import smollm2_tokenizer

from envhub.adapters.chat_format import ChatFormat, UnsupportedChatFormat, chat_format_for
from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.model_policy import ModelPolicy
from envhub.adapters.tito import TitoServer
from envhub.parsing import DefaultParser
from envhub.policies import make_policy
from envhub.types import Message, Observation, ToolCall, ToolSpec

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
TOOLS = [ToolSpec(name="python", description="Run code.", parameters={"type": "object", "properties": {
    "code": {"type": "string"}}, "required": ["code"]}), ToolSpec(name="answer", description="Submit é.")]
SYSTEM = Message(role="system", content="Solve it.")
USER = Message(role="user", content="What are 6*7 and 6*8?")
FINAL = "6*7 = 42 and 6*8 = 48."


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # the templates' tojson


@dataclass(frozen=True)
class Family:
    name: str
    template: str | None  # a fixture file; None: the test model's own (envhub's ChatML)
    tokens: tuple[str, ...] = ()
    bos: str | None = None
    eos: str | None = None
    end: str = "<|im_end|>"
    parallel: bool = True  # the template writes several calls in one turn
    system: bool = True  # a system message re-templates as the first prompt wrote it
    #: the family's pre-tokenizer split, where its newlines split unlike SmolLM2's (the generation
    #: prompt of Llama 3 ends in "\n\n", which its tokenizer keeps one token whatever follows)
    split: str | None = None

    def call_text(self, calls: Sequence[ToolCall], reasoning: str) -> str:
        """A turn of calls as the family's template writes an assistant message with ``tool_calls``."""
        if self.name == "chatml":
            return "".join(f'\n<tool_call>\n{{"name": "{c.name}", "arguments": {dumps(c.arguments)}}}\n</tool_call>'
                           for c in calls)
        if self.name == "qwen3":
            return f"<think>\n{reasoning}\n</think>\n\n" + "\n".join(
                f'<tool_call>\n{{"name": "{c.name}", "arguments": {dumps(c.arguments)}}}\n</tool_call>' for c in calls)
        if self.name == "llama3":
            (c,) = calls
            return f'{{"name": "{c.name}", "parameters": {dumps(c.arguments)}}}'
        return "[TOOL_CALLS][" + ", ".join(
            dumps({"name": c.name, "arguments": c.arguments})[:-1] + f', "id": "{c.id}"}}' for c in calls) + "]"

    def final_text(self, reasoning: str) -> str:
        return f"<think>\n{reasoning}\n</think>\n\n{FINAL}" if self.name == "qwen3" else FINAL


#: Llama 3's tokenizer.json pre-tokenizer pattern.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

FAMILIES = {f.name: f for f in [
    Family("chatml", None),
    Family("qwen3", "qwen3.jinja", ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                    "</tool_response>")),
    Family("llama3", "llama3.2.jinja", ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                        "<|eom_id|>", "<|python_tag|>"), "<|begin_of_text|>", "<|eot_id|>",
           end="<|eot_id|>", parallel=False, split=LLAMA3_SPLIT),
    Family("mistral", "mistral-nemo.jinja", ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                                             "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"), "<s>", "</s>",
           end="</s>", system=False),
]}


def family_tokenizer(family: Family, template: str | None = None) -> Any:
    """A fresh SmolLM2 tokenizer (the shared one of ``token_runs`` must not change) as the family's."""
    from transformers import AutoTokenizer

    from envhub.adapters.engines.tiny import build_tiny_model

    tok = AutoTokenizer.from_pretrained(str(build_tiny_model()))
    if family.split:
        from tokenizers import Regex, pre_tokenizers

        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(family.split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if family.tokens:
        tok.add_tokens(list(family.tokens), special_tokens=True)
    if family.bos:
        tok.bos_token = family.bos
    if family.eos:
        tok.eos_token = family.eos
    if template or family.template:
        tok.chat_template = template or (TEMPLATES / str(family.template)).read_text()
    return tok


@cache
def cached_tokenizer(name: str) -> Any:
    return family_tokenizer(FAMILIES[name])


class Recording(ScriptedEngine):
    """The scripted model, keeping the ids of every prompt it was handed."""

    def __init__(self, tokenizer: Any, texts: Sequence[str], **kwargs: Any) -> None:
        turns = iter(texts)
        super().__init__(tokenizer, lambda prompt: next(turns), **kwargs)
        self.prompts: list[list[int]] = []

    def generate(self, prompt_ids: list[int], params: Any) -> Any:
        self.prompts.append(list(prompt_ids))
        return super().generate(prompt_ids, params)


def template_text(tok: Any, history: Sequence[dict[str, Any]], fmt: ChatFormat, *, prompt: bool = True) -> str:
    return str(tok.apply_chat_template(list(history), tools=[t.to_openai() for t in TOOLS], add_generation_prompt=prompt,
                                       tokenize=False, **fmt.template_kwargs))


def encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def assistant(calls: Sequence[ToolCall] = (), content: str = "", reasoning: str = "") -> dict[str, Any]:
    d: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        d["reasoning_content"] = reasoning
    if calls:
        d["tool_calls"] = [{"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                           for c in calls]
    return d


def tool_dicts(results: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"role": "tool", "name": m.name, "tool_call_id": m.tool_call_id, "content": m.content} for m in results]


def play(policy: ModelPolicy, start: Sequence[Message], replies: Sequence[Sequence[Message]]) -> Any:
    agent = policy.start(None, Observation(messages=list(start), tools=TOOLS), seed=0)  # type: ignore[arg-type]
    outputs = [agent.act(Observation(messages=list(start), tools=TOOLS))]
    outputs += [agent.act(Observation(messages=list(reply))) for reply in replies]
    return agent, outputs


def results_for(calls: Sequence[ToolCall], contents: Sequence[str]) -> list[Message]:
    return [Message(role="tool", name=c.name, tool_call_id=c.id, content=text) for c, text in zip(calls, contents, strict=True)]


# ---- detection -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_detected_from_its_template(name: str) -> None:
    assert chat_format_for(cached_tokenizer(name)).name == name


def test_an_unsupported_template_is_refused_when_the_policy_is_built(tmp_path: Path, monkeypatch: Any) -> None:
    # QwQ's generation prompt opens the think block itself, which Qwen3's does not
    qwq = (TEMPLATES / "qwen3.jinja").read_text().replace(
        "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking", "{{- '<|im_start|>assistant\\n<think>\\n' }}\n    {%- if enable_thinking")
    tok = family_tokenizer(FAMILIES["qwen3"], qwq)
    with pytest.raises(UnsupportedChatFormat) as refused:
        ModelPolicy(ScriptedEngine(tok, []), tok)
    message = str(refused.value)
    assert "qwen3: its template writes a tool round as" in message and "<think>" in message
    for family in ("chatml (SmolLM2, Qwen2.5, Hermes)", "qwen3 (Qwen3)", "llama3 (Llama 3.1, 3.2, 3.3 Instruct)",
                   "mistral (Mistral v3-Tekken (Mistral-Nemo-Instruct-2407))", "chat_format=NAME",
                   "a ChatFormat subclass added to envhub.adapters.chat_format.FORMATS"):
        assert family in message

    # hf: refuses it from the tokenizer, before the model is loaded
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.adapters.engines.transformers_engine import TransformersEngine

    model = tmp_path / "model"
    shutil.copytree(build_tiny_model(), model)
    (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    monkeypatch.setattr(TransformersEngine, "from_pretrained", staticmethod(lambda *a, **k: pytest.fail("loaded")))
    with pytest.raises(UnsupportedChatFormat, match="chatml: its template"):
        make_policy(f"hf:{model}")


def test_the_spec_names_a_family_and_the_name_is_checked_too() -> None:
    from envhub.adapters.engines.tiny import build_tiny_model

    tiny = build_tiny_model()
    tok = smollm2_tokenizer()
    assert make_policy(f"hf:{tiny}?chat_format=chatml", engine=ScriptedEngine(tok, [])).format.name == "chatml"
    with pytest.raises(UnsupportedChatFormat, match=r"llama3: the tokenizer lacks <\|begin_of_text\|>"):
        make_policy(f"hf:{tiny}?chat_format=llama3", engine=ScriptedEngine(tok, []))
    with pytest.raises(ValueError, match="unknown chat_format 'gemma'; known: qwen3, chatml, llama3, mistral"):
        make_policy(f"hf:{tiny}?chat_format=gemma", engine=ScriptedEngine(tok, []))


# ---- the incremental rendering is the template's -------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_multi_turn_tool_conversation_renders_as_the_template_does(name: str) -> None:
    family, tok = FAMILIES[name], cached_tokenizer(name)
    start = [SYSTEM, USER] if family.system else [USER]
    first = [ToolCall(name="python", arguments={"code": "print(6*7)"}, id="call00001")]
    second = [ToolCall(name="python", arguments={"code": "print(6*8)"}, id="call00002"),
              ToolCall(name="python", arguments={"code": 'print("é")'}, id="call00003")][: 2 if family.parallel else 1]
    reasons = ["I should run it.", "Now the second one.", "Both are known."]
    texts = [family.call_text(first, reasons[0]), family.call_text(second, reasons[1]), family.final_text(reasons[2])]
    replies = [results_for(first, ["42\n"]), results_for(second, ["48\n", 'said "é"'][: len(second)])]
    engine = Recording(tok, texts, end_token=family.end)
    policy = ModelPolicy(engine, tok)
    fmt = policy.format
    assert fmt.name == name
    agent, outputs = play(policy, start, replies)

    # before every turn, the engine was handed the template's rendering of the conversation so far
    history: list[dict[str, Any]] = [{"role": m.role, "content": m.content} for m in start]
    for turn, (calls, reply) in enumerate(zip([first, second], replies, strict=True)):
        assert engine.prompts[turn] == encode(tok, template_text(tok, history, fmt)), turn
        history += [assistant(calls, reasoning=reasons[turn] if name == "qwen3" else ""), *tool_dicts(reply)]
    assert engine.prompts[2] == encode(tok, template_text(tok, history, fmt))
    history.append(assistant(content=FINAL, reasoning=reasons[2] if name == "qwen3" else ""))
    whole = encode(tok, template_text(tok, history, fmt, prompt=False))
    record = agent.record.ids()
    assert whole[: len(record)] == record and not tok.decode(whole[len(record):]).strip()

    # every turn stopped on the family's end token, and the calls parse (the family's parser and the env's default)
    end = tok.convert_tokens_to_ids(family.end)
    assert policy.end_id == end and end in policy.params.stop_token_ids
    for out, calls in zip(outputs, [first, second, []], strict=True):
        assert out.sample.token_ids[-1] == end and out.text.endswith(family.end)
        for parsed in (fmt.parse_tool_calls(out.text), DefaultParser().parse(out.text)):
            want = [(c.name, c.arguments, c.id if name == "mistral" else None) for c in calls]
            assert [(c.name, c.arguments, c.id) for c in parsed.calls] == want
            assert (parsed.error is None) == bool(calls)
    assert [len(o.observation_ids) > 0 and o.observation_ids[0] != end for o in outputs[1:]] == [True, True]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_turn_that_stops_without_the_end_token_is_closed_by_the_template_token(name: str) -> None:
    family, tok = FAMILIES[name], cached_tokenizer(name)
    start = [SYSTEM, USER] if family.system else [USER]
    calls = [ToolCall(name="python", arguments={"code": "print(6*7)"}, id="call00001")]
    engine = Recording(tok, [family.call_text(calls, "Run it."), family.final_text("Done.")], end_token=None)
    agent, outputs = play(ModelPolicy(engine, tok), start, [results_for(calls, ["42"])])
    end = tok.convert_tokens_to_ids(family.end)
    assert outputs[0].sample.token_ids[-1] != end and outputs[1].observation_ids[0] == end
    record = agent.record
    assert record.response_mask[len(outputs[0].sample.token_ids)] == 0
    fmt = chat_format_for(tok)
    history = [*[{"role": m.role, "content": m.content} for m in start],
               assistant(calls, reasoning="Run it." if name == "qwen3" else ""), *tool_dicts(results_for(calls, ["42"]))]
    assert engine.prompts[1] == encode(tok, template_text(tok, history, fmt))


def test_llama_stops_on_eom_too_and_a_turn_ending_with_it_is_closed() -> None:
    family, tok = FAMILIES["llama3"], cached_tokenizer("llama3")
    calls = [ToolCall(name="python", arguments={"code": "print(6*7)"})]
    engine = Recording(tok, [family.call_text(calls, "")], end_token="<|eom_id|>")
    policy = ModelPolicy(engine, tok)
    eom, eot = (tok.convert_tokens_to_ids(t) for t in ("<|eom_id|>", "<|eot_id|>"))
    assert set(policy.params.stop_token_ids) >= {eom, eot} and policy.end_id == eot
    agent = policy.start(None, Observation(messages=[SYSTEM, USER], tools=TOOLS), seed=0)  # type: ignore[arg-type]
    out = agent.act(Observation(messages=[SYSTEM, USER], tools=TOOLS))
    assert out.sample.token_ids[-1] == eom and policy.format.strip_end(out.text) == family.call_text(calls, "")
    reply = policy.format.observation_text(results_for(calls, ["42"]), closed=True)
    assert reply == ('<|start_header_id|>ipython<|end_header_id|>\n\n"42"<|eot_id|>'
                     "<|start_header_id|>assistant<|end_header_id|>\n\n")
    # the template writes <|eot_id|> after a call: the record keeps the <|eom_id|> that was sampled
    history = [{"role": "system", "content": SYSTEM.content}, {"role": "user", "content": USER.content}, assistant(calls)]
    rendered = template_text(tok, history, policy.format, prompt=False)
    assert tok.decode(agent.record.ids()) == rendered.removesuffix("<|eot_id|>") + "<|eom_id|>"


# ---- history the template rewrites: the record keeps what was sampled ---------------------------------

def test_qwen3_keeps_the_reasoning_its_template_drops_from_history() -> None:
    tok = cached_tokenizer("qwen3")
    first = "<think>\nIt is 42.\n</think>\n\nI think it is 42."
    engine = Recording(tok, [first, FAMILIES["qwen3"].final_text("Call the tool.")], end_token="<|im_end|>")
    policy = ModelPolicy(engine, tok)
    nudge = Message(role="user", content="Format error: no tool call found.")
    play(policy, [SYSTEM, USER], [[nudge]])
    history = [{"role": "system", "content": SYSTEM.content}, {"role": "user", "content": USER.content},
               assistant(content="I think it is 42.", reasoning="It is 42."), {"role": "user", "content": nudge.content}]
    rendered = template_text(tok, history, policy.format)
    recorded = tok.decode(engine.prompts[1])
    assert "It is 42." not in rendered  # the template dropped the reasoning before the last user message...
    assert recorded == rendered.replace("<|im_start|>assistant\nI think it is 42.",
                                        "<|im_start|>assistant\n<think>\nIt is 42.\n</think>\n\nI think it is 42.")


def test_qwen3_without_thinking_by_name() -> None:
    tok = cached_tokenizer("qwen3")
    fmt = chat_format_for(tok, "qwen3_nothink")
    calls = [ToolCall(name="python", arguments={"code": "print(6*7)"})]
    text = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
    engine = Recording(tok, [text, FINAL], end_token="<|im_end|>")
    policy = ModelPolicy(engine, tok, chat_format="qwen3_nothink")
    assert policy.format.name == "qwen3_nothink" and fmt.template_kwargs == {"enable_thinking": False}
    play(policy, [SYSTEM, USER], [results_for(calls, ["42"])])
    start = [{"role": "system", "content": SYSTEM.content}, {"role": "user", "content": USER.content}]
    empty = "<think>\n\n</think>\n\n"
    assert tok.decode(engine.prompts[0]) == template_text(tok, start, fmt)
    assert tok.decode(engine.prompts[0]).endswith(empty)
    rendered = template_text(tok, [*start, assistant(calls), *tool_dicts(results_for(calls, ["42"]))], fmt)
    # the template drops the empty think block of an earlier turn; the record keeps the prompt's
    assert tok.decode(engine.prompts[1]) == rendered.replace("<|im_start|>assistant\n<tool_call>",
                                                             f"<|im_start|>assistant\n{empty}<tool_call>")


def test_mistral_keeps_the_system_prompt_and_tool_list_where_the_first_prompt_put_them() -> None:
    family, tok = FAMILIES["mistral"], cached_tokenizer("mistral")
    calls = [ToolCall(name="python", arguments={"code": "print(6*7)"}, id="call00001")]
    nudge = Message(role="user", content="Now submit it.")
    engine = Recording(tok, [family.call_text(calls, ""), "It is 42.", FINAL], end_token="</s>")
    policy = ModelPolicy(engine, tok)
    play(policy, [SYSTEM, USER], [results_for(calls, ["42"]), [nudge]])
    start = [{"role": "system", "content": SYSTEM.content}, {"role": "user", "content": USER.content}]
    assert engine.prompts[0] == encode(tok, template_text(tok, start, policy.format))
    after_tools = template_text(tok, [*start, assistant(calls), *tool_dicts(results_for(calls, ["42"]))], policy.format)
    # the template writes the system prompt only into a user message that ends the conversation
    assert tok.decode(engine.prompts[1]) == after_tools.replace(f"[INST]{USER.content}", f"[INST]{SYSTEM.content}\n\n{USER.content}")
    history = [*start, assistant(calls), *tool_dicts(results_for(calls, ["42"])), assistant(content="It is 42."),
               {"role": "user", "content": nudge.content}]
    rendered, recorded = template_text(tok, history, policy.format), tok.decode(engine.prompts[2])
    tools = recorded[len("<s>"): recorded.index("[INST]")]
    assert tools.startswith("[AVAILABLE_TOOLS][") and tools.endswith("[/AVAILABLE_TOOLS]")
    # ...and the tool list before the last user message; the record keeps both where they were
    assert rendered.endswith(f"{tools}[INST]{SYSTEM.content}\n\n{nudge.content}[/INST]")
    assert recorded.endswith(f"It is 42.</s>[INST]{nudge.content}[/INST]")
    assert recorded.replace(tools, "").replace(f"{SYSTEM.content}\n\n", "") == rendered.replace(tools, "").replace(
        f"{SYSTEM.content}\n\n", "")


def test_mistral_gives_a_call_without_an_id_a_derived_one() -> None:
    fmt = chat_format_for(cached_tokenizer("mistral"))
    (call,) = fmt.parse_tool_calls('[TOOL_CALLS][{"name": "python", "arguments": {"code": "1"}}]</s>').calls
    assert call.id is None
    text = fmt.observation_text([Message(role="tool", name="python", content="1")], closed=True)
    call_id = json.loads(text.removeprefix("[TOOL_RESULTS]").removesuffix("[/TOOL_RESULTS]"))["call_id"]
    assert len(call_id) == 9 and call_id.isalnum()  # what the template demands of an id
    assert text == fmt.observation_text([Message(role="tool", name="python", content="1")], closed=True)  # stable


# ---- TITO ----------------------------------------------------------------------------------------------

def test_tito_shows_qwen3_reasoning_apart_and_keeps_it_when_a_client_drops_it() -> None:
    family, tok = FAMILIES["qwen3"], cached_tokenizer("qwen3")
    calls = [ToolCall(name="python", arguments={"code": "print(6*7)"})]
    sampled = family.call_text(calls, "Compute it.")
    server = TitoServer(ScriptedEngine(tok, [sampled, family.final_text("Done.")]), tok)
    assert server.info()["chat_format"] == "qwen3"
    tools = [t.to_openai() for t in TOOLS]
    start = [{"role": "system", "content": SYSTEM.content}, {"role": "user", "content": USER.content}]
    session = server.create_session()
    reply = server.chat(session.id, {"messages": start, "tools": tools})
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] == "Compute it." and message["content"] is None
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"code": "print(6*7)"}
    # the client re-sends the call without its reasoning, as Qwen3's template would render it
    resent = {"role": "assistant", "content": None, "tool_calls": message["tool_calls"]}
    result = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "42"}
    final = server.chat(session.id, {"messages": [*start, resent, result], "tools": tools})["choices"][0]["message"]
    assert final == {"role": "assistant", "content": FINAL, "reasoning_content": "Done."}
    trajectory = session.trajectory()
    assert trajectory["divergences"] == [] and len(trajectory["segments"]) == 1
    assert tok.decode(trajectory["response_ids"]).startswith(sampled + "<|im_end|>")


# ---- the parsers ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, text", [
    ("qwen3", '<think>\nMaybe <tool_call>{"name": "answer"}</tool_call>?\n</think>\n\n<tool_call>\n'
              '{"name": "python", "arguments": {"code": "1"}}\n</tool_call><|im_end|>'),
    ("llama3", '<|python_tag|>{"name": "python", "parameters": {"code": "1"}}<|eom_id|>'),
    ("mistral", '[TOOL_CALLS][{"name": "python", "arguments": {"code": "1"}}]</s>'),
])
def test_each_family_parses_its_own_syntax(name: str, text: str) -> None:
    fmt = chat_format_for(cached_tokenizer(name))
    for parsed in (fmt.parse_tool_calls(text), DefaultParser().parse(text)):
        assert [(c.name, c.arguments) for c in parsed.calls] == [("python", {"code": "1"})]
    reasoning, content, calls = fmt.assistant_message(fmt.strip_end(text))
    assert [c.name for c in calls] == ["python"] and content == ""
    assert reasoning == ('Maybe <tool_call>{"name": "answer"}</tool_call>?' if name == "qwen3" else "")


# ---- scripted calls in the family's syntax (what SFT teaches) ------------------------------------------


def test_each_family_writes_calls_as_its_template_does() -> None:
    one = [ToolCall(name="python", arguments={"code": 'print("é")'}, id="call00001")]
    two = [*one, ToolCall(name="answer", arguments={"answer": "42"}, id="call00002")]
    for name in ("llama3", "mistral"):
        fmt = chat_format_for(cached_tokenizer(name))
        assert fmt.call_text(one) == FAMILIES[name].call_text(one, "")
        parsed = fmt.parse_tool_calls(fmt.call_text(one) or "")
        assert [(c.name, c.arguments) for c in parsed.calls] == [("python", {"code": 'print("é")'})]
    assert chat_format_for(cached_tokenizer("mistral")).call_text(two) == FAMILIES["mistral"].call_text(two, "")
    assert chat_format_for(cached_tokenizer("llama3")).call_text(two) is None  # its template refuses two
    assert chat_format_for(cached_tokenizer("chatml")).call_text(one) == \
        '<tool_call>{"name": "python", "arguments": {"code": "print(\\"\\u00e9\\")"}}</tool_call>'


@pytest.mark.parametrize("name, marker", [("llama3", '{"name": "python", "parameters": '),
                                          ("mistral", '[TOOL_CALLS][{"name": "python", "arguments": '),
                                          ("chatml", '<tool_call>{"name": "python", "arguments": ')])
def test_sft_teaches_a_gold_call_in_the_familys_own_syntax(name: str, marker: str, tmp_path: Path) -> None:
    """A gold episode (Hermes calls) re-encoded for a family equals, token for token, the record of a
    model of that family that sampled the same calls in its own syntax, and the env accepts them."""
    from envhub.registry import make
    from envhub.rollout.collect import EpisodePlan, describe_policy, run_episode
    from envhub.rollout.runner import run_rollouts
    from envhub.trainer.sft import reencode
    from envhub.types import TrajectoryRecord

    env_id, kwargs = "envhub/Computation-v0", {"sandbox": "process", "levels": [1], "kinds": ["bigint"]}
    run_rollouts(env_id, make_policy("gold"), out_dir=tmp_path / "gold", episodes=1, env_kwargs=kwargs)
    (record,) = [TrajectoryRecord.model_validate_json(line)
                 for line in (tmp_path / "gold" / "trajectories.jsonl").read_text().splitlines()]
    tok, family = cached_tokenizer(name), FAMILIES[name]
    fmt = chat_format_for(tok)
    texts = [fmt.call_text(turn.tool_calls) or "" for turn in record.turns]
    assert texts[0].startswith(marker), texts  # a python call, then the answer call
    policy = ModelPolicy(Recording(tok, texts, end_token=family.end), tok)
    with make(env_id, **kwargs) as env:
        plan = EpisodePlan(record.episode_id, record.group_id, record.task_id, 0, 0)
        sampled = run_episode(env, policy, plan, describe_policy(policy))
    assert sampled.outcome == "success" and sampled.num_turns == 2, sampled.model_dump(include={"outcome", "verdict", "error", "turns"})
    view = reencode(record, policy)
    assert (view.prompt_ids, view.response_ids, view.response_mask) == (
        sampled.prompt_ids, sampled.response_ids, sampled.response_mask)
