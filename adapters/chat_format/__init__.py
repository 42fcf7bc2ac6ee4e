"""Everything specific to a model family's chat format, in one place.

A model policy renders the first prompt with the chat template once; after that it only ever
*appends*: the tokens the model sampled, and, for each env reply, the tokens of that reply written
with the template's own role markers. A :class:`ChatFormat` owns those markers, the stop tokens and
the family's tool-call syntax, so that the rendering here and the Jinja template stored with a model
agree byte for byte: :func:`chat_format_for` checks that they do on a tool round before a policy is
built, and refuses a template no family reproduces (``tests/adapters/test_chat_families.py`` checks
each family against its published template).

Families (:data:`FORMATS`, one module each): ChatML (SmolLM2, Qwen2.5, Hermes), Qwen3, Llama 3.1-3.3,
Mistral v3-Tekken. A new family is a new subclass registered in :data:`FORMATS`, nothing else changes.
"""

from envhub.adapters.chat_format.base import ChatFormat, Tokenizer, message_dicts, template_hash
from envhub.adapters.chat_format.chatml import CHATML_TOOL_TEMPLATE, ChatMLFormat
from envhub.adapters.chat_format.llama3 import Llama3Format
from envhub.adapters.chat_format.mistral import MistralFormat
from envhub.adapters.chat_format.qwen3 import Qwen3Format, Qwen3NoThinkFormat
from envhub.adapters.chat_format.registry import FORMATS, UnsupportedChatFormat, chat_format_for, format_named
from envhub.adapters.chat_format.segments import SegmentEncoder

__all__ = ["CHATML_TOOL_TEMPLATE", "FORMATS", "ChatFormat", "ChatMLFormat", "Llama3Format", "MistralFormat",
           "Qwen3Format", "Qwen3NoThinkFormat", "SegmentEncoder", "Tokenizer", "UnsupportedChatFormat",
           "chat_format_for", "format_named", "message_dicts", "template_hash"]
