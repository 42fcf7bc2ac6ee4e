"""Qwen3: ChatML with ``<tool_call>`` tool calls, ``<tool_response>`` results in user turns, and
``<think>...</think>`` reasoning.

Everything sampled is kept and trained, reasoning included. Qwen3's template rewrites history: it
drops the reasoning of every assistant turn before the last real user message (one that is not
all ``<tool_response>`` blocks), and, after that message, the empty ``<think>\\n\\n</think>\\n\\n``
of a turn that is not the last. envhub never re-templates, so the record keeps those tokens where
they were sampled and the model's later turns are conditioned on them, as when they were sampled;
a conversation re-templated by the Jinja template would differ exactly there (``envhub audit``
counts it as drift). TITO shows a turn's reasoning apart (``reasoning_content``) and matches a
re-sent turn with or without it to the sampled tokens.
"""

from __future__ import annotations

from envhub.adapters.chat_format.chatml import ChatMLFormat


class Qwen3Format(ChatMLFormat):
    """Qwen3's template, thinking on (its default: the model opens ``<think>`` itself)."""

    name = "qwen3"
    models = "Qwen3"
    template = ""
    special_tokens = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")

    def split_reasoning(self, text: str) -> tuple[str, str]:
        """As the template splits an assistant message: the reasoning inside the first ``</think>``,
        the content after the last; a reply cut off inside ``<think>`` is all reasoning."""
        if "</think>" in text:
            reasoning = text.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            return reasoning, text.split("</think>")[-1].lstrip("\n")
        if text.lstrip().startswith("<think>"):
            return text.lstrip().removeprefix("<think>").lstrip("\n"), ""
        return "", text


class Qwen3NoThinkFormat(Qwen3Format):
    """Qwen3 with ``enable_thinking=False``: every generation prompt carries an empty think block.
    Chosen by name only (``chat_format=qwen3_nothink``)."""

    name = "qwen3_nothink"
    models = "Qwen3, thinking off"
    template_kwargs = {"enable_thinking": False}
    generation_prompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    history_drops = "<think>\n\n</think>\n\n"
    detected = False
