"""Retrieval tasks: questions about the Python standard library, answered by searching its docs.

The corpus is a frozen snapshot (``data/``) written by ``offline/build_corpus.py``;
``envhub/Retrieval-v0`` searches it with BM25 (bm25s), pages through documents, and grades
answers by type, with evidence recall as a logged metric. Registration imports nothing of the
family: the env is registered by its import path.
"""

ENV_ID = "envhub/Retrieval-v0"


def register_envs() -> None:
    from envhub.registry import register

    register(ENV_ID, "envhub.tasks.retrieval.env:RetrievalEnv",
             description="questions about the Python stdlib docs: search (BM25), open, answer")


__all__ = ["ENV_ID", "register_envs"]
