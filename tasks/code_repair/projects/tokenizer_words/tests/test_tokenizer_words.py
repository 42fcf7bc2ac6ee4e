import pytest

from tokenizer_words import Token, sentence_spans, sentences, tokenize, words


def texts(text, **kwargs):
    return [t.text for t in tokenize(text, **kwargs)]


def kinds(text, **kwargs):
    return [(t.text, t.kind) for t in tokenize(text, **kwargs)]


def test_simple_words_and_offsets():
    tokens = tokenize("Hello,  world!")
    assert tokens == [
        Token("Hello", 0, 5, "word"),
        Token(",", 5, 6, "punct"),
        Token("world", 8, 13, "word"),
        Token("!", 13, 14, "punct"),
    ]


def test_offsets_always_match_source():
    text = "  Dr. O'Neil's 1,000.5km trip... e.g. U.S. (really)?!  "
    for tok in tokenize(text, split_contractions=True):
        assert text[tok.start:tok.end] == tok.text
        assert tok.end > tok.start


def test_empty_and_whitespace_only():
    assert tokenize("") == []
    assert tokenize(" \t\n ") == []
    assert sentences("   ") == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,234", ["1,234"]),
        ("1,234,567.89", ["1,234,567.89"]),
        ("3.14", ["3.14"]),
        ("1234,567", ["1234", ",", "567"]),
        ("12,34", ["12", ",", "34"]),
        ("1,2345", ["1", ",", "2345"]),
        ("1,234,56", ["1,234", ",", "56"]),
        ("5.", ["5", "."]),
        ("5.x", ["5", ".", "x"]),
        ("0.5.6", ["0.5", ".", "6"]),
        ("100,000", ["100,000"]),
        ("1,000,", ["1,000", ","]),
        ("0.5", ["0.5"]),
        ("1,a23 b", ["1", ",", "a23", "b"]),
        ("cost 1,234,567 now", ["cost", "1,234,567", "now"]),
        ("x 1234,567", ["x", "1234", ",", "567"]),
    ],
)
def test_numbers(text, expected):
    assert texts(text) == expected


def test_number_kinds_and_glued_letters():
    assert kinds("42 3rd 10km 2.5x") == [
        ("42", "number"),
        ("3rd", "word"),
        ("10km", "word"),
        ("2.5x", "word"),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("don't", ["don't"]),
        ("well-known fact", ["well-known", "fact"]),
        ("rock'n'roll", ["rock'n'roll"]),
        ("'quoted'", ["'", "quoted", "'"]),
        ("end-", ["end", "-"]),
        ("a--b", ["a", "-", "-", "b"]),
        ("x-1", ["x", "-", "1"]),
        ("it's", ["it's"]),
        ("word'", ["word", "'"]),
        ("v2.0", ["v2", ".", "0"]),
    ],
)
def test_apostrophes_and_hyphens(text, expected):
    assert texts(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("don't", ["do", "n't"]),
        ("can't", ["ca", "n't"]),
        ("It's", ["It", "'s"]),
        ("we'll", ["we", "'ll"]),
        ("they're", ["they", "'re"]),
        ("I've", ["I", "'ve"]),
        ("I'd", ["I", "'d"]),
        ("I'm", ["I", "'m"]),
        ("DON'T", ["DO", "N'T"]),
        ("O'Neil", ["O'Neil"]),
        ("cats", ["cats"]),
        ("n't", ["n't"]),
        ("'s", ["'", "s"]),
    ],
)
def test_split_contractions(text, expected):
    assert texts(text, split_contractions=True) == expected


def test_token_is_immutable():
    tok = tokenize("word")[0]
    with pytest.raises(AttributeError):
        tok.text = "other"


