"""Trainer tests: the learning-test env registered, a near-uniform tiny model, configs in tmp dirs."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from letter_env import register_test_env


@pytest.fixture(scope="session", autouse=True)
def _letter_env():
    register_test_env()


@pytest.fixture(scope="session")
def scratch_model() -> Path:
    """A tiny random model with a real model's init (std 0.02): near-uniform over the vocabulary."""
    from envhub.adapters.engines.tiny import build_tiny_model

    return build_tiny_model(layers=1, hidden=64, init_std=0.02, seed=0)


@pytest.fixture(scope="session")
def untied_scratch_model() -> Path:
    """:func:`scratch_model` with an output head of its own (not the embeddings), one a LoRA adapter may
    target: with every weight but the adapters frozen, only an adapter on the head can reshape a random
    model's next-token distribution."""
    from envhub.adapters.engines.tiny import build_tiny_model

    return build_tiny_model(layers=1, hidden=64, init_std=0.02, seed=0, tied=False)
