import pytest

from ini_config import (
    Config,
    ConfigError,
    DuplicateOptionError,
    DuplicateSectionError,
    InterpolationError,
    MissingSectionHeaderError,
    NoOptionError,
    NoSectionError,
    ParseError,
)

SAMPLE = """\
# global comment
; another comment
[DEFAULT]
timeout = 30
debug = no

[server]
host = example.org
Port: 8080
url = http://${host}:${port}/
ratio = 0.75
debug = yes   ; inline comment

[client]
endpoint = ${server:url}api
retries=3
"""


@pytest.fixture
def cfg():
    return Config.parse(SAMPLE)


def test_sections_in_order(cfg):
    assert cfg.sections() == ["server", "client"]
    assert cfg.has_section("server")
    assert not cfg.has_section("DEFAULT")
    assert not cfg.has_section("missing")


def test_basic_values_and_separators(cfg):
    assert cfg.get("server", "host") == "example.org"
    assert cfg.get("server", "port") == "8080"
    assert cfg.get("client", "retries") == "3"


def test_keys_are_case_insensitive(cfg):
    assert cfg.get("server", "PORT") == "8080"
    assert cfg.has_option("server", "Host")


def test_split_at_first_separator():
    cfg = Config.parse("[s]\na = b: c\nd: e = f\n")
    assert cfg.get("s", "a") == "b: c"
    assert cfg.get("s", "d") == "e = f"


def test_inline_comments(cfg):
    assert cfg.get("server", "debug") == "yes"
    cfg2 = Config.parse("[s]\ncolor = #fff\nurl = a;b\nx = 1 #c\n")
    assert cfg2.get("s", "color") == "#fff"
    assert cfg2.get("s", "url") == "a;b"
    assert cfg2.get("s", "x") == "1"


def test_empty_value():
    cfg = Config.parse("[s]\nkey =\n")
    assert cfg.get("s", "key") == ""


def test_defaults_are_inherited(cfg):
    assert cfg.get("client", "timeout") == "30"
    assert cfg.get("client", "debug") == "no"
    assert cfg.get("DEFAULT", "timeout") == "30"
    assert cfg.options("client") == ["endpoint", "retries", "timeout", "debug"]
    assert cfg.options("server") == ["host", "port", "url", "ratio", "debug", "timeout"]


def test_has_option(cfg):
    assert cfg.has_option("client", "timeout")
    assert not cfg.has_option("client", "host")
    assert not cfg.has_option("nosuch", "timeout")
    assert cfg.has_option("DEFAULT", "debug")


def test_interpolation(cfg):
    assert cfg.get("server", "url") == "http://example.org:8080/"
    assert cfg.get("client", "endpoint") == "http://example.org:8080/api"
    assert cfg.get("client", "endpoint", raw=True) == "${server:url}api"


def test_interpolation_uses_referenced_section_for_nested_lookups():
    cfg = Config.parse("[a]\nname = A\nfull = ${name}!\n[b]\nname = B\nx = ${a:full}\n")
    assert cfg.get("b", "x") == "A!"


def test_interpolation_dollar_escape():
    cfg = Config.parse("[s]\nprice = $$5\nv = 1\nboth = $${v}${v}\n")
    assert cfg.get("s", "price") == "$5"
    assert cfg.get("s", "both") == "${v}1"


@pytest.mark.parametrize(
    "value",
    ["${missing}", "${other:x}", "$x", "${unterminated", "trailing $"],
)
def test_interpolation_errors(value):
    cfg = Config()
    cfg.set("s", "k", value)
    with pytest.raises(InterpolationError):
        cfg.get("s", "k")


def test_interpolation_error_messages():
    cfg = Config()
    cfg.set("s", "a", "x${unterminated")
    cfg.set("s", "b", "${nope}")
    cfg.set("s", "c", "5$")
    cfg.set("s", "d", "${}")
    with pytest.raises(InterpolationError, match="bad reference"):
        cfg.get("s", "d")
    with pytest.raises(InterpolationError, match="unterminated"):
        cfg.get("s", "a")
    with pytest.raises(InterpolationError, match="bad reference"):
        cfg.get("s", "b")
    with pytest.raises(InterpolationError, match="position 1"):
        cfg.get("s", "c")


def test_parse_error_messages():
    with pytest.raises(ParseError, match="empty option name"):
        Config.parse("[s]\n= value\n")
    with pytest.raises(ParseError, match="unterminated section header"):
        Config.parse("[section\n")
    with pytest.raises(ParseError, match="empty section name"):
        Config.parse("[]\n")
    with pytest.raises(ParseError, match="expected 'key = value'"):
        Config.parse("[s]\nnovalue\n")


def test_interpolation_cycle():
    cfg = Config.parse("[s]\na = ${b}\nb = ${a}\n")
    with pytest.raises(InterpolationError):
        cfg.get("s", "a")


