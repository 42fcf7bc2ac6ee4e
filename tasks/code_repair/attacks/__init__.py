"""The code-repair verifier suite's adversarial submissions (``envhub verify envhub/CodeRepair-v0``).

:func:`code_repair_attacks` lists every case the env's ``adversarial_cases`` plays after the gold
and noop cases; :data:`GRADER_ATTACKS` holds the attacks on the grader itself, by class. The case
table is in :mod:`.cases`; the code the cases write into a submission lives in :mod:`.sources`,
:mod:`.files`, :mod:`.oracles`, :mod:`.equality` and :mod:`.hiding`, and the hard-coding of the
issue's examples in :mod:`.hardcode`.
"""

from .cases import GRADER_ATTACKS, code_repair_attacks

__all__ = ["GRADER_ATTACKS", "code_repair_attacks"]
