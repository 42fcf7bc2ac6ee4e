"""A policy that plays envhub episodes through an OpenAI-compatible ``/v1/chat/completions``.

This is how envhub runs inside harnesses that own the model behind an OpenAI endpoint: Miles'
session server (its agent function gets a ``base_url``), our own TITO server
(:mod:`envhub.adapters.tito`), or any chat server. The agent keeps the conversation as the
client-side message list and only ever *appends* to it (the server's replies unchanged, the
env's new messages), so a session server never sees a rewritten history.

With a TITO server (``tito=True``) each episode gets its own session; the sampled text and token
ids come back in the response's ``envhub`` field (with ``observation_ids``: the ids the server
appended for the env's reply the request carried, handed over with the turn's output) and the full
masked token view from ``/sessions/{id}/trajectory``, so ``run_rollouts`` records token-exact
trajectories. The policy's ``describe()`` records the server's tokenizer and chat-template hash
(from ``GET /info``), so ``envhub audit`` can decode the run. Reading the token view at the
episode's end closes the session (``DELETE /sessions/{id}``); ``close()`` deletes any session
still open. Against other servers the record has the actions as text only (no token view).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from envhub.episode import EpisodeEnv
from envhub.errors import EngineError
from envhub.parsing import format_tool_call
from envhub.policies import PolicyOutput
from envhub.types import Message, Observation, Sample, TokenView, ToolSpec

log = logging.getLogger(__name__)


def openai_message(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name and m.role == "tool":
        d["name"] = m.name
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    return d


def action_text(message: dict[str, Any]) -> str:
    """An assistant message as envhub action text: its content, then Hermes blocks for any
    structured tool calls (the env parses tool calls out of the text)."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        args = fn.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                args = {"__unparsed__": args}  # the env reports it to the model as a bad call
        parts.append(format_tool_call(fn.get("name", ""), args))
    return "\n".join(p for p in parts if p)


class OpenAIChatAgent:
    """One episode's conversation with a chat endpoint (see the module docstring)."""

    def __init__(self, client: Any, chat_url: str, tools: list[ToolSpec], request_kwargs: dict[str, Any],
                 session_url: str | None, on_close: Any = None) -> None:
        self.client, self.chat_url, self.session_url = client, chat_url, session_url
        self.tools = [t.to_openai() for t in tools]
        self.request_kwargs = request_kwargs
        self.messages: list[dict[str, Any]] = []
        self._pending_call_ids: list[str] = []
        self._cached: dict[str, Any] | None = None
        self._on_close = on_close
        self.closed = False

    def close(self) -> None:
        """Delete the episode's session on the server (once; a server that is gone is not an error)."""
        if self.closed:
            return
        self.closed = True
        if self._on_close is not None:
            self._on_close(self)
        if self.session_url is None:
            return
        try:
            response = self.client.delete(self.session_url)
            if response.status_code not in (200, 404):
                log.warning("deleting session %s answered %s", self.session_url, response.status_code)
        except Exception as exc:
            log.warning("could not delete session %s: %r", self.session_url, exc)

    def _add_observation(self, observation: Observation) -> None:
        for m in observation.messages:
            d = openai_message(m)
            if m.role == "tool" and not d.get("tool_call_id") and self._pending_call_ids:
                d["tool_call_id"] = self._pending_call_ids.pop(0)  # OpenAI servers require the pairing
            self.messages.append(d)

    def act(self, observation: Observation) -> PolicyOutput:
        if self.closed:
            raise EngineError(f"the episode's session {self.session_url} is closed")
        self._add_observation(observation)
        self._cached = None
        payload = {"model": self.request_kwargs.get("model", "envhub"), **self.request_kwargs,
                   "messages": self.messages}
        if self.tools:
            payload["tools"] = self.tools
        try:
            response = self.client.post(self.chat_url, json=payload)
        except Exception as exc:  # network failures are the server's, not the model's
            raise EngineError(f"chat endpoint unreachable: {exc!r}") from exc
        if response.status_code >= 400:
            raise EngineError(f"chat endpoint answered {response.status_code}: {response.text[:500]}")
        body = response.json()
        choice = body["choices"][0]
        message = {k: v for k, v in choice["message"].items() if v is not None}
        self.messages.append(message)
        self._pending_call_ids = [c["id"] for c in message.get("tool_calls") or [] if c.get("id")]
        extra = body.get("envhub") or {}
        finish = {"tool_calls": "stop"}.get(choice.get("finish_reason"), choice.get("finish_reason"))
        sample = Sample(token_ids=list(extra.get("token_ids", [])), logprobs=list(extra.get("logprobs", [])),
                        finish_reason=finish, weight_version=extra.get("weight_version"))
        # the ids the session appended for the observation: only from an undiverged session, whose
        # record is the one token_view() reads
        trusted = self.session_url is not None and not extra.get("divergences")
        return PolicyOutput(text=extra.get("text", action_text(message)), sample=sample,
                            observation_ids=list(extra.get("observation_ids", [])) if trusted else [])

    def _trajectory(self) -> dict[str, Any] | None:
        """The session's record, or None when there is none to trust (no session, the server is
        gone, or the history diverged -- impossible for this agent, which only appends).

        The runner reads it once the episode is over, so the first read also closes the session."""
        if self.session_url is None:
            return None
        if self._cached is None and not self.closed:
            try:
                response = self.client.get(f"{self.session_url}/trajectory")
                response.raise_for_status()
                traj = response.json()
            except Exception as exc:
                log.warning("no token record from %s: %r", self.session_url, exc)
                traj = None
            finally:
                self.close()
            if traj is None:
                return None
            if traj["divergences"]:
                log.warning("session %s diverged; recording no token view", traj["session_id"])
                return None
            self._cached = traj
        return self._cached

    def token_view(self) -> TokenView | None:
        traj = self._trajectory()
        if traj is None:
            return None
        return TokenView(prompt_ids=traj["prompt_ids"], response_ids=traj["response_ids"],
                         response_mask=traj["response_mask"], response_logprobs=traj["response_logprobs"])


