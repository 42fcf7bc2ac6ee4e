"""TITO's record half: a session's segments (each one :class:`~envhub.adapters.token_record.TokenRecord`
and the turns sampled into it), its divergences, and the snapshot that undoes a failed request."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from envhub.adapters.tito.messages import calls_key, content_text
from envhub.adapters.token_record import TokenRecord


@dataclass
class AssistantTurn:
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
        content = content_text(msg.get("content"))
        if not msg.get("tool_calls"):
            return content in (self.text, self.message.get("content") or "") and not self.message.get("tool_calls")
        return (calls_key(msg.get("tool_calls")) == calls_key(self.message.get("tool_calls"))
                and content in ("", self.message.get("content") or "", self.text))



@dataclass
class Segment:
    """A linear, token-exact stretch of a conversation."""

    index: int
    started_by: str  # "first_request" or "divergence:<n>"
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    record: TokenRecord
    closed: bool = True
    turns: list[AssistantTurn] = field(default_factory=list)
    #: position in ``messages`` of each sampled assistant turn
    assistant_at: dict[int, int] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        rec = self.record
        return {
            "index": self.index,
            "started_by": self.started_by,
            "messages": self.messages,
            "tools": self.tools,
            "prompt_ids": rec.prompt_ids,
            "response_ids": rec.response_ids,
            "response_mask": rec.response_mask,
            "response_logprobs": rec.response_logprobs,
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
            "prompt_tokens": len(seg.record.prompt_ids) if seg else 0,
            "response_tokens": len(seg.record.response_ids) if seg else 0,
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



Snapshot = tuple[int, int, tuple[int, int, bool] | None]


def snapshot(session: Session) -> Snapshot:
    """What :func:`restore` needs to undo everything a request did to ``session``."""
    seg = session.segments[-1] if session.segments else None
    return (len(session.segments), len(session.divergences),
            (len(seg.record.response_ids), len(seg.messages), seg.closed) if seg else None)


def restore(session: Session, saved: Snapshot) -> None:
    n_segments, n_divergences, last = saved
    del session.segments[n_segments:]
    del session.divergences[n_divergences:]
    if last is not None:
        seg = session.segments[-1]
        n_response, n_messages, seg.closed = last
        seg.record.truncate(n_response)
        del seg.messages[n_messages:]
        for pos in [p for p in seg.assistant_at if p >= n_messages]:
            del seg.assistant_at[pos]
