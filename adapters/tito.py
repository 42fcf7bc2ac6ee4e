"""TITO (token in, token out) session server: an OpenAI-compatible chat endpoint that keeps the
authoritative token record of each conversation, so an existing harness that speaks the
``openai`` client produces trainable trajectories without changing a line.

Why sessions: an OpenAI client re-sends the whole conversation as *messages* on every request.
Re-templating those messages would not give back the tokens the model sampled (tokenization is
not unique, templates normalize whitespace, tool calls get re-serialized), so the trainer would
score tokens the model never produced. A session instead templates the first request's messages
once; on every later request it checks that the messages extend what it already holds, appends
only the *new* non-assistant messages' tokens (mask 0, rendered with the model's own role markers
by its :class:`~envhub.adapters.chat_format.ChatFormat`) and then the sampled assistant tokens
verbatim (mask 1, with their logprobs).

When a client re-sends a history that differs from what was sampled (edited, compressed,
reordered, an assistant message it wrote itself, other tools), the linear record cannot be
extended honestly. The session records a *divergence* (what differed, where) and re-bases: it
closes the current segment and starts a new one from a fresh rendering of the request's
messages. Each segment is token-exact on its own; ``GET /sessions/{id}/trajectory`` returns all
segments, the divergences, and the last segment as the top-level token view.

Routes: ``POST /sessions``, ``POST /sessions/{id}/v1/chat/completions``, ``GET /sessions/{id}``,
``GET /sessions/{id}/trajectory``, ``DELETE /sessions/{id}``, ``GET /v1/models``, ``GET /info`` (the
model, the tokenizer id and chat-template hash a trajectory record needs, the chat format, the
context size; also in ``GET /sessions/{id}`` as ``server``) and a sessionless
``POST /v1/chat/completions`` (one fresh session per request; its id is in the response). Sessions
live until ``DELETE``; sessionless ones are kept only for the ``max_sessionless`` most recent
requests (least recently created dropped first), so a client that never deletes them cannot
grow the server without bound.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from envhub.errors import ContextOverflowError, EngineError
from envhub.parsing import HermesParser
from envhub.types import Message, ToolCall, ToolSpec

try:  # the serve extra; FastAPI resolves the handlers' annotations from this module's globals
    from fastapi import Body, Request
except ImportError:  # pragma: no cover - TitoServer itself works without it
    Body = Request = None  # type: ignore[assignment,misc]

DEFAULT_MAX_TOKENS = 256
#: Sessionless requests whose sessions are kept (to read back their trajectory) before the oldest go.
DEFAULT_MAX_SESSIONLESS = 64


class ChatFormatLike(Protocol):
    """What the server needs of a model family's chat format (``envhub.adapters.chat_format``)."""

    def render_prompt(self, tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str: ...

    def observation_text(self, messages: Sequence[Message], *, closed: bool) -> str: ...

    def strip_end(self, text: str) -> str: ...

    def end_token_id(self, tokenizer: Any) -> int: ...


class TitoError(Exception):
    """An error answered to the client in OpenAI's error shape."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.type = status, message, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": None}}


# ---- messages: the client's form, and how two of them compare --------------------------------------


def _content_text(content: Any) -> str:
    """OpenAI content: a string, None, or a list of parts of which only text parts are supported."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise TitoError(400, "only text content parts are supported", "unsupported_content")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise TitoError(400, f"unsupported message content of type {type(content).__name__}")


def _calls_key(calls: Any) -> str:
    out = []
    for call in calls or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args) if args.strip() else {}
        out.append([fn.get("name"), args])
    return json.dumps(out, sort_keys=True)


def _key(msg: dict[str, Any]) -> tuple[str, str, str]:
    return (str(msg.get("role")), _content_text(msg.get("content")), _calls_key(msg.get("tool_calls")))


