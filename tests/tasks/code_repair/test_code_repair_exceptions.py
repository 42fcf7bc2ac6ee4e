"""pytest's rule for exceptions on a real instance: a fix that ``pytest.raises`` accepts gets reward 1.

``url_query``'s hidden tests check ``unquote(text, strict=True)`` with ``pytest.raises(QueryError,
match=f"position {position}$")`` (four cases), ``pytest.raises(QueryError)`` and
``pytest.raises(ValueError)``. Every submission here is the gold source with the two raise sites of
``unquote`` written differently: a subclass of ``QueryError``, or a reworded message that the pattern
still finds, passes as the gold does; a sibling class, a message the pattern rejects, and classes
that only claim to be ``QueryError`` (a lying metaclass and ``__class__``, a borrowed name) fail.
"""

from __future__ import annotations

from typing import Any

import pytest

import envhub
from envhub.tasks.code_repair.observations import project_suite
from envhub.tasks.code_repair.workspace import agent_files, project_sources
from envhub.verifiers.probes.grader import run_probes
from envhub.verifiers.suite import grade_submissions

ENV = "envhub/CodeRepair-v0"
PATH = "src/url_query.py"
GOLD = project_sources("url_query")[PATH]
CLASS = 'class QueryError(ValueError):\n    """Raised for malformed query strings in strict mode or over-long input."""\n'
ESCAPE = 'raise QueryError(f"invalid percent-escape at position {i}")'
UTF8 = 'raise QueryError("percent-escapes do not form valid UTF-8") from exc'
BAD_ESCAPE = "test_unquote_strict_bad_escape["  # the four match= cases
QSL_ESCAPE = "test_parse_qsl_strict_bad_escape"  # pytest.raises(QueryError) around the same raise
UTF8_TEST = "test_unquote_invalid_utf8"  # pytest.raises(QueryError), then pytest.raises(ValueError)


def variant(classes: str = "", escape: str = ESCAPE, utf8: str = UTF8) -> str:
    """The gold module with ``classes`` added after ``QueryError`` and the two raise statements replaced."""
    assert GOLD.count(CLASS) == GOLD.count(ESCAPE) == GOLD.count(UTF8) == 1
    return GOLD.replace(CLASS, CLASS + classes).replace(ESCAPE, escape).replace(UTF8, utf8)


LIARS = '''

class _ClaimsQueryError(type):
    """Answers every question about its classes as QueryError would."""

    def __getattribute__(cls, name):
        lies = {"__mro__": QueryError.__mro__, "__qualname__": "QueryError", "__name__": "QueryError"}
        return lies[name] if name in lies else type.__getattribute__(cls, name)


class EscapeError(ValueError, metaclass=_ClaimsQueryError):
    """Not a QueryError, whatever it says; its instances say so too."""

    __class__ = property(lambda self: QueryError)


class _Borrowed(ValueError):
    """Named QueryError, in this very module, but another class."""


_Borrowed.__qualname__ = "QueryError"
'''

CASES = {
    "subclass": variant('\n\nclass EscapeError(QueryError):\n    """A bad percent-escape."""\n\n\n'
                        'class EncodingError(QueryError):\n    """Bytes that are not UTF-8."""\n',
                        'raise EscapeError(f"invalid percent-escape at position {i}")',
                        'raise EncodingError("percent-escapes do not form valid UTF-8") from exc'),
    "reworded": variant(escape='raise QueryError(f"bad escape {text[i:i + 3]!r}: two hex digits expected at position {i}")',
                        utf8='raise QueryError("the decoded bytes are not UTF-8") from exc'),
    "sibling": variant('\n\nclass EscapeError(ValueError):\n    """A bad percent-escape, but no QueryError."""\n',
                       'raise EscapeError(f"invalid percent-escape at position {i}")'),
    "pattern rejects": variant(escape='raise QueryError(f"invalid percent-escape at position {i} in {text!r}")'),
    "liars": variant(LIARS, 'raise EscapeError(f"invalid percent-escape at position {i}")',
                     'raise _Borrowed("percent-escapes do not form valid UTF-8") from exc'),
}


