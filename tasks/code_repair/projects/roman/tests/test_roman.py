import pytest

from roman import add, from_roman, from_roman_lenient, is_valid, subtract, to_roman

KNOWN = [
    (1, "I"),
    (2, "II"),
    (3, "III"),
    (4, "IV"),
    (5, "V"),
    (6, "VI"),
    (8, "VIII"),
    (9, "IX"),
    (10, "X"),
    (14, "XIV"),
    (19, "XIX"),
    (40, "XL"),
    (44, "XLIV"),
    (49, "XLIX"),
    (50, "L"),
    (90, "XC"),
    (99, "XCIX"),
    (100, "C"),
    (400, "CD"),
    (444, "CDXLIV"),
    (500, "D"),
    (888, "DCCCLXXXVIII"),
    (900, "CM"),
    (999, "CMXCIX"),
    (1000, "M"),
    (1987, "MCMLXXXVII"),
    (2024, "MMXXIV"),
    (3888, "MMMDCCCLXXXVIII"),
    (3999, "MMMCMXCIX"),
]


@pytest.mark.parametrize(("number", "numeral"), KNOWN)
def test_to_roman_known_values(number, numeral):
    assert to_roman(number) == numeral


@pytest.mark.parametrize(("number", "numeral"), KNOWN)
def test_from_roman_known_values(number, numeral):
    assert from_roman(numeral) == number


def test_round_trip_all_values():
    for number in range(1, 4000):
        assert from_roman(to_roman(number)) == number


@pytest.mark.parametrize("number", [0, -1, 4000, 10000])
def test_to_roman_out_of_range(number):
    with pytest.raises(ValueError):
        to_roman(number)


@pytest.mark.parametrize("value", [1.0, "5", None, True])
def test_to_roman_type_errors(value):
    with pytest.raises(TypeError):
        to_roman(value)


@pytest.mark.parametrize(
    "numeral",
    [
        "IIII",
        "VV",
        "XXXX",
        "LL",
        "CCCC",
        "DD",
        "MMMM",
        "IL",
        "IC",
        "ID",
        "IM",
        "XD",
        "XM",
        "VX",
        "IIV",
        "IXI",
        "IXX",
        "XCX",
        "CMC",
        "CMD",
        "CDC",
        "DCD",
        "VIV",
        "LXL",
        "IVI",
        "XIIII",
        "MCMC",
        "IIX",
    ],
)
def test_from_roman_rejects_malformed(numeral):
    with pytest.raises(ValueError):
        from_roman(numeral)


@pytest.mark.parametrize("numeral", ["", "ABC", "X V", " X", "X\n", "iv", "Mi"])
def test_from_roman_rejects_bad_characters(numeral):
    with pytest.raises(ValueError):
        from_roman(numeral)


def test_from_roman_error_positions():
    with pytest.raises(ValueError, match="invalid character 'Z' at position 2"):
        from_roman("VXZ")
    with pytest.raises(ValueError, match="malformed"):
        from_roman("XIIII")
    with pytest.raises(ValueError, match="position 3"):
        from_roman("IIII")
    with pytest.raises(ValueError, match="position 1"):
        from_roman("VX")


def test_from_roman_type_error():
    with pytest.raises(TypeError):
        from_roman(10)
    with pytest.raises(TypeError):
        from_roman(None)


def test_from_roman_lowercase_option():
    assert from_roman("mcmxcix", allow_lowercase=True) == 1999
    assert from_roman("MxIv", allow_lowercase=True) == 1014
    with pytest.raises(ValueError):
        from_roman("mcmxcix")
    with pytest.raises(ValueError):
        from_roman("iiii", allow_lowercase=True)


def test_is_valid():
    assert is_valid("XLII")
    assert is_valid("MMMCMXCIX")
    assert not is_valid("IIII")
    assert not is_valid("")
    assert not is_valid("xlii")
    assert not is_valid(42)


@pytest.mark.parametrize(
    ("numeral", "expected"),
    [
        ("IIII", 4),
        ("IC", 99),
        ("XIV", 14),
        ("MCMXCIX", 1999),
        ("iix", 10),
        ("VX", 5),
        ("I", 1),
        ("MMMMM", 5000),
        ("XXL", 50),
        ("LV", 55),
        ("MDCLXVI", 1666),
        ("ID", 499),
    ],
)
def test_from_roman_lenient(numeral, expected):
    assert from_roman_lenient(numeral) == expected


def test_from_roman_lenient_errors():
    with pytest.raises(ValueError):
        from_roman_lenient("")
    with pytest.raises(ValueError, match="position 1"):
        from_roman_lenient("X?")


def test_add():
    assert add("XIV", "XXVIII") == "XLII"
    assert add("MMMCMXCVIII", "I") == "MMMCMXCIX"
    with pytest.raises(ValueError):
        add("MMMCMXCIX", "I")
    with pytest.raises(ValueError):
        add("IIII", "I")


def test_subtract():
    assert subtract("L", "VIII") == "XLII"
    assert subtract("II", "I") == "I"
    with pytest.raises(ValueError):
        subtract("V", "V")
    with pytest.raises(ValueError):
        subtract("V", "X")
