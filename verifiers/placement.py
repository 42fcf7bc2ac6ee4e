"""Putting a submission and the grader's own files into a grading sandbox.

A grading sandbox has the agent's disk size plus room for what the grader adds (an env sizes it:
``Env.grading_limits``), so every submission the agent's sandbox could hold fits beside the
grader's files. Some cannot: the snapshot re-encodes what is not UTF-8 (one byte can become
three), so a submission can grow past what it took in the agent's sandbox. When the files do not
fit, whose doing that is is decided by size alone -- nothing submitted runs while files are
written: if the submission's footprint leaves no room for the grader's files, the submission is
too large to grade (:class:`SubmissionTooLarge`, a policy outcome); otherwise the grading sandbox
was sized wrong, and the ``OSError`` is raised as it came (the grader's failure).

Files go in batches of at most :data:`BATCH_BYTES`, so one huge submission never becomes one
huge request for the sandbox's executor to decode.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from envhub.sandboxes.base import Sandbox
from envhub.types import Outcome
from envhub.verifiers.layered import GateFailure

#: tmpfs allocates whole pages.
PAGE = 4096
MIB = 1024 * 1024
#: At most this much file content in one ``write_files`` request.
BATCH_BYTES = 8 * MIB
#: Room a sandbox's file system keeps beyond its files' pages (metadata, rounding), in the judgement
#: of whose failure a full disk is.
SLACK_BYTES = 256 * 1024

Files = Mapping[str, "str | bytes"]


class SubmissionTooLarge(GateFailure):
    """The submission leaves no room in the grading sandbox for the grader's files: it cannot be
    graded, through its own size (``format_error``, like a tree too large to read)."""

    def __init__(self, reason: str) -> None:
        super().__init__(Outcome.FORMAT_ERROR, reason)


def _data(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else bytes(content)


def footprint(files: Files) -> int:
    """Bytes ``files`` take on a tmpfs: each file's content in whole pages."""
    return sum(-(-len(_data(c)) // PAGE) * PAGE for c in files.values())


def _batches(files: Files) -> Iterator[dict[str, str | bytes]]:
    batch: dict[str, str | bytes] = {}
    size = 0
    for path, content in files.items():
        n = len(_data(content))
        if batch and size + n > BATCH_BYTES:
            yield batch
            batch, size = {}, 0
        batch[path] = content
        size += n
    if batch:
        yield batch


def place_files(sandbox: Sandbox, submission: Files, grader: Files) -> None:
    """Write ``submission``, then the ``grader``'s own files, into a fresh ``sandbox``.

    :class:`SubmissionTooLarge` when an ``OSError`` (a full disk) stopped it and the submission's
    size is what left no room (see the module docstring); any other ``OSError`` is raised as is.
    """
    try:
        for batch in _batches({**submission, **grader}):  # in this order; usually one request
            sandbox.write_files(batch)
    except OSError as exc:
        capacity = sandbox.limits.disk_mb * MIB
        used, needed = footprint(submission), footprint(grader)
        if used + needed + SLACK_BYTES <= capacity:
            raise
        raise SubmissionTooLarge(
            f"the submission is too large to grade: its {len(submission)} files take {used / MIB:.1f} MiB, "
            f"which leaves no room for the hidden tests ({needed / MIB:.1f} MiB) in the grading sandbox's "
            f"{capacity // MIB} MiB ({str(exc.strerror or exc).rstrip(': ')})") from exc
