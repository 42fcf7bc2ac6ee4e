"""pytest plugin the grader loads into the hidden-test run: one JSON outcome per test node id.

It is copied into the grading sandbox at verification time, never into the agent's. A test counts
as passed only when its setup, call and teardown all passed; a run killed before
``pytest_sessionfinish`` writes no report, and the grader then treats every test as missing.
"""

import json
import os

_phases: dict = {}
_collection_errors: list = []


def pytest_runtest_logreport(report):
    _phases.setdefault(report.nodeid, {})[report.when] = report.outcome


def pytest_collectreport(report):
    if report.failed:
        _collection_errors.append(report.nodeid or "<session>")


def pytest_sessionfinish(session, exitstatus):
    outcomes = {}
    for nodeid, phases in _phases.items():
        ok = phases.get("call") == "passed" and all(v == "passed" for v in phases.values())
        outcomes[nodeid] = "passed" if ok else phases.get("call") or next(
            (v for v in phases.values() if v != "passed"), "error")
    path = os.environ["ENVHUB_REPORT"]
    with open(path + ".tmp", "w") as fh:
        json.dump({"outcomes": outcomes, "collection_errors": _collection_errors,
                   "exitstatus": int(exitstatus)}, fh)
    os.replace(path + ".tmp", path)