def test_contraction_offsets():
    assert tokenize("so we'll go", split_contractions=True)[1:3] == [
        Token("we", 3, 5, "word"),
        Token("'ll", 5, 8, "word"),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Dr. Who", [("Dr.", "abbrev"), ("Who", "word")]),
        ("mrs. jones", [("mrs.", "abbrev"), ("jones", "word")]),
        ("Acme Inc.", [("Acme", "word"), ("Inc.", "abbrev")]),
        ("cats etc.", [("cats", "word"), ("etc.", "abbrev")]),
        ("Drs. x", [("Drs", "word"), (".", "punct"), ("x", "word")]),
        ("e.g. this", [("e.g.", "abbrev"), ("this", "word")]),
        ("U.S.A.", [("U.S.A.", "abbrev")]),
        ("U.S.Army", [("U.S.", "abbrev"), ("Army", "word")]),
        ("J. Smith", [("J.", "abbrev"), ("Smith", "word")]),
        ("I. Then", [("I", "word"), (".", "punct"), ("Then", "word")]),
        ("plan b.", [("plan", "word"), ("b", "word"), (".", "punct")]),
        ("Dr", [("Dr", "word")]),
    ],
)
def test_abbreviations(text, expected):
    assert kinds(text) == expected


def test_abbreviation_not_split_as_contraction():
    assert kinds("Mr. don't", split_contractions=True) == [
        ("Mr.", "abbrev"),
        ("do", "word"),
        ("n't", "word"),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("wait...", ["wait", "..."]),
        ("wait....", ["wait", "...", "."]),
        ("a..b", ["a", ".", ".", "b"]),
        ("so\u2026", ["so", "\u2026"]),
        ("(x)", ["(", "x", ")"]),
        ("$5!", ["$", "5", "!"]),
    ],
)
def test_punctuation(text, expected):
    assert texts(text) == expected
    assert all(t.kind == "punct" for t in tokenize(text) if not t.text.isalnum())


def test_words_helper():
    text = "Don't panic, Mr. Dent: 42 towels!"
    assert words(text) == ["Don't", "panic", "Mr.", "Dent", "42", "towels"]
    assert words(text, split_contractions=True, lower=True) == [
        "do", "n't", "panic", "mr.", "dent", "42", "towels",
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One. Two. Three.", ["One.", "Two.", "Three."]),
        ("Really?! Yes!", ["Really?!", "Yes!"]),
        ("No end", ["No end"]),
        ("Trailing.", ["Trailing."]),
        ("Dr. Smith is here. He waits.", ["Dr. Smith is here.", "He waits."]),
        ("It costs 3.50 dollars. Cheap.", ["It costs 3.50 dollars.", "Cheap."]),
        ("Wait... what? Wait... What?", ["Wait... what?", "Wait...", "What?"]),
        ("ends with dots...", ["ends with dots..."]),
        ("hmm. ok then.", ["hmm. ok then."]),
        ("Step 1. 2 more.", ["Step 1.", "2 more."]),
        ("Go (now). Later.", ["Go (now).", "Later."]),
        ("J. Smith left. Bye.", ["J. Smith left.", "Bye."]),
        ("So do I. Then go.", ["So do I.", "Then go."]),
        ("?? What. No.", ["??", "What.", "No."]),
        ("... And so.", ["...", "And so."]),
        ("Hmm. ... Okay.", ["Hmm.", "...", "Okay."]),
    ],
)
def test_sentences(text, expected):
    assert sentences(text) == expected


def test_sentences_closing_quotes():
    text = 'He said "Stop." Then he left. Stop. "Why?" she asked.'
    assert sentences(text) == [
        'He said "Stop."',
        "Then he left.",
        "Stop.",
        '"Why?" she asked.',
    ]


def test_sentence_after_bracket_close():
    assert sentences("Done.) Next one.") == ["Done.)", "Next one."]


def test_sentence_spans_are_offsets():
    text = "  Hi there!  Bye.  "
    assert sentence_spans(text) == [(2, 11), (13, 17)]
    assert [text[s:e] for s, e in sentence_spans(text)] == sentences(text)


def test_sentence_split_before_punctuation_start():
    assert sentences('Ok. "Quoted" start.') == ["Ok.", '"Quoted" start.']
    assert sentences("Ok... (aside) more.") == ["Ok... (aside) more."]
