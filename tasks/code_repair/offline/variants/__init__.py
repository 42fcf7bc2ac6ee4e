"""The differential corpus of code repair (issue #20 item 3): correct variants of every project's gold.

Rewrite rules (:mod:`.rules`; :mod:`.errors`, :mod:`.values`, :mod:`.refactors`, :mod:`.helpers`)
turn a project's gold sources into variants that differ in form -- an exception subclass, a
longer message, extra private state, an equal container, a comprehension, an early return, an
extracted helper. :mod:`.build` keeps the ones the project's real pytest suite passes and whose
observations differ from the gold's; :mod:`.grade` grades them with the observation probes, as
the verifier does. Every kept variant is correct by the tests' own standard, so each one the
probes reject is a false negative of the grader.

    python -m envhub.tasks.code_repair.offline.variants build      # rebuild data/variants.json.gz
    python -m envhub.tasks.code_repair.offline.variants measure    # grade every variant, report rejections
"""

from .corpus import CORPUS, Corpus, Variant, load_corpus, stale_projects

__all__ = ["CORPUS", "Corpus", "Variant", "load_corpus", "stale_projects"]
