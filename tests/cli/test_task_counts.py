"""The task-count cache behind ``envhub list``: used when its fingerprint matches, else recomputed."""

import json

import pytest

from envhub.cli.task_counts import cache_path, task_counts
from envhub.registry import get_spec

ENV_ID = "envhub/Computation-v0"


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ENVHUB_NO_CACHE", raising=False)
    return tmp_path


def _counts():
    return task_counts([get_spec(ENV_ID)])[ENV_ID]


def _rewrite(mutate):
    data = json.loads(cache_path().read_text())
    mutate(data["envs"][ENV_ID])
    cache_path().write_text(json.dumps(data))


def test_counts_are_cached_under_xdg_cache_home_and_read_back(cache_home):
    real = _counts()
    assert cache_path() == cache_home / "envhub" / "task_counts.json"
    assert json.loads(cache_path().read_text())["envs"][ENV_ID]["counts"] == real
    _rewrite(lambda e: e.update(counts=[1, 2, 3]))  # same fingerprint: the cache answers
    assert _counts() == [1, 2, 3]


def test_a_stale_or_corrupt_cache_is_recomputed(cache_home):
    real = _counts()
    _rewrite(lambda e: e.update(counts=[1, 2, 3], fingerprint="0" * 64))
    assert _counts() == real
    assert json.loads(cache_path().read_text())["envs"][ENV_ID]["counts"] == real  # and rewritten
    _rewrite(lambda e: e.update(counts=["many", 2, 3]))
    assert _counts() == real
    cache_path().write_text("{not json")
    assert _counts() == real


def test_no_cache_env_var_neither_reads_nor_writes(cache_home, monkeypatch):
    monkeypatch.setenv("ENVHUB_NO_CACHE", "1")
    assert sum(_counts()) > 0
    assert not cache_path().exists()
