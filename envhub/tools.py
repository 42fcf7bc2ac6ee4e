"""Tools: typed Python callables that the model can call by name.

A tool is declared with :func:`tool` on an env method; its signature becomes a strict pydantic
model, which gives both the JSON schema the model sees and the validation of what it sends.
Validation errors become explanations for the model, never exceptions out of ``step``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from envhub.types import ToolSpec

TOOL_ATTR = "__envhub_tool__"


class ToolArgumentError(ValueError):
    """The model's arguments do not fit the tool's signature; the message is for the model."""


@dataclass(frozen=True)
class ToolDef:
    """A tool bound to nothing yet: its spec, its argument model and the function to call."""

    spec: ToolSpec
    args_model: type[BaseModel]
    fn: Callable[..., Any]
    terminal: bool

    @property
    def name(self) -> str:
        return self.spec.name

    def validate(self, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise ToolArgumentError(
                f"arguments of `{self.name}` must be a JSON object, got {type(arguments).__name__}"
            )
        try:
            parsed = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolArgumentError(f"invalid arguments for `{self.name}`: {problems}") from None
        return parsed.model_dump()


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, terminal: bool = False
) -> Any:
    """Mark an env method as a tool. ``terminal`` tools end the episode and go to the verifier.

    The first line of the docstring is the description; parameters need type hints.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, TOOL_ATTR, build_tool(f, name=name or f.__name__, terminal=terminal))
        return f

    return mark(fn) if fn is not None else mark


def build_tool(fn: Callable[..., Any], *, name: str, terminal: bool) -> ToolDef:
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == "self":
            continue
        if pname not in hints:
            raise TypeError(f"tool {name}: parameter {pname!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints[pname], default)
    model = create_model(  # type: ignore[call-overload]
        f"{name}_args", __config__=ConfigDict(extra="forbid", strict=True), **fields
    )
    description = inspect.cleandoc(fn.__doc__ or name).strip()
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    spec = ToolSpec(name=name, description=description, parameters=schema)
    return ToolDef(spec=spec, args_model=model, fn=fn, terminal=terminal)


def collect_tools(cls: type) -> dict[str, ToolDef]:
    """Every tool declared on ``cls`` and its bases, in declaration order, by name."""
    found: dict[str, ToolDef] = {}
    for klass in reversed(cls.__mro__):
        for attr in vars(klass).values():
            tdef = getattr(attr, TOOL_ATTR, None)
            if isinstance(tdef, ToolDef):
                found[tdef.name] = tdef
    return found
