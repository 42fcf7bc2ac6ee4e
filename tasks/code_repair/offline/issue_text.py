"""Issue texts written from observed failing behaviour, and the tests an agent may see.

The records come from :mod:`.failure_probe`, the pytest plugin that watched the tests fail; they
hold the call under test, the expected and actual values or the exception, never a test's name
or source.  :func:`render_issue` turns one or more such records into the issue text (a title
line, then one sentence per failure, phrased with some seeded variety), and
:func:`choose_visible_tests` picks the few tests an agent may see and run.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from typing import Any

from envhub import safe_ast

from .failure_probe import callee, project_calls

# Ranks for picking the clearest failure to describe (lower is better).
KIND_RANK = {"compare": 0, "truthy": 1, "no_raise": 1, "error_field": 1, "exception": 2, "error_field_crash": 2,
             "other": 3}
_OP_WORDS = {"<": "less than", "<=": "at most", ">": "greater than", ">=": "at least"}
_RELATION = {"in": "be one of", "not in": "not be one of", "contains": "contain", "does not contain": "not contain"}


def describable(record: dict[str, Any]) -> bool:
    """Whether a failure record names a call (or expression) a report can talk about."""
    if record.get("kind") == "other":
        return bool(record.get("call")) and record.get("exc_type") != "AssertionError"
    return bool(record.get("call"))


def rank(record: dict[str, Any]) -> tuple[int, int]:
    """Sort key preferring direct value mismatches on a call, then short calls."""
    if not describable(record):
        return (9, 0)
    kind_rank = KIND_RANK.get(record.get("kind", "other"), 3) + (3 if record.get("weak") else 0)
    return (kind_rank, len(record.get("call") or ""))


def _callee_name(record: dict[str, Any]) -> str | None:
    """The project function a report is about: the first non-builtin call in the described code."""
    try:
        tree = safe_ast.parse(record["call"])
    except (KeyError, SyntaxError, TypeError):
        return None
    calls = project_calls(tree)
    return callee(calls[0]) or None if calls else None


def _value(text: str | None) -> str:
    """A repr as a report shows it; default object reprs become "a `Class` instance"."""
    match = re.fullmatch(r"<(?:[\w.]+\.)?(\w+) object>", text or "")
    return f"a `{match.group(1)}` instance" if match else f"`{text}`"


def _subject_text(record: dict[str, Any]) -> str:
    text = f"`{record['call']}`"
    if record.get("receiver") and record.get("receiver_var"):
        text += f" (`{record['receiver_var']}` is {_article(record['receiver'])} `{record['receiver']}`)"
    return text


def _after(record: dict[str, Any]) -> str:
    if not record.get("after"):
        return ""
    receiver = (f" (`{record['after_receiver_var']}` is {_article(record['after_receiver'])} "
                f"`{record['after_receiver']}`)"
                if record.get("after_receiver") else "")
    return f"After calling `{record['after']}`{receiver}, "


def _article(noun: str) -> str:
    return "an" if noun[:1].upper() in "AEIOU" else "a"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def describe(record: dict[str, Any], rng: random.Random) -> str:
    """One or two sentences a user would write about this failure."""
    kind = record.get("kind")
    subject = _subject_text(record)
    actual, expected = _value(record.get("actual")), _value(record.get("expected"))
    if record.get("assigned"):
        head = f"After `{record['assigned']} = {record['call']}`, `{record['value_of']}`"
    elif record.get("weak") or (kind == "truthy" and not _callee_name(record)):
        head = f"{_after(record)}{subject}"
    else:
        head = ""
    if kind == "error_field_crash":
        return (f"{_cap(subject)} raises `{record['error']}` as it should, but reading `{record['field']}` from "
                f"that error fails with `{record.get('exc_type')}: {record.get('exc_message')}`.")
    if kind in ("compare", "error_field"):
        op = record.get("op", "==")
        if kind == "error_field" and op == "==":
            return (f"{_cap(subject)} raises `{record['error']}` as it should, but on that error "
                    f"`{record['field']}` is {actual} (expected {expected}).")
        if kind == "error_field":
            got = f"{subject} raises `{record['error']}`, and on that error `{record['field']}` is {actual}"
        elif head:
            got = f"{head} is {actual}"
        else:
            got = rng.choice([f"Calling {subject} returns {actual}", f"{subject} gives {actual}"])
        got = _cap(got)
        if op in ("==", "is"):
            return rng.choice([f"{got}, but {expected} is expected.", f"{got} instead of {expected}."])
        if op in ("!=", "is not"):
            return f"{got}, which is wrong: the result should not be {expected}."
        if op in _OP_WORDS:
            return f"{got}, but the result should be {_OP_WORDS[op]} {expected}."
        return f"{got}, but the result should {_RELATION.get(op, 'match')} {expected}."
    if kind == "truthy":
        want = "True" if record.get("want_true") else "False"
        got = f"{head} is {actual}" if head else f"{subject} returns {actual}"
        if actual in ("`True`", "`False`"):
            return _cap(f"{got}, but it should be `{want}`.")
        return _cap(f"{got}, but a {'non-empty (true)' if want == 'True' else 'false or empty'} result is expected.")
    if kind == "no_raise":
        tail = f"it returns {actual}" if record.get("actual") is not None else "no exception is raised"
        return _cap(f"{subject} should raise `{record['expected_exc']}`, but {tail}.")
    error = f"`{record.get('exc_type')}: {record['exc_message']}`" if record.get("exc_message") else (
        f"`{record.get('exc_type')}`")
    where = f" (raised in `{record['raised_in']}`)" if record.get("raised_in") else ""
    if record.get("expected_exc"):
        return _cap(f"{subject} raises {error}{where}, but `{record['expected_exc']}` is expected.")
    return rng.choice([_cap(f"{subject} crashes with {error}{where}."), f"Calling {subject} fails with {error}{where}."])


def _title(record: dict[str, Any], project: str) -> str:
    kind = record.get("kind", "")
    if kind == "no_raise":
        problem = f"does not raise `{record.get('expected_exc')}`"
    elif kind in ("exception", "error_field_crash") or (kind == "other" and record.get("exc_type")):
        problem = f"raises `{record.get('exc_type')}`"
    elif kind == "error_field":
        problem = f"raises `{record.get('error')}` with wrong details"
    else:
        problem = "returns a wrong result"
    name = _callee_name(record)
    if name:
        return f"`{name}` {problem}"
    call = record.get("call") or ""
    return f"`{call}` {problem}" if 0 < len(call) <= 40 else f"Wrong behaviour in `{project}`"


def render_issue(records: Sequence[dict[str, Any]], *, project: str, rng: random.Random) -> str:
    """The full issue text: a title line and a body describing each observed failure."""
    records = [r for r in records if describable(r)]
    if not records:
        return f"Wrong behaviour in `{project}`\n\nSome results of `{project}` are wrong; please investigate.\n"
    if len(records) == 1:
        title = _title(records[0], project)
        intro = rng.choice(["", f"While using `{project}` I noticed the following.\n\n", ""])
        body = intro + describe(records[0], rng)
    else:
        title = rng.choice([f"Several wrong results in `{project}`", f"Multiple bugs in `{project}`"])
        sentences = list(dict.fromkeys(describe(r, rng) for r in records))
        body = rng.choice(["I ran into these problems:", f"Using `{project}` I found several problems:"]) + "\n\n"
        body += "\n".join(f"{i}. {text}" for i, text in enumerate(sentences, 1))
    outro = rng.choice(["", "\n\nThe rest of the API seems to work as documented.", "\n\nCould you take a look?"])
    return f"{title}\n\n{body}{outro}\n"


def stable_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from a string, independent of ``PYTHONHASHSEED``."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


def choose_visible_tests(key: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str],
                         issue_tests: Sequence[str], *, share: int = 3) -> list[str]:
    """For about one instance in ``share``, a few tests the agent may see and run.

    Mostly pass-to-pass tests (they show how the API is used and guard against regressions);
    every other such instance also gets one failing test, the one the issue describes, so the
    agent can reproduce the report.  Everything else stays hidden.
    """
    rng = stable_rng("visible", key)
    if rng.randrange(share) != 0:
        return []
    chosen = rng.sample(sorted(pass_to_pass), min(3, len(pass_to_pass)))
    failing = [t for t in issue_tests if t in fail_to_pass] or sorted(fail_to_pass)
    if rng.random() < 0.5 and failing:
        chosen.append(failing[0])
    return sorted(chosen)
