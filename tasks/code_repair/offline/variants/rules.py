"""What a rewrite rule is, and the table of rules the builder applies.

A rule is a small function from a project's sources to candidate variants: each a set of changed
files and the site it changed. It is general -- it reads the code's shape (a raise, a return of a
list literal, a for-append loop), never a project's name -- and it may propose variants that are
not correct; the builder keeps only those the project's real pytest suite passes
(:mod:`.build`).

*Observable* rules change a value some test can see, in a way the tests accept (a subclass of
the raised exception, a tuple where a list was returned). *Form* rules only restructure code
(a comprehension, an early return, an extracted helper): alone they change no observed value, so
the builder applies them on top of an accepted observable variant of the same project, and the
stacked variant is what counts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

from envhub import safe_ast

from .source import Module


@dataclass(frozen=True)
class Candidate:
    """A proposed variant: the changed files (full new text) and where it changed them."""

    files: dict[str, str]
    where: str


@dataclass
class Sources:
    """A project's sources (gold, or gold with a variant applied) and its tests, as rules read them."""

    files: dict[str, str]
    tests: dict[str, str] = field(default_factory=dict)

    def modules(self) -> Iterator[Module]:
        """Each Python source file, freshly parsed (rules change copies of its nodes)."""
        for path, text in sorted(self.files.items()):
            if path.endswith(".py"):
                yield Module(path, text)

    @cached_property
    def match_patterns(self) -> list[str]:
        """The literal ``match=`` patterns of the tests' ``pytest.raises`` calls."""
        found = []
        for text in self.tests.values():
            for node in ast.walk(safe_ast.parse(text)):
                if isinstance(node, ast.Call):
                    found += [kw.value.value for kw in node.keywords if kw.arg == "match"
                              and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)]
        return found

    @cached_property
    def has_match(self) -> bool:
        return any(re.search(r"\bmatch\s*=", text) for text in self.tests.values())


Generate = Callable[[Sources], Iterator[Candidate]]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    observable: bool
    generate: Generate


def rules() -> list[Rule]:
    """Every rule, observable ones first (form rules stack on their variants), in a fixed order."""
    from . import containers, errors, helpers, objects, refactors, values

    return [*errors.RULES, *values.RULES, *containers.RULES, *objects.RULES, *refactors.RULES, *helpers.RULES]


def rule_named(name: str) -> Rule:
    for rule in rules():
        if rule.name == name:
            return rule
    raise KeyError(name)
