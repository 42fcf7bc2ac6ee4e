"""``JsonlStore.rewrite``: records removed by key in one atomic replacement, the store open for appends
throughout, and appends racing the rewrite neither lost nor torn."""

import threading

from envhub.store import JsonlStore, read_jsonl


def test_rewrite_removes_by_key_and_the_store_appends_after_it(tmp_path):
    path = tmp_path / "entries.jsonl"
    with JsonlStore(path, key="entry") as store:
        for i in range(6):
            store.append({"entry": f"e{i}", "n": i})
        assert store.rewrite(lambda key: key in {"e1", "e4", "absent"}) == 2
        assert store.rewrite(lambda key: False) == 0
        store.append({"entry": "e6", "n": 6})
        store.append({"entry": "e1", "n": 1})  # a removed key may come again
    assert [r["entry"] for r in read_jsonl(path)] == ["e0", "e2", "e3", "e5", "e6", "e1"]
    with JsonlStore(path, key="entry") as store:  # reopened: the keys are those on disk
        assert store.keys == {"e0", "e2", "e3", "e5", "e6", "e1"}
    assert not [p for p in tmp_path.iterdir() if p.name != "entries.jsonl"], "a temp file was left"


def test_appends_racing_rewrites_are_all_kept(tmp_path):
    path = tmp_path / "entries.jsonl"
    with JsonlStore(path, key="entry") as store:
        def writer() -> None:
            for i in range(400):
                store.append({"entry": f"w{i}", "pad": "x" * 200})

        thread = threading.Thread(target=writer)
        thread.start()
        removed = 0
        while thread.is_alive():
            removed += store.rewrite(lambda key: int(key[1:]) % 2 == 0)
        thread.join()
        removed += store.rewrite(lambda key: int(key[1:]) % 2 == 0)
    kept = [r["entry"] for r in read_jsonl(path)]
    assert kept == [f"w{i}" for i in range(1, 400, 2)] and removed == 200
