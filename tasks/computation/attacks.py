"""The computation verifier suite: wrong answers that must fail, and gold spellings that must pass.

Beside the answer attacks every family faces (:func:`~envhub.verifiers.suite.answer_attacks`),
attacks cover code instead of a value, a constant zero, the nearest value the tolerance must reject,
and, for linear systems, labels that do not match their values (permuted, duplicated, unknown,
missing). The "gold_*" cases write the right answer in other acceptable ways (labels in another
order, no labels in the prompt's order, quotes, backticks, a full stop), so that a check made
stricter against the attacks cannot start rejecting correct answers unnoticed.
"""

from __future__ import annotations

from fractions import Fraction

from envhub.episode import SuiteCase
from envhub.types import Task
from envhub.verifiers import NumericMatch
from envhub.verifiers.checks import exponent10, parse_number
from envhub.verifiers.suite import NotApplicable, answer_attacks, answer_case

from .generator import WEEKDAYS
from .grading import ANSWER_MATCH, assignments, gold_text


def _wrong(task: Task) -> str:
    """A plausible but wrong value in the right form."""
    gold = task.hidden["answer"]
    kind = task.hidden["answer_type"]
    if kind == "word":
        return WEEKDAYS[(WEEKDAYS.index(gold) + 1) % 7]
    if kind == "sequence":
        return assignments(task.hidden["labels"], [str(int(v) + (i == 0)) for i, v in enumerate(gold)])
    value = parse_number(gold)
    return str(value + 1) if kind in ("integer", "fraction") else f"{float(value) * 1.01 + 1:.6g}"


def _zero(task: Task) -> str:
    """A constant 0 in the answer's form (1 where 0 really is the answer)."""
    gold = task.hidden["answer"]
    if task.hidden["answer_type"] == "sequence":
        values = ["0"] * len(gold)
        if all(parse_number(v) == 0 for v in gold):
            values[0] = "1"
        return assignments(task.hidden["labels"], values)
    if task.hidden["answer_type"] == "word":
        return "0"
    return "1" if parse_number(gold) == 0 else "0"


def _just_outside_tolerance(task: Task) -> str:
    """The closest answer the check must still reject: 5% beyond its tolerance (or a hair off an exact value)."""
    gold = task.hidden["answer"]
    answer_type = task.hidden["answer_type"]
    if answer_type == "word":
        return _wrong(task)
    if answer_type == "sequence":
        first = parse_number(gold[0]) + Fraction(1, 10**6)
        return assignments(task.hidden["labels"], [str(first), *gold[1:]])
    check = ANSWER_MATCH.check_for(task)
    assert isinstance(check, NumericMatch)
    reference = check.reference(task)
    allowed = check.allowed_error(reference)
    if allowed == 0:
        return str(reference + Fraction(1, 10**6))
    return _scientific(reference + allowed * Fraction(105, 100))


def _scientific(value: Fraction, digits: int = 15) -> str:
    """``value`` written exactly enough (``digits`` significant figures) in scientific notation."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    e = exponent10(value)
    mantissa = str(round(value / Fraction(10) ** (e - digits + 1)))
    if len(mantissa) > digits:  # rounding carried into a new leading digit
        e += 1
        mantissa = mantissa[:digits]
    return f"{sign}{mantissa[0]}.{mantissa[1:]}e{e}"


# ---- linear systems: labels against values ----------------------------------------------------


def _system(task: Task) -> tuple[list[str], list[str]]:
    """(labels, gold values) of a linear-system task; NotApplicable for any other kind."""
    if task.hidden["answer_type"] != "sequence":
        raise NotApplicable("not a system of equations")
    return list(task.hidden["labels"]), list(task.hidden["answer"])


def _differs(task: Task, values: list[str]) -> list[str]:
    """``values`` if, read in the prompt's order, they are not the gold values; else NotApplicable."""
    if [parse_number(v) for v in values] == [parse_number(v) for v in task.hidden["answer"]]:
        raise NotApplicable("the rearranged values happen to equal the gold ones")
    return values