class OpenAIChatPolicy:
    """Drive episodes through ``base_url`` + ``/v1/chat/completions``.

    ``base_url`` is a server root (``http://host:port``) or, for Miles' agent functions, a
    session's base URL. With ``tito=True`` the server is envhub's TITO server and every episode
    opens its own session there (token-exact records), deleted when the episode's record is read.
    """

    name = "openai"

    def __init__(self, base_url: str, *, tito: bool = False, request_kwargs: dict[str, Any] | None = None,
                 timeout: float = 300.0, client: Any = None) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.tito = tito
        self.request_kwargs = dict(request_kwargs or {})
        self.client = client or httpx.Client(timeout=timeout)
        self._info: dict[str, Any] | None = None
        self._open: set[OpenAIChatAgent] = set()
        self._open_lock = threading.Lock()

    def server_info(self) -> dict[str, Any]:
        """The TITO server's ``GET /info`` (model, tokenizer, chat-template hash); {} elsewhere."""
        if not self.tito:
            return {}
        if self._info is None:
            try:
                response = self.client.get(f"{self.base_url}/info")
                response.raise_for_status()
                self._info = dict(response.json())
            except Exception as exc:
                log.warning("no server info from %s (is it envhub's TITO server?): %r", self.base_url, exc)
                return {}
        return self._info

    def _forget(self, agent: OpenAIChatAgent) -> None:
        with self._open_lock:
            self._open.discard(agent)

    def start(self, env: EpisodeEnv, observation: Observation, *, seed: int) -> OpenAIChatAgent:
        session_url = None
        chat_url = f"{self.base_url}/v1/chat/completions"
        if self.tito:
            response = self.client.post(f"{self.base_url}/sessions", json={"metadata": {
                "env_id": env.env_id, "task_id": env.episode.task.task_id if env.episode else None}})
            response.raise_for_status()
            session_url = response.json()["base_url"]
            chat_url = f"{session_url}/v1/chat/completions"
        kwargs = dict(self.request_kwargs)
        if "seed" not in kwargs and self.tito:
            kwargs["seed"] = seed
        agent = OpenAIChatAgent(self.client, chat_url, observation.tools, kwargs, session_url,
                                on_close=self._forget)
        if session_url is not None:
            with self._open_lock:
                self._open.add(agent)
        return agent

    def describe(self) -> dict[str, Any]:
        info = self.server_info()
        out: dict[str, Any] = {"model": f"openai:{self.base_url}", "sampling_params": {
            k: v for k, v in self.request_kwargs.items() if k not in ("model",)}}
        if info:
            out |= {"model": info.get("model") or out["model"], "tokenizer": info.get("tokenizer"),
                    "chat_template_hash": info.get("chat_template_hash"), "chat_format": info.get("chat_format"),
                    "max_context": info.get("max_context")}
        return out

    def close(self) -> None:
        with self._open_lock:
            left = list(self._open)
        for agent in left:  # episodes whose record was never read (they crashed): their sessions too
            agent.close()
        self.client.close()
