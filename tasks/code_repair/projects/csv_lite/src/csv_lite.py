"""A small CSV reader and writer with quoting, escaped quotes and custom delimiters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_NEWLINES = "\r\n"


class CsvError(ValueError):
    """Malformed CSV input; ``line`` and ``column`` are 1-based positions."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"{message} (line {line}, column {column})")
        self.line = line
        self.column = column


class RaggedRowError(CsvError):
    """A data record has a different number of fields than the header."""

    def __init__(self, record: int, expected: int, actual: int, line: int) -> None:
        super().__init__(f"record {record} has {actual} fields, expected {expected}", line, 1)
        self.record = record
        self.expected = expected
        self.actual = actual


def _validate_dialect(delimiter: str, quotechar: str) -> None:
    """Raise ValueError unless delimiter and quotechar are distinct single non-newline chars."""
    if len(delimiter) != 1 or len(quotechar) != 1:
        raise ValueError("delimiter and quotechar must be single characters")
    if delimiter == quotechar:
        raise ValueError("delimiter and quotechar must differ")
    if delimiter in _NEWLINES or quotechar in _NEWLINES:
        raise ValueError("delimiter and quotechar cannot be newline characters")


def parse_with_lines(text: str, delimiter: str = ",", quotechar: str = '"') -> list[tuple[int, list[str]]]:
    """Parse ``text`` and return ``(line_number, fields)`` pairs, one per record.

    ``line_number`` is the 1-based line on which the record starts. See
    :func:`parse` for the accepted syntax.
    """
    _validate_dialect(delimiter, quotechar)
    records: list[tuple[int, list[str]]] = []
    row: list[str] = []
    field: list[str] = []
    state = "start"
    line, line_start, row_line = 1, 0, 1
    i = 0
    while i < len(text):
        ch = text[i]
        column = i - line_start + 1
        if ch in _NEWLINES and state != "quoted":
            if state != "start" or row:
                row.append("".join(field))
                records.append((row_line, row))
            row, field, state = [], [], "start"
            if ch == "\r" and text[i + 1:i + 2] == "\n":
                i += 1
            line, line_start = line + 1, i + 1
            row_line = line
        elif state == "quoted":
            if ch == quotechar:
                state = "after_quote"
            else:
                field.append(ch)
                if ch == "\n" or (ch == "\r" and text[i + 1:i + 2] != "\n"):
                    line, line_start = line + 1, i + 1
        elif ch == delimiter:
            row.append("".join(field))
            field, state = [], "start"
        elif state == "start":
            if ch == quotechar:
                state = "quoted"
                quote_line, quote_column = line, column
            else:
                field.append(ch)
                state = "unquoted"
        elif state == "unquoted":
            if ch == quotechar:
                raise CsvError("quote character in unquoted field", line, column)
            field.append(ch)
        elif ch == quotechar:  # state == "after_quote": doubled quote is an escaped quote
            field.append(quotechar)
            state = "quoted"
        else:
            raise CsvError("unexpected character after closing quote", line, column)
        i += 1
    if state == "quoted":
        raise CsvError("unterminated quoted field", quote_line, quote_column)
    if state != "start" or row:
        row.append("".join(field))
        records.append((row_line, row))
    return records


def parse(text: str, delimiter: str = ",", quotechar: str = '"') -> list[list[str]]:
    """Parse CSV ``text`` into a list of rows (lists of strings).

    * Fields are separated by ``delimiter``; records by ``\\n``, ``\\r\\n`` or ``\\r``.
    * A field starting with ``quotechar`` is quoted: it may contain delimiters and
      newlines, and a doubled quote (``""``) stands for one literal quote.
    * Blank lines are skipped; a trailing newline does not create an empty row.

    Raises CsvError for an unterminated quote, text after a closing quote, or a
    quote inside an unquoted field, and ValueError for an invalid dialect.
    """
    return [fields for _, fields in parse_with_lines(text, delimiter, quotechar)]


def parse_records(text: str, delimiter: str = ",", quotechar: str = '"') -> list[dict[str, str]]:
    """Parse CSV with a header row into a list of dicts keyed by column name.

    Raises CsvError if a header name is empty or duplicated, and RaggedRowError
    (with the 1-based data record number) if a record's field count differs from
    the header's. Empty input yields an empty list.
    """
    records = parse_with_lines(text, delimiter, quotechar)
    if not records:
        return []
    header_line, header = records[0]
    seen: set[str] = set()
    for position, name in enumerate(header, start=1):
        if not name:
            raise CsvError(f"empty column name in position {position}", header_line, position)
        if name in seen:
            raise CsvError(f"duplicate column name {name!r}", header_line, position)
        seen.add(name)
    result = []
    for number, (line, fields) in enumerate(records[1:], start=1):
        if len(fields) != len(header):
            raise RaggedRowError(number, len(header), len(fields), line)
        result.append(dict(zip(header, fields)))
    return result


def format_field(value: object, delimiter: str = ",", quotechar: str = '"') -> str:
    """Render one value, quoting it only when necessary.

    None becomes an empty string, other values use ``str()``. The field is
    quoted if it contains the delimiter, the quote character or a newline, or
    has leading/trailing spaces; embedded quotes are doubled.
    """
    text = "" if value is None else str(value)
    needs_quotes = (
        delimiter in text
        or quotechar in text
        or any(ch in text for ch in _NEWLINES)
        or text != text.strip(" ")
    )
    if needs_quotes:
        return quotechar + text.replace(quotechar, quotechar * 2) + quotechar
    return text


def format_row(fields: Sequence[object], delimiter: str = ",", quotechar: str = '"') -> str:
    """Render one record (without line terminator).

    A record consisting of a single empty field is written as a quoted empty
    string so that it is not read back as a blank line. Raises ValueError for
    a record with no fields.
    """
    _validate_dialect(delimiter, quotechar)
    if len(fields) == 0:
        raise ValueError("cannot write a record with no fields")
    if len(fields) == 1 and format_field(fields[0], delimiter, quotechar) == "":
        return quotechar * 2
    return delimiter.join(format_field(value, delimiter, quotechar) for value in fields)


def write(
    rows: Iterable[Sequence[object]],
    delimiter: str = ",",
    quotechar: str = '"',
    line_terminator: str = "\n",
) -> str:
    """Render ``rows`` as CSV text, terminating every record with ``line_terminator``."""
    return "".join(format_row(row, delimiter, quotechar) + line_terminator for row in rows)