def _to_message(msg: dict[str, Any]) -> Message:
    role = msg.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise TitoError(400, f"unsupported message role {role!r}")
    calls = None
    if msg.get("tool_calls"):
        calls = []
        for call in msg["tool_calls"]:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            args = fn.get("arguments") or {}
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    raise TitoError(400, f"tool call arguments are not JSON: {args[:100]!r}") from None
            if not isinstance(args, dict) or not fn.get("name"):
                raise TitoError(400, "a tool call needs a function name and object arguments")
            calls.append(ToolCall(name=str(fn["name"]), arguments=args, id=call.get("id")))
    return Message(role=role, content=_content_text(msg.get("content")), name=msg.get("name"),
                   tool_call_id=msg.get("tool_call_id"), tool_calls=calls)


@dataclass
class _AssistantTurn:
    """One sampled turn: where its tokens sit in the segment's response, and what the client got."""

    request: int
    start: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    weight_version: str | None
    text: str
    message: dict[str, Any]

    def matches(self, msg: dict[str, Any]) -> bool:
        """Whether a re-sent assistant message is this turn: its text verbatim, or the same tool
        calls with the content we returned (or none: many clients drop it beside tool calls)."""
        if msg.get("role") != "assistant":
            return False
        content = _content_text(msg.get("content"))
        if not msg.get("tool_calls"):
            return content in (self.text, self.message.get("content") or "") and not self.message.get("tool_calls")
        return (_calls_key(msg.get("tool_calls")) == _calls_key(self.message.get("tool_calls"))
                and content in ("", self.message.get("content") or "", self.text))


