import pytest

from semver import Comparator, Range, Version, VersionError, max_satisfying, min_satisfying, parse, satisfies


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("^1.2.3", ">=1.2.3 <2.0.0-0"),
        ("^0.2.3", ">=0.2.3 <0.3.0-0"),
        ("^0.1.3", ">=0.1.3 <0.2.0-0"),
        ("^1.0.0", ">=1.0.0 <2.0.0-0"),
        ("^0.0.3", ">=0.0.3 <0.0.4-0"),
        ("^0.0", ">=0.0.0 <0.1.0-0"),
        ("^0", ">=0.0.0 <1.0.0-0"),
        ("^1.2", ">=1.2.0 <2.0.0-0"),
        ("^0.x", ">=0.0.0 <1.0.0-0"),
        ("^*", "*"),
        ("^1.2.3-beta.2", ">=1.2.3-beta.2 <2.0.0-0"),
        ("~1.2.3", ">=1.2.3 <1.3.0-0"),
        ("~1.2", ">=1.2.0 <1.3.0-0"),
        ("~1", ">=1.0.0 <2.0.0-0"),
        ("~0.0.1", ">=0.0.1 <0.1.0-0"),
        ("~*", "*"),
        ("1.x", ">=1.0.0 <2.0.0-0"),
        ("1.2.X", ">=1.2.0 <1.3.0-0"),
        ("1.*.3", ">=1.0.0 <2.0.0-0"),
        ("1", ">=1.0.0 <2.0.0-0"),
        ("=1.2", ">=1.2.0 <1.3.0-0"),
        ("*", "*"),
        ("", "*"),
        ("x", "*"),
        ("1.2.3", "=1.2.3"),
        ("=1.2.3", "=1.2.3"),
        ("v1.2.3", "=1.2.3"),
        (">1.2.3", ">1.2.3"),
        (">1.2", ">=1.3.0"),
        (">1", ">=2.0.0"),
        (">*", "<0.0.0-0"),
        (">=1.2.3", ">=1.2.3"),
        (">=1.2", ">=1.2.0"),
        (">=1", ">=1.0.0"),
        (">=*", "*"),
        ("<1.2.3", "<1.2.3"),
        ("<1.2", "<1.2.0-0"),
        ("<1", "<1.0.0-0"),
        ("<*", "<0.0.0-0"),
        ("<=1.2.3", "<=1.2.3"),
        ("<=1.2", "<1.3.0-0"),
        ("<=1", "<2.0.0-0"),
        ("<=*", "*"),
        ("1.2.3 - 2.3.4", ">=1.2.3 <=2.3.4"),
        ("1.2 - 2.3", ">=1.2.0 <2.4.0-0"),
        ("1.2 - 2", ">=1.2.0 <3.0.0-0"),
        ("* - 2.0.0", "<=2.0.0"),
        (">= 1.2.3 < 2", ">=1.2.3 <2.0.0-0"),
        ("1.x || >=2.5.0 || 5.0.0 - 7.2.3", ">=1.0.0 <2.0.0-0 || >=2.5.0 || >=5.0.0 <=7.2.3"),
    ],
)
def test_desugaring(text, expected):
    assert str(Range(text)) == expected


@pytest.mark.parametrize(
    "text",
    ["1.2.3 -", ">=", "^", "1.2.3.4", "01.2", "a.b", "1.2-beta", "1.x-beta", "~1.2.3-", ">=1.2.3 < ", "1.2.3 - 2.3.4 - 5", "^1.2.3 - 2"],
)
def test_invalid_ranges(text):
    with pytest.raises(VersionError):
        Range(text)


@pytest.mark.parametrize(
    ("op", "version", "candidate", "expected"),
    [
        ("<", "1.2.3", "1.2.2", True),
        ("<", "1.2.3", "1.2.3", False),
        ("<=", "1.2.3", "1.2.3", True),
        ("<=", "1.2.3", "1.2.4", False),
        (">", "1.2.3", "1.2.3", False),
        (">", "1.2.3", "1.2.4", True),
        (">=", "1.2.3", "1.2.3", True),
        (">=", "1.2.3", "1.2.2", False),
        ("=", "1.2.3", "1.2.3+meta", True),
        ("=", "1.2.3", "1.2.4", False),
    ],
)
def test_comparator(op, version, candidate, expected):
    assert Comparator(op, parse(version)).test(parse(candidate)) is expected


