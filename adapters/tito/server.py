"""TITO's session logic, independent of HTTP: :class:`TitoServer` (see :mod:`envhub.adapters.tito`)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

from envhub.adapters.engines.base import SamplingParams
from envhub.adapters.tito.messages import TitoError, brief, classify_divergence, message_key, to_message
from envhub.adapters.tito.session import AssistantTurn, Segment, Session, restore, snapshot
from envhub.adapters.token_record import TokenRecord
from envhub.errors import ContextOverflowError, EngineError
from envhub.types import Message, ToolCall, ToolSpec

DEFAULT_MAX_TOKENS = 256
#: Sessionless requests whose sessions are kept (to read back their trajectory) before the oldest go.
DEFAULT_MAX_SESSIONLESS = 64


class ChatFormatLike(Protocol):
    """What the server needs of a model family's chat format (``envhub.adapters.chat_format``)."""

    def render_prompt(self, tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str: ...

    def observation_text(self, messages: Sequence[Message], *, closed: bool) -> str: ...

    def strip_end(self, text: str) -> str: ...

    def assistant_message(self, text: str) -> tuple[str, str, list[ToolCall]]: ...

    def end_token_id(self, tokenizer: Any) -> int: ...

    def stop_token_ids(self, tokenizer: Any) -> tuple[int, ...]: ...


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
        self.stop_ids = chat_format.stop_token_ids(tokenizer)
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
            text = self.chat_format.render_prompt(self.tokenizer, [to_message(m) for m in messages], specs)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        seg = Segment(index=len(session.segments), started_by=started_by, messages=list(messages),
                      tools=tools, record=TokenRecord(ids))
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
                return seg.turns[turn_j].matches(msg) if turn_j is not None else message_key(msg) == message_key(history[j])

            diverged_at = next((i for i in range(len(history)) if i >= len(messages) or not same(i, messages[i])),
                               None)
            if diverged_at is not None:
                kind = classify_divergence(history, messages, same)
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
                "expected": brief(history[diverged_at]) if diverged_at < len(history) else None,
                "received": brief(messages[diverged_at]) if diverged_at < len(messages) else None,
                "history_messages": len(history),
                "request_messages": len(messages),
                "closed_segment": seg.index,
                "new_segment": len(session.segments),
            })
            return self._new_segment(session, messages, tools, f"divergence:{len(session.divergences) - 1}")
        new = messages[len(history):]
        if new:
            text = self.chat_format.observation_text([to_message(m) for m in new], closed=seg.closed)
            seg.record.append_observation(self._encode(text))
            seg.messages.extend(new)
            seg.closed = True
        elif seg.turns:
            # The client asks for another assistant turn right after the last one: close the
            # last turn if needed and open a new one, as the template would.
            text = self.chat_format.observation_text([], closed=seg.closed)
            seg.record.append_observation(self._encode(text))
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
            to_message(m)  # validate roles and content early
        tools = body.get("tools") or None
        stop = body.get("stop")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        with session.lock:
            request = session.requests
            session.requests += 1
            saved = snapshot(session)
            try:
                return self._chat_locked(session, request, body, messages, tools, stops)
            except BaseException:
                # a failed request leaves no trace in the record: a retry must find it as it was
                restore(session, saved)
                session.failed_requests += 1
                raise

    def _chat_locked(self, session: Session, request: int, body: dict[str, Any], messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None, stops: tuple[str, ...]) -> dict[str, Any]:
        seg = self._extend(session, request, [dict(m) for m in messages], tools)
        # what this request appended after the segment's last sampled turn: the ids of the reply to it
        last = seg.turns[-1] if seg.turns else None
        reply_ids = seg.record.response_ids[last.start + len(last.token_ids):] if last is not None else []
        ids = seg.record.ids()
        max_context = int(getattr(self.engine, "max_context", 0) or 0)
        room = seg.record.room(max_context)
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
        try:
            TokenRecord.check_result(result)
        except EngineError as exc:
            raise TitoError(502, f"engine error: {exc}", "engine_error", "server_error") from None
        sampled = [int(t) for t in result.token_ids]
        logprobs = [float(x) for x in result.logprobs]
        text = self._decode(sampled)
        start = len(seg.record.response_ids)
        seg.record.append_sampled(sampled, logprobs)
        seg.closed = bool(sampled) and sampled[-1] in self.stop_ids
        content = self.chat_format.strip_end(text)
        message, finish = self._assistant_message(content, result.finish_reason, request)
        seg.assistant_at[len(seg.messages)] = len(seg.turns)
        seg.turns.append(AssistantTurn(request=request, start=start, token_ids=sampled, logprobs=logprobs,
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
            # agent records token ids and the verbatim text instead of re-serialized tool calls,
            # and the ids appended for the request's new messages (the reply to the previous turn).
            "envhub": {"session_id": session.id, "segment": seg.index, "request": request,
                       "weight_version": result.weight_version, "divergences": len(session.divergences),
                       "text": text, "token_ids": sampled, "logprobs": logprobs,
                       "observation_ids": reply_ids},
        }

    def _sampling(self, body: dict[str, Any], max_new: int, stops: tuple[str, ...]) -> SamplingParams:
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        return SamplingParams(
            max_new_tokens=max_new,
            temperature=self.default_temperature if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            top_k=int(body.get("top_k") or 0),
            stop=stops,
            stop_token_ids=self.stop_ids,
            seed=body.get("seed"),
        )

    def _assistant_message(self, content: str, finish_reason: str, request: int) -> tuple[dict[str, Any], str]:
        """The OpenAI message for a sampled text: tool calls in the family's syntax become ``tool_calls``
        (with the id the model wrote, as Mistral's may), reasoning (Qwen3's ``<think>``) becomes
        ``reasoning_content`` (the text stays verbatim in the token record; this is only what the
        client is shown)."""
        finish = {"stop": "stop", "length": "length"}.get(finish_reason, "stop")
        reasoning, shown, calls = self.chat_format.assistant_message(content)
        message: dict[str, Any] = {"role": "assistant", "content": shown}
        if reasoning:
            message["reasoning_content"] = reasoning
        if not calls:
            return message, finish
        message["content"] = shown or None
        message["tool_calls"] = [{"id": c.id or f"call_{request}_{i}", "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                                 for i, c in enumerate(calls)]
        return message, "tool_calls"
