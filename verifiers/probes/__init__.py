"""Observation-probe grading for code repair (the design: docs/code-repair.md).

Hidden tests become probe modules that only observe values; :mod:`.runtime` (``envhub_probe``
in the sandbox) encodes and sends the observations, :mod:`.runner` runs probe tests in isolated
children inside the grading sandbox, and the trusted side compiles the probes, records the
gold's observations and compares (:mod:`.compiler`, :mod:`.record`, :mod:`.compare`,
:mod:`.grader`). No process that runs submitted code holds an expected value or decides an outcome.
"""
