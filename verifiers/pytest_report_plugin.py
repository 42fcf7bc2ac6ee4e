"""pytest plugin the grader loads into the hidden-test run: one JSON outcome per test node id.

It is copied into the grading sandbox at verification time, never into the agent's, and imported
before any submitted module is on ``sys.path``. Submitted code runs in this same process, so the
plugin trusts nothing it could have changed:

* the report path leaves ``os.environ`` as soon as the plugin loads, and the functions that write
  the report are bound here, at load time;
* a test's outcome is observed twice: from the test call itself (``call.excinfo``, in a hook
  wrapper around ``pytest_runtest_makereport``) and from the report pytest logs. A test counts as
  passed only when its setup, call and teardown passed by both accounts;
* the pytest internals that decide an outcome are fingerprinted at load time and compared at the
  end. A changed one, or a test reported passed whose call raised, is tampering: the report then
  names it and carries no outcomes.

A run killed before ``pytest_sessionfinish`` writes no report, and the grader then treats every
test as missing.
"""

import json
import os

import _pytest.outcomes
import _pytest.python
import _pytest.reports
import _pytest.runner
import pytest

_REPORT = os.environ.pop("ENVHUB_REPORT")
_dumps, _replace, _open = json.dumps, os.replace, open
_SKIP = _pytest.outcomes.Skipped

# (owner, attribute) pairs whose identity decides outcomes; a missing one (another pytest) is skipped.
_WATCHED_NAMES = (
    (_pytest.reports.TestReport, "__init__"), (_pytest.reports.TestReport, "from_item_and_call"),
    (_pytest.reports.BaseReport, "passed"), (_pytest.reports.BaseReport, "failed"),
    (_pytest.runner.CallInfo, "from_call"), (_pytest.runner.CallInfo, "__init__"),
    (_pytest.runner, "call_and_report"), (_pytest.runner, "runtestprotocol"), (_pytest.runner, "call_runtest_hook"),
    (_pytest.runner, "pytest_runtest_makereport"), (_pytest.runner, "check_interactive_exception"),
    (_pytest.python, "pytest_pyfunc_call"), (_pytest.python.Function, "runtest"),
    (_pytest.outcomes, "Skipped"), (_pytest.outcomes, "Failed"),
)


def _fingerprint():
    found = {}
    for owner, name in _WATCHED_NAMES:
        if name in vars(owner):
            found[f"{getattr(owner, '__name__', owner)}.{name}"] = vars(owner)[name]
    return found


_WATCHED = _fingerprint()
_observed: dict = {}
_reported: dict = {}
_collection_errors: list = []
_contradictions: list = []


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    yield
    if call.excinfo is None:
        seen = "passed"
    elif isinstance(call.excinfo.value, _SKIP):
        seen = "skipped"
    else:
        seen = "failed"
    _observed.setdefault(item.nodeid, {})[call.when] = seen


def pytest_runtest_logreport(report):
    _reported.setdefault(report.nodeid, {})[report.when] = report.outcome
    if report.outcome == "passed" and _observed.get(report.nodeid, {}).get(report.when) not in (None, "passed"):
        _contradictions.append(f"{report.nodeid} ({report.when}) reported passed, but its call raised")


def pytest_collectreport(report):
    if report.failed:
        _collection_errors.append(report.nodeid or "<session>")


def _outcome(nodeid, phases):
    observed = _observed.get(nodeid, {})
    for when in ("setup", "call", "teardown"):
        for account in (observed, phases):
            if when in account and account[when] != "passed":
                return account[when]
    return "passed" if phases.get("call") == "passed" and observed.get("call") == "passed" else "error"


def pytest_sessionfinish(session, exitstatus):
    now = _fingerprint()
    tampered = [f"{name} was replaced" for name, fn in _WATCHED.items() if now.get(name) is not fn]
    tampered += _contradictions[:20]
    outcomes = {} if tampered else {nodeid: _outcome(nodeid, phases) for nodeid, phases in _reported.items()}
    with _open(_REPORT + ".tmp", "w") as fh:
        fh.write(_dumps({"outcomes": outcomes, "collection_errors": _collection_errors, "tampered": tampered,
                         "exitstatus": int(exitstatus)}))
    _replace(_REPORT + ".tmp", _REPORT)
