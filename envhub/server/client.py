"""``envhub.connect(url)``: a served env with the local env's API, for the episode collector.

A :class:`RemoteEnv` holds one session on an ``envhub serve`` server over its WebSocket and
offers what an episode (:mod:`envhub.rollout.episodes`) uses of a local :class:`~envhub.env.Env`,
:class:`~envhub.episode.EpisodeEnv`: ``reset``, ``step``, ``abort``, ``close``, ``env_id``, ``version``, ``split``, ``tasks`` (ids per
split, the task-set version), ``gold_actions(task)``, and an ``episode`` view (task, messages,
turns, verdict, metrics, done) rebuilt from the server's state. The sample that rides with each
action (token ids, logprobs, ...) and the ids a policy appended for the env's reply to it
(``record_observation_ids``) stay here and are recorded on that turn of the view, so a record of
a remote episode is built exactly as a local one is.

Reconnection: a dropped connection is reopened with the session id the server gave at the
handshake, for as long as the server keeps detached sessions (its TTL), and the request in
flight is resent with the same ``request_id`` -- the server answers a repeat from its cache, so a
step is never applied twice. If the session is gone (TTL passed, server restarted), the episode
ends locally as ``env_error``: an infrastructure failure, never scored as the model's.

Synchronous by design, like the local env: the collector gives each worker thread its own env.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from envhub.episode import Episode
from envhub.errors import EpisodeFinishedError, InfraError
from envhub.server.wire import SESSION_HEADER, EpisodeState, parse_step_result
from envhub.types import Action, EpisodeMetrics, Observation, Outcome, Sample, Task, ToolSpec, Turn, Verdict


@dataclass
class _LocalTurn:
    """What one turn of a remote episode holds here and never sends: the sample that rode with its
    action and the ids the policy appended for the env's reply to it."""

    sample: Sample | None
    observation_ids: list[int] = field(default_factory=list)

    def record_on(self, turn: Turn) -> None:
        if self.sample is not None:
            self.sample.record_on(turn)
        if self.observation_ids:
            turn.observation_ids = list(self.observation_ids)


class RemoteError(InfraError):
    """The server refused a request or could not be reached; ``code`` is the server's error code."""

    def __init__(self, message: str, code: str = "UNREACHABLE") -> None:
        super().__init__(f"{message} ({code})")
        self.code = code


class SessionLostError(RemoteError):
    """The server no longer has this session (its TTL passed, or the server restarted)."""


class CapacityReachedError(RemoteError):
    """The server is at its session capacity."""


class RemoteTasks:
    """``env.tasks`` of a remote env: task ids per split, fetched once, and the task-set version."""

    def __init__(self, env: RemoteEnv) -> None:
        self._env = env
        self._ids: dict[str, list[str]] = {}
        self.name = env.env_id
        self.version = env.info["task_set"]

    def task_ids(self, split: str) -> list[str]:
        if split not in self._ids:
            body = self._env._http_get("/envhub/tasks", params={"split": split})
            self._ids[split] = list(body["task_ids"])
        return self._ids[split]


