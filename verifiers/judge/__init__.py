"""The quality layer's LLM judge: pinned, bounded, calibrated and hardened (issue #43, docs/judge.md).

* :mod:`~envhub.verifiers.judge.rubric` -- a rubric and the judge prompt built from it;
* :mod:`~envhub.verifiers.judge.quoting` -- the submission as quoted, escaped, capped data, and the
  strict parser of the closed answer form ``SCORE: N``;
* :mod:`~envhub.verifiers.judge.check` -- :class:`~envhub.verifiers.judge.check.JudgeCheck`, a
  bounded quality check of the layered verifier (k samples, majority, the pin in every verdict);
* :mod:`~envhub.verifiers.judge.calibrate` and :mod:`~envhub.verifiers.judge.stats` -- labelled
  cases, agreement, kappa, self-consistency and their intervals; :mod:`~envhub.verifiers.judge.bias`
  -- the bias battery; :mod:`~envhub.verifiers.judge.latest` -- an env's stored calibration;
* :mod:`~envhub.verifiers.judge.suite` -- the battery as ``envhub verify`` rows;
  :mod:`~envhub.verifiers.judge.bench` -- ``envhub bench judge``; :mod:`~envhub.verifiers.judge.cli`
  -- ``envhub judge calibrate``.

The engine contract and the pin are the kernel's (:mod:`envhub.judges`); the backends are
:mod:`envhub.adapters.judge_engines`.
"""
