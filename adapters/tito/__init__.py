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

The package: :mod:`~envhub.adapters.tito.messages` (the client's messages and how they compare),
:mod:`~envhub.adapters.tito.session` (segments and sessions: the record half),
:mod:`~envhub.adapters.tito.server` (:class:`TitoServer`, the session logic),
:mod:`~envhub.adapters.tito.http` (the FastAPI app), :mod:`~envhub.adapters.tito.cli` (``envhub tito``).
"""

from envhub.adapters.tito.http import create_app
from envhub.adapters.tito.messages import TitoError
from envhub.adapters.tito.server import (
           DEFAULT_MAX_SESSIONLESS,
           DEFAULT_MAX_TOKENS,
           ChatFormatLike,
           TitoServer,
)
from envhub.adapters.tito.session import Segment, Session

__all__ = ["DEFAULT_MAX_SESSIONLESS", "DEFAULT_MAX_TOKENS", "ChatFormatLike", "Segment", "Session", "TitoError",
           "TitoServer", "create_app"]
