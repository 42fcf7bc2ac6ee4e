"""AST mutation operators that plant realistic bugs in small Python projects.

Every operator finds *sites* inside one function (a comparison, a call, a statement ...) in a
deterministic order, so a mutation is named by ``(file, function qualname, operator, site index)``
and can be re-applied later from that name alone.  Applying a mutation changes the parsed tree in
place and also produces a *text edit* of the original source that touches only the mutated
expression or statement lines.  Why not ``ast.unparse`` the whole module?  Unparsing drops
comments and normalises quotes, so the one reformatted function would point the agent straight at
the bug and the gold patch would be noisy.  The text edit is accepted only if re-parsing the edited
source gives exactly the mutated tree; otherwise the site is rejected (``MutationError``), so an
edit can never silently mean something other than the recorded mutation.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envhub import safe_ast

from .operators import OPERATORS
from .sites import FuncNode, MutationError, SiteRef, Source, iter_functions


@dataclass(frozen=True)
class MutationResult:
    """The mutated sources (only changed files) and one description per applied site."""

    files: dict[str, str]
    descriptions: tuple[str, ...]


def enumerate_sites(source: str, file: str, operators: Sequence[str] | None = None) -> list[SiteRef]:
    """Every candidate site of every operator in every function, in a fixed order."""
    tree = safe_ast.parse(source)
    names = list(operators or OPERATORS)
    return [
        SiteRef(file, qualname, name, i)
        for qualname, func in iter_functions(tree)
        for name in names
        for i in range(len(OPERATORS[name].sites(func)))
    ]


def _find_function(tree: ast.Module, qualname: str) -> FuncNode:
    for name, node in iter_functions(tree):
        if name == qualname:
            return node
    raise MutationError(f"no function {qualname!r}")


def apply_site(source: str, ref: SiteRef) -> tuple[str, str]:
    """Apply one mutation to one module; returns ``(new source, description)``.

    Raises ``MutationError`` when the site is gone, the text edit would not reproduce the mutated
    tree exactly, or the mutation changes nothing.
    """
    tree = safe_ast.parse(source)
    original = normalized(source)
    func = _find_function(tree, ref.function)
    sites = OPERATORS[ref.operator].sites(func)
    if not 0 <= ref.site < len(sites):
        raise MutationError(f"{ref}: site out of range ({len(sites)} sites)")
    src = Source(source)
    try:
        applied = OPERATORS[ref.operator].apply(sites[ref.site], src, func)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise MutationError(f"{ref}: {exc}") from exc
    # Re-parsing the unparsed tree folds spellings the parser never produces (``Constant(-1)``).
    expected = normalized(ast.unparse(tree))
    if expected == original:
        raise MutationError(f"{ref}: mutation changes nothing")
    for edits in applied.candidates:
        try:
            text = src.apply(edits)
            if normalized(text) == expected:
                return text, f"{ref.file}:{applied.line} in {ref.function}: {applied.description}"
        except (SyntaxError, MutationError, ValueError):
            continue
    raise MutationError(f"{ref}: no faithful text edit")


def apply_mutations(read: Callable[[str], str], refs: Sequence[SiteRef]) -> MutationResult:
    """Apply several mutations (in distinct functions) in order; ``read(file)`` gives originals.

    Sites are counted inside one function only, so a mutation in one function never shifts the
    site indices of another, and applying them one after the other on re-parsed text is exact.
    """
    files: dict[str, str] = {}
    descriptions: list[str] = []
    for ref in refs:
        current = files[ref.file] if ref.file in files else read(ref.file)
        files[ref.file], description = apply_site(current, ref)
        descriptions.append(description)
    return MutationResult(files, tuple(descriptions))


def normalized(source: str) -> str:
    """Formatting-independent identity of a module, used to drop duplicate mutants."""
    return ast.dump(safe_ast.parse(source))
