"""Retrieval tasks: questions about the Python standard library, answered by searching its docs.

The corpus is a frozen snapshot (``data/``) written by ``offline/build_corpus.py``;
``envhub/Retrieval-v0`` searches it with BM25 (bm25s), pages through documents, and grades
answers by type, with evidence recall as a logged metric.
"""

from envhub.tasks.retrieval.env import RetrievalEnv, RetrievalTasks, retrieval_attacks


def register_envs() -> None:
    from envhub.registry import register

    register(
        RetrievalEnv.env_id,
        RetrievalEnv,
        description="questions about the Python stdlib docs: search (BM25), open, answer",
        sandbox="none",
    )


__all__ = ["RetrievalEnv", "RetrievalTasks", "register_envs", "retrieval_attacks"]
