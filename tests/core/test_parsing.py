import pytest

from envhub.parsing import PARSERS, DefaultParser, HermesParser, JsonParser, format_tool_call


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>',
    'Let me compute.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>',
    '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}</tool_call>',
    '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}',  # stop sequence ate the close tag
    '{"name": "python", "arguments": {"code": "print(1)"}}',
    '```json\n{"name": "python", "arguments": {"code": "print(1)"}}\n```',
])
def test_parses_hermes_and_plain_json(text):
    result = DefaultParser().parse(text)
    assert result.error is None
    assert [(c.name, c.arguments) for c in result.calls] == [("python", {"code": "print(1)"})]


def test_several_calls_in_one_turn():
    text = format_tool_call("a", {"x": 1}) + "\n" + format_tool_call("b", {})
    assert [c.name for c in HermesParser().parse(text).calls] == ["a", "b"]
    assert [c.name for c in JsonParser().parse('[{"name": "a"}, {"name": "b"}]').calls] == ["a", "b"]


@pytest.mark.parametrize("text, needle", [
    ("just some prose", "no tool call found"),
    ("<tool_call>{oops}</tool_call>", "invalid JSON"),
    ('<tool_call>["python"]</tool_call>', "must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
    ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "a", "arguments": "not json"}</tool_call>', "not JSON"),
    ('<tool_call>{"name": "a", "extra": 1}</tool_call>', "unexpected keys"),
    ("", "no tool call found"),
])
def test_malformed_calls_explain_themselves(text, needle):
    result = DefaultParser().parse(text)
    assert result.calls == []
    assert needle in result.error


def test_the_answer_tag_parser_reads_one_final_answer_or_a_tool_call():
    from envhub.parsing import AnswerTagParser, answer_syntax

    parser = AnswerTagParser()
    (call,) = parser.parse("6 + 1 is 7, so <answer> 7 </answer>").calls
    assert (call.name, call.arguments) == ("answer", {"answer": "7"})
    (call,) = parser.parse('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>').calls
    assert call.name == "python"
    hedge = parser.parse("<answer>7</answer> or <answer>8</answer>")
    assert hedge.calls == [] and "2 <answer> blocks" in hedge.error
    missing = parser.parse("The answer is 7.")
    assert missing.calls == [] and "<answer>...</answer>" in missing.error
    assert answer_syntax(parser, "X") == "<answer>X</answer>"
    assert answer_syntax(PARSERS["default"](), "X").startswith("<tool_call>")


@pytest.mark.parametrize("text, answer", [
    ("6 + 1 = 7", "7"),
    ("The total is 1,234.", "1234"),
    ("-1,000,000.5 in all", "-1000000.5"),
    ("the digits are 1,2,3", "3"),  # a list, not one hundred and twenty-three
    ("1,2345", "2345"),  # not a thousands group
    ("First 3, then -12.5", "-12.5"),
    ("so x = 7/8\n", "7/8"),
    ("I think 7 but the answer is <answer>8</answer>", "8"),  # a tag wins over the prose
])
def test_the_last_number_parser_grades_exactly_one_value(text, answer):
    (call,) = PARSERS["last_number"]().parse(text).calls
    assert (call.name, call.arguments) == ("answer", {"answer": answer})


def test_the_last_number_parser_explains_a_reply_without_a_number_and_refuses_two_tags():
    parser = PARSERS["last_number"]()
    none = parser.parse("I do not know.")
    assert none.calls == [] and "end with the answer as a number" in none.error
    hedge = parser.parse("<answer>7</answer> <answer>8</answer>")
    assert hedge.calls == [] and "2 <answer> blocks" in hedge.error
    (call,) = parser.parse('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>').calls
    assert call.name == "python"


# ---- the syntax of every chat family envhub renders (envhub.adapters.chat_format) ----------------------

@pytest.mark.parametrize("text", [
    '{"name": "python", "parameters": {"code": "print(1)"}}<|eot_id|>',  # Llama 3: the reply is the call
    '<|python_tag|>{"name": "python", "parameters": {"code": "print(1)"}}<|eom_id|>',
    '[TOOL_CALLS][{"name": "python", "arguments": {"code": "print(1)"}}]</s>',  # Mistral
    '<think>\nA <tool_call>{"name": "answer"}</tool_call>?\n</think>\n\n<tool_call>\n'
    '{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call><|im_end|>',  # Qwen3
])
def test_the_default_parser_reads_every_familys_calls(text):
    result = DefaultParser().parse(text)
    assert result.error is None
    assert [(c.name, c.arguments) for c in result.calls] == [("python", {"code": "print(1)"})]


def test_mistral_calls_keep_their_ids_and_explain_bad_json():
    from envhub.parsing import MistralParser

    text = '[TOOL_CALLS][{"name": "a", "arguments": {}, "id": "abc123XYZ"}, {"name": "b", "arguments": {"x": 1}}]</s>'
    assert [(c.name, c.id) for c in MistralParser().parse(text).calls] == [("a", "abc123XYZ"), ("b", None)]
    assert "invalid JSON" in DefaultParser().parse("[TOOL_CALLS][{oops}]").error
    assert MistralParser().parse("no calls").error == "no [TOOL_CALLS] block found"


def test_reasoning_is_not_an_action():
    from envhub.parsing import visible_text

    assert visible_text("<think>\nhm\n</think>\n\nDone.") == "\n\nDone."
    assert visible_text("<think>\ncut off while thinking <tool_call>") == ""  # never closed: nothing to act on
    assert visible_text("plain") == "plain"
    unclosed = DefaultParser().parse('<think>\nI will write <tool_call>{"name": "python"}</tool_call>')
    assert unclosed.calls == [] and "no tool call found" in unclosed.error
    (call,) = PARSERS["last_number"]().parse("<think>\nmaybe 7, or 9\n</think>\n\nIt is 8.").calls
    assert call.arguments == {"answer": "8"}


def test_answer_parsers_read_a_json_call_and_still_grade_a_list_by_its_last_number():
    for name in ("answer_tag", "last_number"):
        (call,) = PARSERS[name]().parse('{"name": "answer", "parameters": {"answer": "7"}}<|eot_id|>').calls
        assert (call.name, call.arguments) == ("answer", {"answer": "7"})
    (call,) = PARSERS["last_number"]().parse("[1, 2, 3]").calls
    assert call.arguments == {"answer": "3"}
