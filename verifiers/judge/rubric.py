"""A rubric and the judge prompt built from it.

The prompt is ours except for quoted blocks: the submission (and any evidence the env shows the
judge, e.g. the passages an agent opened) reaches the judge only inside
:func:`~envhub.verifiers.judge.quoting.quote` blocks, HTML-escaped and length-capped, so nothing
inside can close its block or pose as our instructions. The rubric's text never contains a
character the agent wrote.

The answer form is closed: the judge's whole reply is ``SCORE: N`` with ``0 <= N <= scale``
(:func:`~envhub.verifiers.judge.quoting.parse_score`); a token engine is given ``SCORE: `` as the
start of the reply (:data:`REPLY_PREFIX`) and samples one token. Anything else is unparseable,
never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from envhub.judges import text_sha256

from .quoting import PROMPT_NOTE, Quoted, quote

ANSWER_PREFIX = "SCORE:"
#: How a token engine starts the judge's reply: the model then adds one token, the digit.
REPLY_PREFIX = ANSWER_PREFIX + " "

SYSTEM = (
    "You are a strict grader: grade only by the rubric. "
    + PROMPT_NOTE
    + " Evidence appears between <evidence> and </evidence>, quoted the same way."
)

TEMPLATE = """Question:
{question}

{evidence}Submission to grade:
{submission}

Rubric: {criterion}
{levels}
Reply with exactly one line, SCORE: N, where N is an integer from 0 to {scale}."""


@dataclass(frozen=True)
class Rubric:
    """What the judge scores: ``criterion`` (one sentence), ``levels`` (what each score from 0 to
    ``scale`` means; ``len(levels) == scale + 1``), a ``name`` for reports."""

    name: str
    criterion: str
    levels: tuple[str, ...]
    max_submission_chars: int = 2000
    max_evidence_chars: int = 3000
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not 2 <= len(self.levels) <= 10:
            raise ValueError(
                f"rubric {self.name!r}: 2 to 10 levels (scores 0 to at most 9), got {len(self.levels)}"
            )

    @property
    def scale(self) -> int:
        return len(self.levels) - 1

    def sha256(self) -> str:
        """The rubric's hash for the pin: criterion, levels and caps."""
        return text_sha256(
            "\n".join(
                [self.criterion, *self.levels, str(self.max_submission_chars), str(self.max_evidence_chars)]
            )
        )


@dataclass(frozen=True)
class JudgePrompt:
    """A rendered prompt: ``system`` and ``user`` messages, and the quoted submission (its cut)."""

    system: str
    user: str
    submission: Quoted

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


def prompt_sha256() -> str:
    """The hash of the prompt template and answer form, for the pin."""
    return text_sha256("\n".join([SYSTEM, TEMPLATE, REPLY_PREFIX]))


def render(rubric: Rubric, question: str, submission: str, evidence: Sequence[str] = ()) -> JudgePrompt:
    """The judge prompt for one submission. ``question`` is the env's task prompt (trusted: the env
    wrote it); ``submission`` and ``evidence`` are quoted (see the module docstring)."""
    quoted = quote(submission, max_chars=rubric.max_submission_chars)
    blocks = []
    per_block = max(200, rubric.max_evidence_chars // max(1, len(evidence)))
    for text in evidence:
        blocks.append(quote(text, max_chars=per_block, tag="evidence").block)
    evidence_text = ("Evidence:\n" + "\n".join(blocks) + "\n\n") if blocks else ""
    levels = "\n".join(f"{i}: {meaning}" for i, meaning in enumerate(rubric.levels))
    user = TEMPLATE.format(
        question=question,
        evidence=evidence_text,
        submission=quoted.block,
        criterion=rubric.criterion,
        levels=levels,
        scale=rubric.scale,
    )
    return JudgePrompt(system=SYSTEM, user=user, submission=quoted)


__all__ = [
    "ANSWER_PREFIX",
    "REPLY_PREFIX",
    "SYSTEM",
    "TEMPLATE",
    "JudgePrompt",
    "Rubric",
    "prompt_sha256",
    "render",
]
