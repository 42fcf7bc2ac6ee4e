"""Offline build tools of the retrieval family: they write the frozen snapshot in ``data/``.

Nothing at run time imports this package; the env reads only the snapshot, checksums first.

    python -m envhub.tasks.retrieval.offline.build_corpus
"""
