"""How docker tells an executor the kernel killed for memory (the agent's doing: the sandbox restarts)
from a container that broke (``env_error``), read from the engine's events; no engine needed. The
restart itself is played through the tools on docker and bwrap in
``tests/tasks/code_repair/test_code_repair_infra_limits.py``."""

from envhub.sandboxes.docker_backend import killed_for_memory

SINCE = 1_700_000_000_000_000_000


def event(action: str, at: int, exit_code: str | None = None) -> dict:
    attributes = {"exitCode": exit_code} if exit_code is not None else {}
    return {"Action": action, "status": action, "timeNano": at, "Actor": {"Attributes": attributes}}


class Engine:
    def __init__(self, *events: dict) -> None:
        self.events_seen = list(events)
        self.asked: list[dict] = []

    def events(self, **params):
        self.asked.append(params)
        return iter(self.events_seen)


def test_an_oom_kill_then_a_sigkilled_pid_1_is_a_death_for_memory():
    engine = Engine(event("oom", SINCE + 5), event("die", SINCE + 9, "137"))
    assert killed_for_memory(engine, "c0ffee", SINCE)
    assert engine.asked[0]["filters"] == {"container": "c0ffee", "event": ["oom", "die"]}


def test_any_other_death_stays_the_sandbox_s():
    assert not killed_for_memory(Engine(event("die", SINCE + 9, "137")), "c", SINCE)  # docker kill: no OOM
    assert not killed_for_memory(Engine(event("oom", SINCE + 5), event("die", SINCE + 9, "1")), "c", SINCE)
    # an OOM kill before the executor last answered was a command's, reported with it
    assert not killed_for_memory(Engine(event("oom", SINCE - 5), event("die", SINCE + 9, "137")), "c", SINCE)


def test_a_container_that_did_not_die_is_not_waited_for_long():
    engine = Engine(event("oom", SINCE + 5))  # a hung executor: no die event comes
    assert not killed_for_memory(engine, "c", SINCE, wait_s=0.2)
    assert len(engine.asked) >= 2  # it looked again before giving up