class RemoteEnv:
    """One session on a remote env server. See the module docstring."""

    def __init__(self, url: str, token: str | None = None, *, timeout_s: float = 600.0,
                 connect_timeout_s: float = 10.0, reconnect_window_s: float | None = None,
                 capacity_wait_s: float = 0.0) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
            raise ValueError(f"not a server URL: {url!r} (expected http://host:port)")
        http_scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        self.base_url = urlunsplit((http_scheme, parts.netloc, parts.path, "", ""))
        self.ws_url = urlunsplit(("wss" if http_scheme == "https" else "ws", parts.netloc,
                                  parts.path + "/ws", "", ""))
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.capacity_wait_s = capacity_wait_s
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers,
                                  timeout=connect_timeout_s + 30.0)
        self.info: dict[str, Any] = self._http_get("/envhub/info")
        self.env_id: str = self.info["env_id"]
        self.version: str = self.info["env_version"]
        self.split: str = self.info["split"]
        self.tool_specs: list[ToolSpec] = [ToolSpec.model_validate(t) for t in self.info["tools"]]
        self.tasks = RemoteTasks(self)
        self.reconnect_window_s = (reconnect_window_s if reconnect_window_s is not None
                                   else min(float(self.info["session_ttl_s"]), 120.0))
        self.session_id: str | None = None
        self._ws: Any = None
        self._episode: Episode | None = None
        self._stale = False
        self._local_env: Any = None
        self._local_turns: list[_LocalTurn] = []  # per step of the episode

    # ---- the Env API --------------------------------------------------------------------------

    @property
    def terminal_tool(self) -> str:
        name = self.info.get("terminal_tool")
        if not name:
            raise ValueError(f"{self.env_id} has no terminal tool")
        return str(name)

    def reset(self, *, seed: int | None = None, task_id: str | None = None,
              options: dict[str, Any] | None = None) -> Observation:
        data: dict[str, Any] = {}
        if seed is not None:
            data["seed"] = seed
        if task_id is not None:
            data["task_id"] = task_id
        if options:
            data["options"] = options
        obs = self._observation(self._request({"type": "reset", "data": data}))
        self._stale = True
        self._episode = None
        self._local_turns = []
        return obs

    def step(self, action: str | Action | dict[str, Any], *, sample: Sample | None = None) -> Observation:
        """``Env.step`` on the server. ``sample`` never travels: it is recorded on this turn of
        the episode view here (the server's turns hold no token ids)."""
        if isinstance(action, str):
            payload: dict[str, Any] = {"text": action}
        elif isinstance(action, Action):
            payload = action.model_dump(mode="json", exclude_none=True)
        elif isinstance(action, dict):
            payload = Action.model_validate(action).model_dump(mode="json", exclude_none=True)
        else:
            raise TypeError(f"an action is text, an Action or a dict, not {type(action).__name__}")
        if self._episode is not None and self._episode.done and not self._stale:
            raise EpisodeFinishedError("no episode is running: call reset() first")
        try:
            reply = self._request({"type": "step", "data": payload})
        except RemoteError as exc:
            if exc.code == "EPISODE_NOT_RUNNING":
                raise EpisodeFinishedError(str(exc)) from None
            raise
        self._stale = True
        self._local_turns.append(_LocalTurn(sample))
        return self._observation(reply)

    def record_observation_ids(self, ids: list[int]) -> None:
        """``Env.record_observation_ids``: kept here, on the latest turn (they never travel)."""
        self._local_turns[-1].observation_ids = list(ids)
        self._stale = True

    def abort(self, outcome: Outcome, detail: str) -> Observation:
        """End the episode from outside. If the session is gone, end the local view instead."""
        try:
            reply = self._request({"type": "abort", "data": {"outcome": Outcome(outcome).value,
                                                               "detail": detail}})
        except RemoteError as exc:
            return self._abort_locally(Outcome(outcome), f"{detail}\n[remote abort failed: {exc}]")
        self._stale = True
        return self._observation(reply)

    def state(self) -> EpisodeState:
        return EpisodeState.model_validate(self._request({"type": "state"})["data"])

    @property
    def episode(self) -> Episode | None:
        """The running episode as the server has it (fetched after each change, then cached)."""
        if self._stale and self._ws_usable():
            with contextlib.suppress(RemoteError):
                self._episode = _episode_from_state(self.state(), self._local_turns)
                self._stale = False
        return self._episode

    def gold_actions(self, task: Task) -> list[Action]:
        """The reference solution: from the server when it exposes gold, else from a local copy
        of the same env and task set (gold needs the task's hidden fields, which never travel)."""
        if self.info.get("gold_exposed"):
            episode = self.episode
            if episode is not None and episode.task.task_id == task.task_id:
                reply = self._request({"type": "gold"})
                return [Action.model_validate(a) for a in reply["data"]["actions"]]
        return self._local_gold(task)

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.send(json.dumps({"type": "close"}))
            with contextlib.suppress(Exception):
                ws.close()
        self.session_id = None
        self._http.close()
        if self._local_env is not None:
            self._local_env.close()
            self._local_env = None

    def __enter__(self) -> RemoteEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transport ----------------------------------------------------------------------------

    def _http_get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise RemoteError(f"cannot reach {self.base_url}{path}: {exc}") from None
        if response.status_code != 200:
            try:
                body = response.json()
            except ValueError:
                body = {}
            raise RemoteError(f"GET {path}: {body.get('message', response.text[:200])}",
                              str(body.get("code", response.status_code)))
        return dict(response.json())

    def _ws_usable(self) -> bool:
        return self._ws is not None or self.session_id is not None

    def _open(self) -> Any:
        """A connected socket: a new session, or the current one resumed."""
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        headers = dict(self._headers)
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        try:
            # entered by hand: the connection outlives any one with-block (websockets >= 17 warns
            # about a connection that is used without being entered)
            ws = connect(self.ws_url, additional_headers=headers, open_timeout=self.connect_timeout_s,
                         max_size=None, compression=None, ping_interval=20, ping_timeout=20,
                         close_timeout=2).__enter__()
        except InvalidStatus as exc:
            code = "UNAUTHORIZED" if exc.response.status_code in (401, 403) else "HANDSHAKE_FAILED"
            raise RemoteError(f"{self.ws_url} refused the connection: HTTP {exc.response.status_code}",
                              code) from None
        sid = ws.response.headers.get(SESSION_HEADER) if ws.response is not None else None
        if sid is None:  # the server refused the session and says why in one error frame
            reply = _recv_json(ws, self.connect_timeout_s)
            with contextlib.suppress(Exception):
                ws.close()
            raise _error_from(reply.get("data", {}), self.session_id is not None)
        self.session_id = sid
        return ws

    def _connect(self) -> Any:
        deadline = time.monotonic() + self.capacity_wait_s
        delay = 0.1
        while True:
            try:
                return self._open()
            except CapacityReachedError:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message and return its reply, resuming the session across connection drops."""
        from websockets.exceptions import ConnectionClosed

        message = {**message, "request_id": secrets.token_hex(12)}
        text = json.dumps(message)
        deadline: float | None = None
        delay = 0.05
        while True:
            try:
                if self._ws is None:
                    self._ws = self._connect() if self.session_id is None else self._open()
                self._ws.send(text)
                reply = _recv_json(self._ws, self.timeout_s)
                break
            except (ConnectionClosed, OSError) as exc:
                self._drop()
                if self.session_id is None:
                    raise RemoteError(f"cannot reach {self.ws_url}: {exc}") from None
                deadline = deadline or time.monotonic() + self.reconnect_window_s
                if time.monotonic() + delay > deadline:
                    raise RemoteError(f"lost the connection to {self.ws_url} and could not resume "
                                      f"within {self.reconnect_window_s:g}s: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except SessionLostError:
                self._drop()
                self.session_id = None
                raise
        if reply.get("type") == "error":
            raise _error_from(reply.get("data", {}), False)
        return reply

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()

    # ---- helpers ------------------------------------------------------------------------------

    def _observation(self, reply: dict[str, Any]) -> Observation:
        return parse_step_result(reply.get("data") or {})

    def _abort_locally(self, outcome: Outcome, detail: str) -> Observation:
        episode = self._episode
        if episode is None:
            raise EpisodeFinishedError("no episode to abort")
        if not episode.done:
            episode.verdict = Verdict(reward=0.0, outcome=outcome, detail=detail)
            episode.done = True
        self._stale = False
        verdict = episode.verdict
        assert verdict is not None
        return Observation(done=True, truncated=verdict.outcome.is_truncation, reward=verdict.reward,
                           outcome=verdict.outcome, verdict=verdict, info={"task_id": episode.task.task_id})

    def _local_gold(self, task: Task) -> list[Action]:
        from envhub.registry import UnknownEnvError, make

        if self._local_env is None:
            try:
                self._local_env = make(self.env_id, split=self.split)
            except UnknownEnvError:
                raise RemoteError(f"gold actions need --expose-gold on the server, or {self.env_id} "
                                  "installed here", "FORBIDDEN") from None
        local = self._local_env
        if str(local.version) != self.version or str(local.tasks.version) != str(self.tasks.version):
            raise RemoteError(f"local {self.env_id} (env {local.version}, tasks {local.tasks.version}) "
                              f"differs from the server's (env {self.version}, tasks {self.tasks.version})",
                              "VERSION_MISMATCH")
        return list(local.gold_actions(local.tasks.get(task.task_id)))


def _recv_json(ws: Any, timeout_s: float) -> dict[str, Any]:
    try:
        raw = ws.recv(timeout=timeout_s)
    except TimeoutError:
        raise RemoteError(f"no reply within {timeout_s:g}s", "TIMEOUT") from None
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise RemoteError("the server sent a message that is not a JSON object", "PROTOCOL_ERROR")
    return data


def _error_from(data: dict[str, Any], resuming: bool) -> RemoteError:
    code = str(data.get("code", "ERROR"))
    message = str(data.get("message", "server error"))
    if code == "SESSION_NOT_FOUND":
        return SessionLostError(message, code)
    if code == "CAPACITY_REACHED":
        return CapacityReachedError(message, code)
    return RemoteError(message, code)


def _episode_from_state(state: EpisodeState, local: Sequence[_LocalTurn] = ()) -> Episode | None:
    if state.task is None:
        return None
    task = Task.model_validate({**state.task, "hidden": {}})
    for turn, here in zip(state.turns, local, strict=False):  # one per step, in step order
        here.record_on(turn)
    return Episode(
        task=task, tools=state.tools, messages=state.messages, turns=state.turns,
        tool_calls=state.tool_calls, format_errors=state.format_errors, done=state.done,
        verdict=state.verdict, metrics=state.metrics or EpisodeMetrics(),
    )


def connect(url: str, token: str | None = None, **options: Any) -> RemoteEnv:
    """A :class:`RemoteEnv` for the server at ``url`` (``http://host:port``)."""
    return RemoteEnv(url, token, **options)


def remote_env_factory(url: str, token: str | None = None, **options: Any) -> Callable[[], RemoteEnv]:
    """For ``run_rollouts(env_factory=...)``: each call opens its own remote env (own session)."""

    def factory() -> RemoteEnv:
        return RemoteEnv(url, token, **options)

    return factory


__all__: Sequence[str] = [
    "CapacityReachedError", "RemoteEnv", "RemoteError", "RemoteTasks", "SessionLostError", "connect",
    "remote_env_factory",
]
