import pytest

from expr_eval import Token, TokenizeError, tokenize


def kinds_and_texts(text):
    return [(t.kind, t.text) for t in tokenize(text)]


def test_tokenize_simple():
    assert kinds_and_texts("1 + x") == [("number", "1"), ("op", "+"), ("name", "x"), ("end", "")]


def test_token_positions():
    tokens = tokenize("  12*(ab_1)")
    assert [t.position for t in tokens] == [2, 4, 5, 6, 10, 11]
    assert tokens[-1] == Token("end", "", 11)


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), ("3.5", 3.5), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("2.5E-2", 0.025), ("7e+1", 70.0), ("007", 7)],
)
def test_number_literals(text, value):
    token = tokenize(text)[0]
    assert token.kind == "number"
    assert token.text == text
    assert token.value == value
    assert type(token.value) is type(value)


def test_double_star_is_power():
    assert kinds_and_texts("2**3") == [("number", "2"), ("op", "^"), ("number", "3"), ("end", "")]
    assert [t.position for t in tokenize("2**3")] == [0, 1, 3, 4]


def test_all_operators():
    assert [t.text for t in tokenize("+-*/%^(),")][:-1] == list("+-*/%^(),")


def test_names():
    assert kinds_and_texts("_a1 b") == [("name", "_a1"), ("name", "b"), ("end", "")]
    assert kinds_and_texts("2x") == [("number", "2"), ("name", "x"), ("end", "")]


@pytest.mark.parametrize(
    ("text", "position"),
    [("1 $ 2", 2), (".", 0), ("1 + .", 4), ("1.2.3", 3), ("1..2", 2), ("1e", 2), ("1e+", 3), ("x = 1", 2), ("é", 0), ("3 # 4", 2)],
)
def test_tokenize_errors(text, position):
    with pytest.raises(TokenizeError) as info:
        tokenize(text)
    assert info.value.position == position
    assert f"at position {position}" in str(info.value)


def test_tokens_are_immutable():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        tokenize("1")[0].text = "2"


def test_empty_text():
    assert tokenize("") == [Token("end", "", 0)]
    assert tokenize("   ") == [Token("end", "", 3)]
