import pytest

from csv_lite import CsvError, RaggedRowError, format_field, format_row, parse, parse_records, parse_with_lines, write


def test_simple_rows():
    assert parse("a,b,c\n1,2,3\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_no_trailing_newline():
    assert parse("a,b\n1,2") == [["a", "b"], ["1", "2"]]


def test_empty_input():
    assert parse("") == []
    assert parse("\n\n") == []


def test_empty_fields():
    assert parse(",\n") == [["", ""]]
    assert parse("a,,b") == [["a", "", "b"]]
    assert parse("a,") == [["a", ""]]
    assert parse(",a") == [["", "a"]]


def test_blank_lines_skipped():
    assert parse("a\n\nb\n\n") == [["a"], ["b"]]


@pytest.mark.parametrize("text", ["a,b\r\nc,d\r\n", "a,b\rc,d\r", "a,b\nc,d"])
def test_line_endings(text):
    assert parse(text) == [["a", "b"], ["c", "d"]]


def test_quoted_fields():
    assert parse('"a,b","c"\n') == [["a,b", "c"]]
    assert parse('"",x') == [["", "x"]]
    assert parse('""') == [[""]]


def test_escaped_quotes():
    assert parse('"say ""hi"""') == [['say "hi"']]
    assert parse('""""') == [['"']]


def test_newlines_inside_quotes():
    assert parse('"line1\nline2",x\ny,z') == [["line1\nline2", "x"], ["y", "z"]]
    assert parse('"a\r\nb"') == [["a\r\nb"]]


def test_whitespace_preserved():
    assert parse(" a , b ") == [[" a ", " b "]]


def test_custom_delimiter_and_quotechar():
    assert parse("a;b;'c;d'", delimiter=";", quotechar="'") == [["a", "b", "c;d"]]
    assert parse("a\tb,c", delimiter="\t") == [["a", "b,c"]]
    assert parse("'it''s'", quotechar="'") == [["it's"]]


@pytest.mark.parametrize(
    ("delimiter", "quotechar"),
    [(",,", '"'), ("", '"'), (",", ""), (",", ","), ("\n", '"'), (",", "\r"), ('"', '"')],
)
def test_invalid_dialect(delimiter, quotechar):
    with pytest.raises(ValueError):
        parse("a", delimiter=delimiter, quotechar=quotechar)


def test_unterminated_quote_reports_opening_position():
    with pytest.raises(CsvError) as info:
        parse('a,b\nc,"oops\nmore')
    assert info.value.line == 2
    assert info.value.column == 3
    assert str(info.value) == "unterminated quoted field (line 2, column 3)"


def test_character_after_closing_quote():
    with pytest.raises(CsvError) as info:
        parse('x\n"ab"c,d')
    assert (info.value.line, info.value.column) == (2, 5)


def test_quote_in_unquoted_field():
    with pytest.raises(CsvError) as info:
        parse('ab"c')
    assert (info.value.line, info.value.column) == (1, 3)


def test_error_line_counts_newlines_inside_quotes():
    with pytest.raises(CsvError) as info:
        parse('"a\nb\nc",x\ny"')
    assert (info.value.line, info.value.column) == (4, 2)
    with pytest.raises(CsvError) as info:
        parse('"a\rb",x\ry"')
    assert (info.value.line, info.value.column) == (3, 2)
    with pytest.raises(CsvError) as info:
        parse('"a\r\nb",x\r\ny"')
    assert (info.value.line, info.value.column) == (3, 2)


def test_error_column_after_newline_inside_quotes():
    with pytest.raises(CsvError) as info:
        parse('"a\nbc"x')
    assert (info.value.line, info.value.column) == (2, 4)
    with pytest.raises(CsvError) as info:
        parse('"a\rbc"x')
    assert (info.value.line, info.value.column) == (2, 4)


def test_csv_error_is_value_error():
    assert issubclass(CsvError, ValueError)
    assert issubclass(RaggedRowError, CsvError)


def test_parse_with_lines():
    text = 'h1,h2\n\n"multi\nline",b\nc,d\n'
    assert parse_with_lines(text) == [(1, ["h1", "h2"]), (3, ["multi\nline", "b"]), (5, ["c", "d"])]


def test_parse_records():
    assert parse_records("name,age\nann,30\nbob,41\n") == [
        {"name": "ann", "age": "30"},
        {"name": "bob", "age": "41"},
    ]
    assert parse_records("") == []
    assert parse_records("only,header\n") == []


def test_parse_records_ragged_row():
    with pytest.raises(RaggedRowError) as info:
        parse_records("a,b\n1,2\n\n3\n")
    err = info.value
    assert (err.record, err.expected, err.actual, err.line, err.column) == (2, 2, 1, 4, 1)
    assert str(err) == "record 2 has 1 fields, expected 2 (line 4, column 1)"
    with pytest.raises(RaggedRowError) as info:
        parse_records("a,b\n1,2,3\n")
    assert (info.value.record, info.value.actual) == (1, 3)


def test_parse_records_bad_header():
    with pytest.raises(CsvError) as info:
        parse_records("a,,b\n1,2,3")
    assert info.value.column == 2
    with pytest.raises(CsvError) as info:
        parse_records("a,b,a\n1,2,3")
    assert "duplicate" in str(info.value)
    assert info.value.column == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        ("", ""),
        (None, ""),
        (42, "42"),
        ("a,b", '"a,b"'),
        ('say "hi"', '"say ""hi"""'),
        ("two\nlines", '"two\nlines"'),
        ("cr\rhere", '"cr\rhere"'),
        (" lead", '" lead"'),
        ("trail ", '"trail "'),
        ("in side", "in side"),
    ],
)
def test_format_field(value, expected):
    assert format_field(value) == expected


def test_format_field_custom_dialect():
    assert format_field("a;b", delimiter=";") == '"a;b"'
    assert format_field("a,b", delimiter=";") == "a,b"
    assert format_field("it's", quotechar="'") == "'it''s'"


def test_format_row():
    assert format_row(["a", "b c", "d,e"]) == 'a,b c,"d,e"'
    assert format_row([""]) == '""'
    assert format_row([None]) == '""'
    assert format_row(["", ""]) == ","
    assert format_row(["x"]) == "x"
    with pytest.raises(ValueError):
        format_row([])
    with pytest.raises(ValueError):
        format_row(["a"], delimiter='"')


def test_write():
    rows = [["id", "note"], [1, 'He said "ok", then left'], [2, ""]]
    assert write(rows) == 'id,note\n1,"He said ""ok"", then left"\n2,\n'
    assert write([["a", "b"]], delimiter="|", line_terminator="\r\n") == "a|b\r\n"
    assert write([]) == ""


def test_round_trip():
    rows = [["a", "b,c", '"q"'], ["", "multi\nline", " x "], [""]]
    assert parse(write(rows)) == rows
    assert parse(write(rows, delimiter="\t", quotechar="'"), delimiter="\t", quotechar="'") == rows
