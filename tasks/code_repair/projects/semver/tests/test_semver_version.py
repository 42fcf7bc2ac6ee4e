import pytest

from semver import Version, VersionError, compare, parse


def test_parse_core():
    v = parse("1.2.3")
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.prerelease == ()
    assert v.build == ()
    assert not v.is_prerelease
    assert v.core == (1, 2, 3)


def test_parse_prerelease_and_build():
    v = parse("1.0.0-alpha.1.x-y+build.007.sha-1")
    assert v.prerelease == ("alpha", 1, "x-y")
    assert v.build == ("build", "007", "sha-1")
    assert v.is_prerelease


def test_parse_build_only():
    v = parse("0.0.0+20240101")
    assert v.prerelease == ()
    assert v.build == ("20240101",)


def test_parse_zero_is_allowed():
    assert parse("0.0.0") == Version(0, 0, 0)
    assert parse("1.0.0-0").prerelease == (0,)


@pytest.mark.parametrize(
    "text",
    [
        "1.2",
        "1.2.3.4",
        "01.2.3",
        "1.02.3",
        "1.2.03",
        "1.2.3-01",
        "1.2.3-",
        "1.2.3+",
        "1.2.3-a..b",
        "1.2.3-a_b",
        "1.2.3+b@d",
        "a.b.c",
        "-1.2.3",
        "1.2.-3",
        "1.2.\u0663",
        "",
        "v1.2.3",
        " 1.2.3",
    ],
)
def test_parse_invalid(text):
    with pytest.raises(VersionError):
        parse(text)


def test_version_error_is_value_error():
    assert issubclass(VersionError, ValueError)


def test_leading_zero_allowed_in_build_and_alnum_prerelease():
    assert parse("1.2.3-0a").prerelease == ("0a",)
    assert parse("1.2.3+01").build == ("01",)


def test_str_round_trip():
    for text in ["1.2.3", "10.20.30", "1.0.0-rc.1", "1.0.0+b.1", "1.0.0-x.7.z.92+meta"]:
        assert str(parse(text)) == text


SPEC_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.1.0",
    "1.10.0",
    "2.0.0",
    "10.0.0",
]


def test_spec_precedence_order():
    versions = [parse(v) for v in SPEC_ORDER]
    for lower, higher in zip(versions, versions[1:]):
        assert lower < higher
        assert lower <= higher
        assert higher > lower
        assert higher >= lower
        assert not lower > higher
        assert not higher < lower
        assert lower != higher
    assert sorted(reversed(versions)) == versions


def test_numeric_identifiers_lower_than_alphanumeric():
    assert parse("1.0.0-999") < parse("1.0.0-a")
    assert parse("1.0.0-2") < parse("1.0.0-10")
    assert parse("1.0.0-B") < parse("1.0.0-a")


def test_build_metadata_ignored():
    a, b = parse("1.0.0+a"), parse("1.0.0+b")
    assert a == b
    assert hash(a) == hash(b)
    assert a <= b and a >= b
    assert not a < b
    assert len({a, b}) == 1


def test_version_is_immutable():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        parse("1.2.3").major = 2


def test_equality_with_other_types():
    assert parse("1.0.0") != "1.0.0"
    assert parse("1.0.0-1") != parse("1.0.0-1.0")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1.0.0", "1.0.0", 0),
        ("1.0.0", "1.0.1", -1),
        ("1.1.0", "1.0.9", 1),
        ("2.0.0", "10.0.0", -1),
        ("1.0.0-rc.1", "1.0.0", -1),
        ("1.0.0+x", "1.0.0+y", 0),
    ],
)
def test_compare(a, b, expected):
    assert compare(a, b) == expected
    assert compare(parse(a), b) == expected


@pytest.mark.parametrize(
    ("text", "major", "minor", "patch"),
    [
        ("1.2.3", "2.0.0", "1.3.0", "1.2.4"),
        ("1.2.3-rc.1", "2.0.0", "1.3.0", "1.2.3"),
        ("1.3.0-rc.1", "2.0.0", "1.3.0", "1.3.0"),
        ("2.0.0-rc.1", "2.0.0", "2.0.0", "2.0.0"),
        ("2.1.0-rc.1", "3.0.0", "2.1.0", "2.1.0"),
        ("0.0.0", "1.0.0", "0.1.0", "0.0.1"),
        ("1.2.3+build", "2.0.0", "1.3.0", "1.2.4"),
    ],
)
def test_bumps(text, major, minor, patch):
    v = parse(text)
    assert str(v.bump_major()) == major
    assert str(v.bump_minor()) == minor
    assert str(v.bump_patch()) == patch