@pytest.fixture(scope="module")
def instance() -> Any:
    env = envhub.make(ENV, split="train")
    try:
        return next(i for i in env.tasks.manifest.by_split("train") if i.project == "url_query")
    finally:
        env.close()


@pytest.fixture(scope="module")
def graded(instance: Any) -> dict[str, dict[str, Any]]:
    """Each case graded as ``envhub verify --submissions`` grades it: snapshot, integrity, probes."""
    rows = [{"task_id": instance.instance_id, "submission": {PATH: text}} for text in CASES.values()]
    return dict(zip(CASES, grade_submissions(lambda: envhub.make(ENV, split="train"), rows, jobs=2), strict=True))


def failed(result: dict[str, Any]) -> set[str]:
    return set(result["verdict"]["layers"][-1]["details"]["failed"])


def _named(tests: set[str]) -> dict[str, int]:
    return {name: sum(name in t for t in tests) for name in (BAD_ESCAPE, QSL_ESCAPE, UTF8_TEST)}


@pytest.mark.slow
def test_a_subclass_of_the_expected_exception_gets_reward_1(graded: dict[str, dict[str, Any]]) -> None:
    assert (graded["subclass"]["outcome"], graded["subclass"]["reward"]) == ("success", 1.0), graded["subclass"]


@pytest.mark.slow
def test_a_reworded_message_the_pattern_still_finds_gets_reward_1(graded: dict[str, dict[str, Any]]) -> None:
    assert (graded["reworded"]["outcome"], graded["reworded"]["reward"]) == ("success", 1.0), graded["reworded"]


@pytest.mark.slow
def test_a_sibling_class_fails_the_tests_that_expect_query_error(graded: dict[str, dict[str, Any]]) -> None:
    result = graded["sibling"]
    assert (result["outcome"], result["reward"]) == ("wrong_answer", 0.0)
    assert _named(failed(result)) == {BAD_ESCAPE: 4, QSL_ESCAPE: 1, UTF8_TEST: 0} and len(failed(result)) == 5


@pytest.mark.slow
def test_a_message_the_pattern_rejects_fails_only_the_match_tests(graded: dict[str, dict[str, Any]]) -> None:
    result = graded["pattern rejects"]
    assert (result["outcome"], result["reward"]) == ("wrong_answer", 0.0)
    assert _named(failed(result)) == {BAD_ESCAPE: 4, QSL_ESCAPE: 0, UTF8_TEST: 0} and len(failed(result)) == 4


@pytest.mark.slow
def test_classes_that_only_claim_to_be_the_expected_one_fail(instance: Any, graded: dict[str, dict[str, Any]]) -> None:
    # pytest's own isinstance check would believe the liar: its instances say their __class__ is QueryError
    scope: dict[str, Any] = {"__name__": "url_query"}
    exec(compile(CASES["liars"], PATH, "exec"), scope)
    liar = scope["EscapeError"]("x")
    assert isinstance(liar, scope["QueryError"]) and scope["EscapeError"].__mro__ == scope["QueryError"].__mro__
    assert graded["liars"]["reward"] == 0.0  # the integrity gate or the probes
    # the probes alone, without the gate: the classes are named as the interpreter holds them
    env = envhub.make(ENV, split="train")
    try:
        src = {p: t for p, t in agent_files(instance).items() if p.startswith("src/")}
        with env.grading_sandbox() as sandbox:
            run = run_probes(sandbox, project_suite("url_query"), files={**src, PATH: CASES["liars"]},
                             tests=instance.expected_tests)
    finally:
        env.close()
    assert run.complete
    assert _named(set(run.failed())) == {BAD_ESCAPE: 4, QSL_ESCAPE: 1, UTF8_TEST: 1} and len(run.failed()) == 6