@pytest.mark.parametrize(
    ("version", "rng", "expected"),
    [
        ("1.2.3", "^1.2.3", True),
        ("1.9.9", "^1.2.3", True),
        ("2.0.0", "^1.2.3", False),
        ("1.2.2", "^1.2.3", False),
        ("0.2.9", "^0.2.3", True),
        ("0.3.0", "^0.2.3", False),
        ("0.0.3", "^0.0.3", True),
        ("0.0.4", "^0.0.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("1.2.3", "1.2.3 - 2.3.4", True),
        ("2.3.4", "1.2.3 - 2.3.4", True),
        ("2.3.5", "1.2.3 - 2.3.4", False),
        ("1.2.2", "1.2.3 - 2.3.4", False),
        ("3.0.0", "<2 || >=3", True),
        ("2.5.0", "<2 || >=3", False),
        ("1.9.9", "<2 || >=3", True),
        ("5.5.5", "*", True),
        ("1.2.3", ">*", False),
    ],
)
def test_satisfies(version, rng, expected):
    assert satisfies(version, rng) is expected


def test_prerelease_excluded_by_default():
    assert not satisfies("1.3.0-beta", "^1.2.3")
    assert not satisfies("1.3.0-beta", "*")
    assert satisfies("1.3.0-beta", "^1.2.3", include_prerelease=True)
    assert satisfies("1.3.0-beta", "*", include_prerelease=True)


def test_prerelease_allowed_on_same_core_tuple():
    assert satisfies("1.2.3-beta.4", "^1.2.3-beta.2")
    assert not satisfies("1.2.3-beta.1", "^1.2.3-beta.2")
    assert not satisfies("1.2.4-beta.4", "^1.2.3-beta.2")
    assert satisfies("1.2.4", "^1.2.3-beta.2")
    assert satisfies("1.2.3-rc.1", ">=1.0.0 <1.2.3-rc.5 || >=9")
    assert not satisfies("1.2.3-rc.1", ">=1.2.3-rc.1 <1.2.3-rc.1 || >=9")


def test_prerelease_excluded_from_caret_upper_bound():
    assert not satisfies("2.0.0-alpha", "^1.0.0", include_prerelease=True)
    assert not satisfies("2.0.0-0", "^1.0.0", include_prerelease=True)
    assert satisfies("1.99.0-x", "^1.0.0", include_prerelease=True)


def test_range_test_default_excludes_prerelease():
    assert Range("^1.0.0").test("1.1.0-beta") is False
    assert Range("^1.0.0").test("1.1.0-beta", include_prerelease=True) is True


def test_comparator_is_immutable():
    import dataclasses

    comparator = Comparator(">=", parse("1.0.0"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        comparator.operator = "<"
    assert str(comparator) == ">=1.0.0"


def test_range_test_accepts_version_objects():
    assert Range(">=1.0.0").test(Version(1, 0, 0))
    assert not Range(">=1.0.0").test(Version(0, 9, 9))


VERSIONS = ["1.2.3", "1.2.4", "1.3.0-beta", "1.3.0", "2.0.0-rc.1", "2.0.0", "2.1.5", "0.9.0"]


def test_max_satisfying():
    assert max_satisfying(VERSIONS, "^1.2.3") == parse("1.3.0")
    assert max_satisfying(VERSIONS, "~1.2.3") == parse("1.2.4")
    assert max_satisfying(VERSIONS, ">=2.0.0-rc.0") == parse("2.1.5")
    assert max_satisfying(VERSIONS, "<1") == parse("0.9.0")
    assert max_satisfying(VERSIONS, "^3") is None
    assert max_satisfying([], "*") is None


def test_min_satisfying():
    assert min_satisfying(VERSIONS, "^1.2.3") == parse("1.2.3")
    assert min_satisfying(VERSIONS, ">=2.0.0-rc.1 <3") == parse("2.0.0-rc.1")
    assert min_satisfying(VERSIONS, ">1.2.3") == parse("1.2.4")
    assert min_satisfying(VERSIONS, "^5") is None


def test_max_satisfying_invalid_version():
    with pytest.raises(VersionError):
        max_satisfying(["1.2.3", "bogus"], "*")