def _labels_reversed(task: Task) -> str:
    """Gold values in the prompt's order under reversed labels: ``y=-4, x=6`` for x=-4, y=6."""
    labels, gold = _system(task)
    _differs(task, gold[::-1])  # what the reversed labels claim, in the prompt's order
    return assignments(labels[::-1], gold)


def _duplicated_label(task: Task) -> str:
    """Gold values in order, every one labelled with the first unknown: ``x=-4, x=6``."""
    labels, gold = _system(task)
    return assignments([labels[0]] * len(gold), gold)


def _unknown_labels(task: Task) -> str:
    """Gold values in order under labels the prompt never names: ``a=-4, b=6``."""
    _, gold = _system(task)
    return assignments(list("abc"[: len(gold)]), gold)


def _missing_label(task: Task) -> str:
    """Gold values in order with the last label left off: ``x=-4, 6``."""
    labels, gold = _system(task)
    return ", ".join([*(f"{n}={v}" for n, v in zip(labels[:-1], gold[:-1], strict=True)), gold[-1]])


def _extra_label(task: Task) -> str:
    """The gold assignment plus a value for an unknown that does not exist: ``x=-4, y=6, w=0``."""
    labels, gold = _system(task)
    return f"{assignments(labels, gold)}, w=0"


def _unlabelled_reversed(task: Task) -> str:
    """Gold values without labels, in reverse order: position decides, so this is wrong."""
    _, gold = _system(task)
    return ", ".join(_differs(task, gold[::-1]))


def _gold_reordered(task: Task) -> str:
    """The gold assignment with its labels in reverse order: ``y=6, x=-4``."""
    labels, gold = _system(task)
    return assignments(labels[::-1], gold[::-1])


def _gold_unlabelled(task: Task) -> str:
    """The gold values without labels, in the order the prompt asks for them."""
    _, gold = _system(task)
    return ", ".join(gold)


def computation_attacks() -> list[SuiteCase]:
    attacks = [
        *answer_attacks(gold_text, _wrong),
        answer_case("code_instead_of_value", lambda t: "print(answer)", "code instead of a value"),
        answer_case("zero", _zero, "a constant 0, which a loose absolute tolerance accepts for tiny results"),
        answer_case("just_outside_tolerance", _just_outside_tolerance,
                    "the nearest value the kind's tolerance must reject"),
        answer_case("quoted_wrong_value", lambda t: f"'{_wrong(t)}'", "a wrong value in quotes"),
        answer_case("backticked_just_outside", lambda t: f"`{_just_outside_tolerance(t)}`.",
                    "the nearest rejected value in backticks with a full stop"),
        answer_case("labels_reversed", _labels_reversed, "gold values in order under reversed labels"),
        answer_case("duplicated_label", _duplicated_label, "gold values in order, one label for all"),
        answer_case("unknown_labels", _unknown_labels, "gold values in order under labels not in the prompt"),
        answer_case("missing_label", _missing_label, "gold values in order, the last one unlabelled"),
        answer_case("extra_label", _extra_label, "the gold assignment plus an unknown that does not exist"),
        answer_case("unlabelled_reversed", _unlabelled_reversed, "gold values unlabelled, in reverse order"),
    ]
    gold_spellings = [
        ("gold_reordered_labels", _gold_reordered, "the gold assignment, labels in another order"),
        ("gold_unlabelled", _gold_unlabelled, "the gold values unlabelled, in the prompt's order"),
        ("gold_trailing_period", lambda t: f"{gold_text(t)}.", "the gold answer ending a sentence"),
        ("gold_single_quoted", lambda t: f"'{gold_text(t)}'", "the gold answer in single quotes"),
        ("gold_double_quoted", lambda t: f'"{gold_text(t)}"', "the gold answer in double quotes"),
        ("gold_backticked", lambda t: f"`{gold_text(t)}`", "the gold answer in backticks"),
    ]
    return [*attacks, *(answer_case(name, make, why, expect="pass") for name, make, why in gold_spellings)]