@dataclass
class Segment:
    """A linear, token-exact stretch of a conversation."""

    index: int
    started_by: str  # "first_request" or "divergence:<n>"
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    closed: bool = True
    turns: list[_AssistantTurn] = field(default_factory=list)
    #: position in ``messages`` of each sampled assistant turn
    assistant_at: dict[int, int] = field(default_factory=dict)

    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def append(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.response_ids.extend(int(t) for t in ids)
        self.response_mask.extend([mask] * len(ids))
        self.response_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def view(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "started_by": self.started_by,
            "messages": self.messages,
            "tools": self.tools,
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
            "response_logprobs": self.response_logprobs,
            "num_turns": len(self.turns),
            "turns": [
                {"request": t.request, "start": t.start, "token_ids": t.token_ids, "logprobs": t.logprobs,
                 "finish_reason": t.finish_reason, "weight_version": t.weight_version, "text": t.text}
                for t in self.turns
            ],
        }


@dataclass
class Session:
    id: str
    metadata: dict[str, Any]
    created: float = field(default_factory=time.time)
    segments: list[Segment] = field(default_factory=list)
    divergences: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    failed_requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def summary(self) -> dict[str, Any]:
        seg = self.segments[-1] if self.segments else None
        return {
            "id": self.id,
            "metadata": self.metadata,
            "created": self.created,
            "requests": self.requests,
            "failed_requests": self.failed_requests,
            "segments": len(self.segments),
            "divergences": self.divergences,
            "num_turns": sum(len(s.turns) for s in self.segments),
            "messages": seg.messages if seg else [],
            "prompt_tokens": len(seg.prompt_ids) if seg else 0,
            "response_tokens": len(seg.response_ids) if seg else 0,
        }

    def trajectory(self) -> dict[str, Any]:
        seg = self.segments[-1].view() if self.segments else {
            "prompt_ids": [], "response_ids": [], "response_mask": [], "response_logprobs": [],
            "messages": [], "num_turns": 0}
        return {
            "session_id": self.id,
            "metadata": self.metadata,
            "prompt_ids": seg["prompt_ids"],
            "response_ids": seg["response_ids"],
            "response_mask": seg["response_mask"],
            "response_logprobs": seg["response_logprobs"],
            "num_turns": seg["num_turns"],
            "messages": seg["messages"],
            "segments": [s.view() for s in self.segments],
            "divergences": self.divergences,
        }


def _snapshot(session: Session) -> tuple[int, int, tuple[int, int, bool] | None]:
    seg = session.segments[-1] if session.segments else None
    return (len(session.segments), len(session.divergences),
            (len(seg.response_ids), len(seg.messages), seg.closed) if seg else None)


def _restore(session: Session, snapshot: tuple[int, int, tuple[int, int, bool] | None]) -> None:
    n_segments, n_divergences, last = snapshot
    del session.segments[n_segments:]
    del session.divergences[n_divergences:]
    if last is not None:
        seg = session.segments[-1]
        n_response, n_messages, seg.closed = last
        for part in (seg.response_ids, seg.response_mask, seg.response_logprobs):
            del part[n_response:]
        del seg.messages[n_messages:]
        for pos in [p for p in seg.assistant_at if p >= n_messages]:
            del seg.assistant_at[pos]


def _classify(history: list[dict[str, Any]], incoming: list[dict[str, Any]],
              same: Callable[[int, dict[str, Any]], bool]) -> str:
    """Name what the client did to the history (information for people; every kind re-bases).
    ``same(j, msg)``: whether ``msg`` is history message ``j`` (sampled turns compare leniently)."""
    n = len(history)
    if len(incoming) < n and all(same(i, m) for i, m in enumerate(incoming)):
        return "truncated"
    if len(incoming) >= n:
        unused = set(range(n))
        for j in range(n):
            hit = next((i for i in sorted(unused) if same(j, incoming[i])), None)
            if hit is None:
                break
            unused.discard(hit)
        else:
            return "reordered"
    if len(incoming) < n:
        return "compressed"
    return "edited"


def _brief(msg: dict[str, Any] | None, limit: int = 120) -> dict[str, Any] | None:
    if msg is None:
        return None
    text = _content_text(msg.get("content"))
    return {"role": msg.get("role"), "content": text[:limit] + ("…" if len(text) > limit else ""),
            "tool_calls": json.loads(_calls_key(msg.get("tool_calls"))) or None}


class TitoServer:
    """The session logic, independent of HTTP (the FastAPI app in :func:`create_app` wraps it)."""

    def __init__(self, engine: Any, tokenizer: Any, chat_format: ChatFormatLike | None = None, *,
                 model_name: str | None = None, default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 default_temperature: float = 1.0, tokenizer_id: str | None = None,
                 max_sessionless: int = DEFAULT_MAX_SESSIONLESS) -> None:
        from envhub.adapters.chat_format import template_hash

        if chat_format is None:
            from envhub.adapters.chat_format import chat_format_for

            chat_format = chat_format_for(tokenizer)
        self.engine, self.tokenizer, self.chat_format = engine, tokenizer, chat_format
        #: what a trajectory record names the tokenizer by (a path or hub id that loads it)
        self.tokenizer_id = tokenizer_id or getattr(tokenizer, "name_or_path", None) or None
        self.chat_template_hash = template_hash(getattr(tokenizer, "chat_template", None))
        self.max_sessionless = max(1, int(max_sessionless))
        self._sessionless: OrderedDict[str, None] = OrderedDict()
        self.model_name = model_name or getattr(engine, "model_id", None) or getattr(engine, "name", "envhub")
        self.default_max_tokens = default_max_tokens
        self.default_temperature = default_temperature
        self.end_id = chat_format.end_token_id(tokenizer)
        self.parser = HermesParser()
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._tok_lock = threading.Lock()  # Rust tokenizers are not safe to share across threads

    def info(self) -> dict[str, Any]:
        """What a trajectory record needs to know of the server's model (``GET /info``)."""
        return {
            "model": self.model_name,
            "tokenizer": str(self.tokenizer_id) if self.tokenizer_id else None,
            "chat_template_hash": self.chat_template_hash,
            "chat_format": getattr(self.chat_format, "name", type(self.chat_format).__name__),
            "max_context": int(getattr(self.engine, "max_context", 0) or 0) or None,
            "sessions": len(self._sessions),
        }

    # ---- sessions ---------------------------------------------------------------------------------

    def create_session(self, session_id: str | None = None, metadata: dict[str, Any] | None = None) -> Session:
        sid = session_id or uuid.uuid4().hex
        with self._lock:
            if sid in self._sessions:
                raise TitoError(409, f"session {sid!r} already exists", "session_exists")
            session = self._sessions[sid] = Session(id=sid, metadata=dict(metadata or {}))
        return session

    def get(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise TitoError(404, f"no session {session_id!r}", "session_not_found",
                            "not_found_error") from None

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._sessionless.pop(session_id, None)
            if self._sessions.pop(session_id, None) is None:
                raise TitoError(404, f"no session {session_id!r}", "session_not_found", "not_found_error")

    def chat_sessionless(self, body: dict[str, Any]) -> dict[str, Any]:
        """One request in a fresh session. A failed request's session is dropped at once; a
        completed one is kept among the ``max_sessionless`` most recent (its trajectory stays
        readable by the id in the response), older ones are dropped."""
        session = self.create_session(metadata={"sessionless": True})
        try:
            result = self.chat(session.id, body)
        except BaseException:
            with self._lock:
                self._sessions.pop(session.id, None)
            raise
        with self._lock:
            self._sessionless[session.id] = None
            while len(self._sessionless) > self.max_sessionless:
                old, _ = self._sessionless.popitem(last=False)
                self._sessions.pop(old, None)
        return result

    # ---- tokens -------------------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        with self._tok_lock:
            return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: Sequence[int]) -> str:
        with self._tok_lock:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def _new_segment(self, session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     started_by: str) -> Segment:
        specs = [ToolSpec(name=t["function"]["name"], description=t["function"].get("description", ""),
                          parameters=t["function"].get("parameters") or {"type": "object", "properties": {}})
                 for t in tools or []]
        with self._tok_lock:
            text = self.chat_format.render_prompt(self.tokenizer, [_to_message(m) for m in messages], specs)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        seg = Segment(index=len(session.segments), started_by=started_by, messages=list(messages),
                      tools=tools, prompt_ids=ids)
        session.segments.append(seg)
        return seg

    def _extend(self, session: Session, request: int, messages: list[dict[str, Any]],
                tools: list[dict[str, Any]] | None) -> Segment:
        """Append the request's new messages to the current segment, or re-base on a divergence."""
        if not session.segments:
            return self._new_segment(session, messages, tools, "first_request")
        seg = session.segments[-1]
        history = seg.messages
        diverged_at: int | None = None
        kind = ""
        if (tools or None) != (seg.tools or None):
            kind, diverged_at = "tools_changed", 0
        else:
            def same(j: int, msg: dict[str, Any]) -> bool:
                turn_j = seg.assistant_at.get(j)
                return seg.turns[turn_j].matches(msg) if turn_j is not None else _key(msg) == _key(history[j])

            diverged_at = next((i for i in range(len(history)) if i >= len(messages) or not same(i, messages[i])),
                               None)
            if diverged_at is not None:
                kind = _classify(history, messages, same)
            else:
                new = messages[len(history):]
                bad = next((j for j, m in enumerate(new) if m.get("role") == "assistant"), None)
                if bad is not None:
                    kind, diverged_at = "assistant_not_sampled", len(history) + bad
        if diverged_at is not None:
            session.divergences.append({
                "request": request,
                "kind": kind,
                "at_message": diverged_at,
                "expected": _brief(history[diverged_at]) if diverged_at < len(history) else None,
                "received": _brief(messages[diverged_at]) if diverged_at < len(messages) else None,
                "history_messages": len(history),
                "request_messages": len(messages),
                "closed_segment": seg.index,
                "new_segment": len(session.segments),
            })
            return self._new_segment(session, messages, tools, f"divergence:{len(session.divergences) - 1}")
        new = messages[len(history):]
        if new:
            text = self.chat_format.observation_text([_to_message(m) for m in new], closed=seg.closed)
            seg.append(self._encode(text), 0)
            seg.messages.extend(new)
            seg.closed = True
        elif seg.turns:
            # The client asks for another assistant turn right after the last one: close the
            # last turn if needed and open a new one, as the template would.
            text = self.chat_format.observation_text([], closed=seg.closed)
            seg.append(self._encode(text), 0)
            seg.closed = True
        return seg

    # ---- the chat completion --------------------------------------------------------------------------

    def chat(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        session = self.get(session_id)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise TitoError(400, "`messages` must be a non-empty list")
        if body.get("n", 1) not in (1, None):
            raise TitoError(400, "a session samples one choice per request (n=1)")
        for m in messages:
            if not isinstance(m, dict):
                raise TitoError(400, "every message must be an object")
            _to_message(m)  # validate roles and content early
        tools = body.get("tools") or None
        stop = body.get("stop")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        with session.lock:
            request = session.requests
            session.requests += 1
            snapshot = _snapshot(session)
            try:
                return self._chat_locked(session, request, body, messages, tools, stops)
            except BaseException:
                # a failed request leaves no trace in the record: a retry must find it as it was
                _restore(session, snapshot)
                session.failed_requests += 1
                raise

    def _chat_locked(self, session: Session, request: int, body: dict[str, Any], messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None, stops: tuple[str, ...]) -> dict[str, Any]:
        seg = self._extend(session, request, [dict(m) for m in messages], tools)
        ids = seg.ids()
        max_context = int(getattr(self.engine, "max_context", 0) or 0)
        room = max_context - len(ids)
        if max_context and room <= 0:
            raise TitoError(400, f"the conversation ({len(ids)} tokens) fills the model's context "
                            f"({max_context} tokens)", "context_length_exceeded")
        max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or self.default_max_tokens)
        if max_context:
            max_new = min(max_new, room)
        try:
            params = self._sampling(body, max_new, stops)
        except (TypeError, ValueError) as exc:
            raise TitoError(400, f"invalid sampling parameters: {exc}") from None
        try:
            result = self.engine.generate(ids, params)
        except ContextOverflowError as exc:
            raise TitoError(400, str(exc), "context_length_exceeded") from None
        except EngineError as exc:
            raise TitoError(502, f"engine error: {exc}", "engine_error", "server_error") from None
        sampled = [int(t) for t in result.token_ids]
        logprobs = [float(x) for x in result.logprobs]
        if len(sampled) != len(logprobs):
            raise TitoError(502, "the engine returned tokens and logprobs of different lengths", "engine_error",
                            "server_error")
        text = self._decode(sampled)
        start = len(seg.response_ids)
        seg.append(sampled, 1, logprobs)
        seg.closed = bool(sampled) and sampled[-1] == self.end_id
        content = self.chat_format.strip_end(text)
        message, finish = self._assistant_message(content, result.finish_reason, request)
        seg.assistant_at[len(seg.messages)] = len(seg.turns)
        seg.turns.append(_AssistantTurn(request=request, start=start, token_ids=sampled, logprobs=logprobs,
                                        finish_reason=result.finish_reason, weight_version=result.weight_version,
                                        text=content, message=message))
        seg.messages.append({"role": "assistant", "content": content})
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if body.get("logprobs"):
            pieces = [self._decode([t]) for t in sampled]
            choice["logprobs"] = {"content": [
                {"token": piece, "logprob": lp, "bytes": list(piece.encode()), "top_logprobs": []}
                for piece, lp in zip(pieces, logprobs, strict=True)]}
        return {
            "id": f"chatcmpl-{session.id}-{request}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model_name,
            "choices": [choice],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(sampled),
                      "total_tokens": len(ids) + len(sampled)},
            # envhub's extension (clients ignore unknown fields): the exact sample, so an envhub
            # agent records token ids and the verbatim text instead of re-serialized tool calls.
            "envhub": {"session_id": session.id, "segment": seg.index, "request": request,
                       "weight_version": result.weight_version, "divergences": len(session.divergences),
                       "text": text, "token_ids": sampled, "logprobs": logprobs},
        }

    def _sampling(self, body: dict[str, Any], max_new: int, stops: tuple[str, ...]) -> Any:
        from envhub.adapters.engine import SamplingParams

        temperature = body.get("temperature")
        top_p = body.get("top_p")
        return SamplingParams(
            max_new_tokens=max_new,
            temperature=self.default_temperature if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            top_k=int(body.get("top_k") or 0),
            stop=stops,
            stop_token_ids=(self.end_id,),
            seed=body.get("seed"),
        )

    def _assistant_message(self, content: str, finish_reason: str, request: int) -> tuple[dict[str, Any], str]:
        """The OpenAI message for a sampled text: Hermes ``<tool_call>`` blocks become ``tool_calls``
        (the text stays verbatim in the token record; this is only what the client is shown)."""
        finish = {"stop": "stop", "length": "length"}.get(finish_reason, "stop")
        if "<tool_call>" not in content:
            return {"role": "assistant", "content": content}, finish
        parsed = self.parser.parse(content)
        if parsed.error or not parsed.calls:
            return {"role": "assistant", "content": content}, finish
        before = content.split("<tool_call>", 1)[0].strip()
        calls = [{"id": f"call_{request}_{i}", "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                 for i, c in enumerate(parsed.calls)]
        return {"role": "assistant", "content": before or None, "tool_calls": calls}, "tool_calls"


# ---- HTTP -------------------------------------------------------------------------------------------------


def create_app(server: TitoServer) -> Any:
    """The FastAPI app over a :class:`TitoServer`. Handlers are sync: FastAPI runs them in its
    thread pool, so requests of different sessions reach the (batching) engine concurrently."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title="envhub TITO session server")
    app.state.tito = server

    @app.exception_handler(TitoError)
    def _tito_error(request: Request, exc: TitoError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content=exc.body())

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": server.model_name}

    @app.get("/info")
    def info() -> dict[str, Any]:
        return server.info()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "owned_by": "envhub"}]}

    @app.post("/sessions")
    def create_session(request: Request, body: dict[str, Any] | None = Body(default=None)) -> dict[str, Any]:
        body = body or {}
        session = server.create_session(body.get("session_id"), body.get("metadata"))
        return {"id": session.id, "base_url": f"{str(request.base_url).rstrip('/')}/sessions/{session.id}"}

    @app.get("/sessions/{session_id}")
    def get_session(session_id: str) -> dict[str, Any]:
        return server.get(session_id).summary() | {"server": server.info()}

    @app.get("/sessions/{session_id}/trajectory")
    def get_trajectory(session_id: str) -> dict[str, Any]:
        session = server.get(session_id)
        with session.lock:
            return session.trajectory()

    @app.delete("/sessions/{session_id}")
    def delete_session(session_id: str) -> dict[str, Any]:
        server.delete(session_id)
        return {"id": session_id, "deleted": True}

    @app.post("/sessions/{session_id}/v1/chat/completions")
    def session_chat(session_id: str, body: dict[str, Any] = Body(...)) -> Any:
        return _respond(server.chat(session_id, body), body)

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any] = Body(...)) -> Any:
        return _respond(server.chat_sessionless(body), body)

    return app


def _respond(result: dict[str, Any], body: dict[str, Any]) -> Any:
    """JSON, or, when the client asked to stream, the same completion as server-sent events
    (one content chunk; generation is not incremental here)."""
    if not body.get("stream"):
        return result
    from fastapi.responses import StreamingResponse

    choice = result["choices"][0]
    base = {k: result[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": choice["message"].get("content")}
    if choice["message"].get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(choice["message"]["tool_calls"])]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
         "usage": result["usage"]},
    ]

    def events() -> Any:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
