"""The operations a session supports, shared by the WebSocket, HTTP and MCP front ends.

Each front end only translates its framing; what ``reset``, ``step``, ``state``, ``abort`` and
``gold`` mean, which inputs are the caller's mistake (:class:`ProtocolError`, a 4xx) and how
episodes are counted live here once.
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import ValidationError

from envhub.errors import EpisodeFinishedError
from envhub.server.sessions import Session, SessionManager
from envhub.server.wire import (
    STEP_ACTION,
    AbortRequest,
    CallToolWire,
    EpisodeState,
    ListToolsWire,
    ResetRequest,
    WireAction,
    episode_state,
)
from envhub.types import Action, Observation


class ProtocolError(Exception):
    """A request the server refuses because of what the client sent (or asked for)."""

    def __init__(self, code: str, message: str, status: int = 400,
                 errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.errors = errors

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.errors is not None:
            out["errors"] = self.errors
        return out


def validation_error(exc: ValidationError, what: str) -> ProtocolError:
    errors = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors(include_url=False, include_input=False)
    ]
    detail = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in errors)
    return ProtocolError("VALIDATION_ERROR", f"invalid {what}: {detail}", 422, errors)


def _as_dict(data: Any, what: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProtocolError("VALIDATION_ERROR", f"{what} must be a JSON object, not {type(data).__name__}", 422)
    return data


class Ops:
    """Session operations over one :class:`SessionManager`."""

    def __init__(self, manager: SessionManager, *, expose_gold: bool) -> None:
        self.manager = manager
        self.expose_gold = expose_gold

    async def reset(self, session: Session, data: Any) -> Observation:
        try:
            req = ResetRequest.model_validate(_as_dict(data, "reset data"))
        except ValidationError as exc:
            raise validation_error(exc, "reset parameters") from None
        env = session.env

        def run() -> Observation:
            return env.reset(seed=req.seed, task_id=req.task_id, options=req.options)

        try:
            obs = await self._guarded(session, run)
        except (KeyError, ValueError, LookupError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise ProtocolError("UNKNOWN_TASK", f"cannot reset: {message}", 404) from None
        session.episodes += 1
        session.episode_id = req.episode_id or secrets.token_hex(8)
        session.episode_counted = False
        self._count(session)
        return obs

    @staticmethod
    def parse_action(data: Any) -> WireAction | CallToolWire | ListToolsWire:
        """A step's action: envhub's (an Action: env.step takes it) or one of OpenEnv's MCP actions."""
        try:
            return STEP_ACTION.validate_python(_as_dict(data, "an action"))
        except ValidationError as exc:
            raise validation_error(exc, "action") from None

    async def step_action(self, session: Session, action: Action) -> Observation:
        env = session.env
        try:
            obs = await self._guarded(session, env.step, action)
        except EpisodeFinishedError as exc:
            raise ProtocolError("EPISODE_NOT_RUNNING", f"{exc}", 409) from None
        self._count(session)
        return obs

    async def state(self, session: Session) -> EpisodeState:
        async with session.lock:  # a step on a worker thread must not change it mid-copy
            return episode_state(session.env, session.episode_id)

    async def abort(self, session: Session, data: Any) -> Observation:
        try:
            req = AbortRequest.model_validate(_as_dict(data, "abort data"))
        except ValidationError as exc:
            raise validation_error(exc, "abort request") from None
        if session.env.episode is None:
            raise ProtocolError("EPISODE_NOT_RUNNING", "no episode to abort: call reset first", 409)
        obs = await self._guarded(session, session.env.abort, req.outcome, req.detail)
        self._count(session)
        return obs

    async def gold(self, session: Session) -> list[Action]:
        """The reference solution of the running task -- only where the operator allowed it."""
        if not self.expose_gold:
            raise ProtocolError("FORBIDDEN", "this server does not expose gold actions "
                                "(start it with --expose-gold)", 403)
        episode = session.env.episode
        if episode is None:
            raise ProtocolError("EPISODE_NOT_RUNNING", "no episode: call reset first", 409)
        try:
            return await self._guarded(session, session.env.gold_actions, episode.task)
        except NotImplementedError:
            raise ProtocolError("NOT_IMPLEMENTED", "this env has no gold actions", 501) from None

    async def _guarded(self, session: Session, fn: Any, *args: Any) -> Any:
        """Run env code with the session busy (not reapable) and its activity clock updated."""
        session.busy += 1
        try:
            async with session.lock:  # one env call at a time per session, whatever the front end
                return await self.manager.call(fn, *args)
        finally:
            session.busy -= 1
            self.manager.touch(session)

    def _count(self, session: Session) -> None:
        episode = session.env.episode
        if episode is not None and episode.done and not session.episode_counted and episode.verdict:
            session.episode_counted = True
            self.manager.metrics.episode(episode.verdict.outcome.value)