def test_interpolation_depth_limit():
    lines = ["[s]"] + [f"k{i} = ${{k{i + 1}}}" for i in range(1, 11)] + ["k11 = end"]
    cfg = Config.parse("\n".join(lines))
    assert cfg.get("s", "k2") == "end"
    with pytest.raises(InterpolationError):
        cfg.get("s", "k1")


def test_continuation_lines():
    cfg = Config.parse("[s]\npaths = /a\n    /b ; comment\n\t/c\nnext = 1\n")
    assert cfg.get("s", "paths") == "/a\n/b\n/c"
    assert cfg.get("s", "next") == "1"


def test_indented_line_after_header_is_an_option():
    cfg = Config.parse("[s]\n  key = v\n")
    assert cfg.get("s", "key") == "v"
    cfg = Config.parse("[a]\nk = 1\n[b]\n  x = 2\n")
    assert cfg.get("a", "k") == "1"
    assert cfg.get("b", "x") == "2"


def test_get_missing(cfg):
    with pytest.raises(NoOptionError):
        cfg.get("server", "nope")
    assert cfg.get("server", "nope", fallback="dflt") == "dflt"
    assert cfg.get("server", "nope", fallback=None) is None
    with pytest.raises(NoSectionError):
        cfg.get("nosuch", "host")
    with pytest.raises(NoSectionError):
        cfg.get("nosuch", "host", fallback="x")
    with pytest.raises(NoSectionError):
        cfg.options("nosuch")


def test_typed_getters(cfg):
    assert cfg.get_int("client", "retries") == 3
    assert cfg.get_int("client", "timeout") == 30
    assert cfg.get_float("server", "ratio") == 0.75
    assert cfg.get_int("client", "missing", fallback=7) == 7
    assert cfg.get_float("client", "missing", fallback=1.5) == 1.5
    with pytest.raises(ValueError):
        cfg.get_int("server", "host")
    with pytest.raises(ValueError):
        cfg.get_float("server", "host")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("yes", True), ("TRUE", True), ("On", True), ("0", False), ("no", False), ("False", False), ("OFF", False)],
)
def test_get_bool(raw, expected):
    cfg = Config()
    cfg.set("s", "flag", raw)
    assert cfg.get_bool("s", "flag") is expected


def test_get_bool_invalid_and_fallback():
    cfg = Config()
    cfg.set("s", "flag", "maybe")
    with pytest.raises(ValueError):
        cfg.get_bool("s", "flag")
    assert cfg.get_bool("s", "other", fallback=True) is True
    assert Config.parse("[s]\nf = no\n").get_bool("s", "f") is False


@pytest.mark.parametrize(
    ("text", "error", "lineno"),
    [
        ("key = 1\n", MissingSectionHeaderError, 1),
        ("[s]\n[s]\n", DuplicateSectionError, 2),
        ("[s]\na = 1\nA = 2\n", DuplicateOptionError, 3),
        ("[s]\n\njust text\n", ParseError, 3),
        ("[section\n", ParseError, 1),
        ("[  ]\n", ParseError, 1),
        ("[s]\n = value\n", ParseError, 2),
        ("#c\n[DEFAULT]\nx=1\nx=2\n", DuplicateOptionError, 4),
    ],
)
def test_parse_errors(text, error, lineno):
    with pytest.raises(error) as info:
        Config.parse(text)
    assert info.value.lineno == lineno
    assert str(info.value).startswith(f"line {lineno}:")


def test_error_hierarchy():
    for cls in (ParseError, MissingSectionHeaderError, DuplicateSectionError, DuplicateOptionError,
                NoSectionError, NoOptionError, InterpolationError):
        assert issubclass(cls, ConfigError)
    assert issubclass(MissingSectionHeaderError, ParseError)
    assert str(ConfigError("plain")) == "plain"
    assert ConfigError("plain").lineno is None


def test_same_key_in_different_sections():
    cfg = Config.parse("[a]\nk = 1\n[b]\nk = 2\n")
    assert cfg.get("a", "k") == "1"
    assert cfg.get("b", "k") == "2"


def test_set_creates_section():
    cfg = Config()
    cfg.set("new", "Key", "v")
    cfg.set("DEFAULT", "d", "dv")
    assert cfg.sections() == ["new"]
    assert cfg.get("new", "key") == "v"
    assert cfg.get("new", "d") == "dv"


def test_to_string_round_trip(cfg):
    cfg.set("client", "multi", "one\ntwo")
    text = cfg.to_string()
    assert text.startswith("[DEFAULT]\ntimeout = 30\ndebug = no\n\n[server]\n")
    assert "multi = one\n    two\n" in text
    again = Config.parse(text)
    assert again.sections() == cfg.sections()
    for section in cfg.sections():
        for key in cfg.options(section):
            assert again.get(section, key, raw=True) == cfg.get(section, key, raw=True)


def test_to_string_without_defaults():
    cfg = Config()
    cfg.set("a", "x", "1")
    cfg.set("b", "y", "2")
    assert cfg.to_string() == "[a]\nx = 1\n\n[b]\ny = 2\n"
    assert Config().to_string() == ""
