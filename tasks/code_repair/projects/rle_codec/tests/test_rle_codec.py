import pytest

from rle_codec import (
    MAX_BYTE_RUN,
    RLEDecodeError,
    compression_ratio,
    decode,
    decode_bytes,
    encode,
    encode_bytes,
    is_valid,
    runs,
)


def test_runs_groups_consecutive_items():
    assert runs("aabccc") == [("a", 2), ("b", 1), ("c", 3)]
    assert runs([1, 1, 2, 1]) == [(1, 2), (2, 1), (1, 1)]
    assert runs("") == []
    assert runs("z") == [("z", 1)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", ""),
        ("a", "a"),
        ("aa", "2a"),
        ("aaab", "3ab"),
        ("abc", "abc"),
        ("aaaaaaaaaaaa", "12a"),
        ("wwwwbbbw", "4w3bw"),
        ("  x", "2 x"),
    ],
)
def test_encode_plain_text(text, expected):
    assert encode(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1", "\\1"),
        ("1111", "4\\1"),
        ("a0", "a\\0"),
        ("9a9", "\\9a\\9"),
        ("\\", "\\\\"),
        ("\\\\\\", "3\\\\"),
    ],
)
def test_encode_escapes_digits_and_backslash(text, expected):
    assert encode(text) == expected


def test_encode_does_not_escape_non_ascii_digits():
    # Only ASCII 0-9 are count characters; other numerals are literal.
    assert encode("\u00b2\u00b2") == "2\u00b2"
    assert decode("2\u00b2") == "\u00b2\u00b2"


@pytest.mark.parametrize(
    "text, max_run, expected",
    [
        ("aaaaa", 2, "2a2aa"),
        ("aaaa", 2, "2a2a"),
        ("aaa", 3, "3a"),
        ("aaaa", 3, "3aa"),
        ("aaa", 1, "aaa"),
        ("bb11", 10, "2b2\\1"),
    ],
)
def test_encode_with_max_run(text, max_run, expected):
    assert encode(text, max_run=max_run) == expected
    assert decode(expected) == text


@pytest.mark.parametrize("max_run", [0, -1])
def test_encode_rejects_non_positive_max_run(max_run):
    with pytest.raises(ValueError):
        encode("aaa", max_run=max_run)


@pytest.mark.parametrize(
    "encoded, expected",
    [
        ("", ""),
        ("3ab", "aaab"),
        ("12a", "aaaaaaaaaaaa"),
        ("10\\1", "1111111111"),
        ("a\\0b", "a0b"),
        ("2\\\\", "\\\\"),
        ("1a1b", "ab"),
    ],
)
def test_decode(encoded, expected):
    assert decode(encoded) == expected


@pytest.mark.parametrize(
    "text",
    ["", "hello", "aaabbbcccd", "1223334444", "\\\\n\\", "x" * 250 + "y9" * 3, "  \t\t\n"],
)
def test_roundtrip_text(text):
    assert decode(encode(text)) == text
    assert decode(encode(text, max_run=4)) == text


@pytest.mark.parametrize(
    "encoded, position",
    [
        ("3", 0),
        ("ab12", 2),
        ("0a", 0),
        ("a05b", 1),
        ("\\", 0),
        ("ab\\", 2),
        ("3\\", 1),
        ("\\a", 0),
        ("x2\\q", 2),
    ],
)
def test_decode_errors_report_position(encoded, position):
    with pytest.raises(RLEDecodeError) as info:
        decode(encoded)
    assert info.value.position == position
    assert f"position {position}" in str(info.value)


def test_decode_error_is_value_error():
    with pytest.raises(ValueError):
        decode("5")


def test_decode_error_messages():
    with pytest.raises(RLEDecodeError, match="zero"):
        decode("0x")
    with pytest.raises(RLEDecodeError, match="without a character"):
        decode("a7")
    with pytest.raises(RLEDecodeError, match="dangling escape"):
        decode("a\\")
    with pytest.raises(RLEDecodeError, match="invalid escape 'z'"):
        decode("\\z")


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", b""),
        (b"a", b"\x01a"),
        (b"aaab", b"\x03a\x01b"),
        (b"\x00\x00", b"\x02\x00"),
        (b"a" * 255, b"\xffa"),
        (b"a" * 256, b"\xffa\x01a"),
        (b"a" * 510, b"\xffa\xffa"),
        (b"a" * 511 + b"b", b"\xffa\xffa\x01a\x01b"),
    ],
)
def test_encode_bytes(data, expected):
    assert encode_bytes(data) == expected
    assert decode_bytes(expected) == data


def test_max_byte_run_constant():
    assert MAX_BYTE_RUN == 255


def test_decode_bytes_basic():
    assert decode_bytes(b"\x02x\x03y") == b"xxyyy"
    assert decode_bytes(b"\x01\x00") == b"\x00"


@pytest.mark.parametrize(
    "data, position",
    [
        (b"\x02", 0),
        (b"\x02a\x01", 2),
        (b"\x00a", 0),
        (b"\x01a\x00b", 2),
    ],
)
def test_decode_bytes_errors(data, position):
    with pytest.raises(RLEDecodeError) as info:
        decode_bytes(data)
    assert info.value.position == position


def test_is_valid():
    assert is_valid("3a\\1b")
    assert is_valid("")
    assert not is_valid("3")
    assert not is_valid("\\x")
    assert not is_valid("01a")


@pytest.mark.parametrize(
    "text, ratio",
    [
        ("", 1.0),
        ("abcd", 1.0),
        ("aaaa", 0.5),
        ("a" * 10, 0.3),
        ("11", 1.5),
    ],
)
def test_compression_ratio(text, ratio):
    assert compression_ratio(text) == pytest.approx(ratio)
