"""Seeded procedural generators for computation tasks.

Every task is a pure function of ``(kind, level, seed)``, so its id is its recipe:
``comp-<kind>-L<level>-<seed>``. The split is a function of the problem's *content* (a hash of the
prompt), so two recipes that happen to produce the same problem always land in the same split and
train never overlaps validation or test. Each problem carries the exact answer (computed with
``fractions`` / ``datetime``, never floats where exactness matters) and a solver program that the
gold policy runs through the ``python`` tool.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

LEVELS = (1, 2, 3)
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
#: The unknowns of a linear system, in the order its prompt asks for them.
VARIABLES = ("x", "y", "z")


@dataclass(frozen=True)
class Problem:
    kind: str
    level: int
    seed: int
    prompt: str
    answer: str | list[str]
    #: how the verifier compares: "integer", "number" (with tolerance), "fraction", "word", "sequence"
    answer_type: str
    solver: str
    #: for a "number" answer, the unrounded value that the verifier's tolerance is measured from
    #: (the exact result, or the float the solver computes); None for exact answer types
    exact: str | None = None

    @property
    def labels(self) -> list[str] | None:
        """The names of a "sequence" answer's values, in order (``["x", "y"]``); None otherwise."""
        return list(VARIABLES[: len(self.answer)]) if self.answer_type == "sequence" else None

    @property
    def task_id(self) -> str:
        return f"comp-{self.kind}-L{self.level}-{self.seed}"

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.kind}\n{self.prompt}".encode()).hexdigest()

    @property
    def split(self) -> str:
        bucket = int(self.content_hash[:8], 16) % 20
        return "train" if bucket < 16 else "validation" if bucket < 18 else "test"


def _bigint(rng: random.Random, level: int) -> tuple[str, str, str, str]:
    digits = {1: 12, 2: 24, 3: 40}[level]
    a, b, c = (rng.randrange(10 ** (digits - 1), 10**digits) for _ in range(3))
    if level < 3:
        value = a * b - c
        expr = f"{a} * {b} - {c}"
    else:
        m = rng.randrange(10**8, 10**9)
        e = rng.randrange(100, 10_000)
        value = (pow(a, e, m) + b * c) % m
        expr = f"({a}^{e} mod {m} + {b} * {c}) mod {m}"
    prompt = f"Compute exactly: {expr}. Give the integer result."
    solver = (
        f"print((pow({a}, {e}, {m}) + {b} * {c}) % {m})" if level == 3 else f"print({a} * {b} - {c})"
    )
    return prompt, str(value), "integer", solver


def _fraction(rng: random.Random, level: int) -> tuple[str, str, str, str]:
    n_terms = level + 1
    terms = [Fraction(rng.randint(1, 19), rng.randint(2, 23)) for _ in range(n_terms)]
    ops = [rng.choice("+-*") for _ in range(n_terms - 1)]
    expr = str(terms[0])
    code = f"Fraction({terms[0].numerator}, {terms[0].denominator})"
    for op, t in zip(ops, terms[1:], strict=True):
        expr += f" {op} {t}"
        code += f" {op} Fraction({t.numerator}, {t.denominator})"
    value = eval(code, {"Fraction": Fraction})  # our own generated expression, no user input
    prompt = (
        f"Evaluate {expr} with the usual operator precedence. "
        "Answer as a fraction in lowest terms, like -7/12 (or an integer if it is whole)."
    )
    solver = f"from fractions import Fraction\nprint({code})"
    return prompt, str(value), "fraction", solver


def _date(rng: random.Random, level: int) -> tuple[str, str, str, str]:
    start = dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(0, 200 * 365))
    if level == 1:
        days = rng.randrange(1, 400)
        end = start + dt.timedelta(days=days)
        return (
            f"How many days are there from {start.isoformat()} to {end.isoformat()}? "
            "(Count the end date but not the start date.)",
            str(days),
            "integer",
            f"import datetime as dt\nprint((dt.date.fromisoformat('{end}') - dt.date.fromisoformat('{start}')).days)",
        )
    offset = rng.randrange(-5000, 5000) if level == 3 else rng.randrange(1, 3000)
    target = start + dt.timedelta(days=offset)
    direction = f"{offset} days after" if offset >= 0 else f"{-offset} days before"
    return (
        f"What day of the week is {direction} {start.isoformat()}? Answer with the weekday name.",
        WEEKDAYS[target.weekday()],
        "word",
        "import datetime as dt\n"
        f"d = dt.date.fromisoformat('{start}') + dt.timedelta(days={offset})\nprint(d.strftime('%A'))",
    )


_UNITS = {
    "length": {"m": 1.0, "km": 1000.0, "mile": 1609.344, "ft": 0.3048, "inch": 0.0254, "yard": 0.9144},
    "mass": {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125},
    "volume": {"l": 1.0, "ml": 0.001, "us_gallon": 3.785411784, "us_cup": 0.2365882365},
}


def _unit(rng: random.Random, level: int) -> tuple[str, str, str, str, str]:
    quantity = rng.choice(sorted(_UNITS))
    table = _UNITS[quantity]
    src, dst = rng.sample(sorted(table), 2)
    value = round(rng.uniform(0.5, 10 ** (level + 1)), level)
    if level == 3 and quantity == "length":
        # a compound rate: length per hour to the other unit per second
        result = value * table[src] / table[dst] / 3600
        prompt = f"Convert {value} {src} per hour to {dst} per second. Round to 6 significant figures."
        code = f"print({value} * {table[src]} / {table[dst]} / 3600)"
    else:
        result = value * table[src] / table[dst]
        prompt = f"Convert {value} {src} to {dst}. Round to 6 significant figures."
        code = f"print({value} * {table[src]} / {table[dst]})"
    answer = f"{result:.6g}"
    return prompt, answer, "number", code, repr(result)


def _stats(rng: random.Random, level: int) -> tuple[str, str, str, str, str]:
    n = 5 + 3 * level
    cities = ["Lyon", "Porto", "Graz", "Turku", "Split", "Ghent"]
    rows = [(f"r{i}", rng.choice(cities), rng.randint(10, 500)) for i in range(n)]
    table = "id,city,amount\n" + "\n".join(f"{a},{b},{c}" for a, b, c in rows)
    stat = rng.choice(["mean", "median", "pstdev"] if level > 1 else ["mean", "median"])
    values = [c for _, _, c in rows]
    where = ""
    if level == 3:
        city = rows[0][1]
        values = [c for _, b, c in rows if b == city]
        where = f" over the rows whose city is {city}"
    result = getattr(statistics, stat)(values)
    # mean and median of integers are exact rationals; pstdev is the correctly rounded float
    exact = (str(Fraction(sum(values), len(values))) if stat == "mean"
             else str(Fraction(result)) if stat == "median" else repr(result))
    names = {"mean": "arithmetic mean", "median": "median", "pstdev": "population standard deviation"}
    prompt = (
        f"Here is a CSV table:\n\n{table}\n\nCompute the {names[stat]} of the amount column{where}. "
        "Round to 2 decimal places."
    )
    filt = f" if r['city'] == '{rows[0][1]}'" if level == 3 else ""
    code = (
        "import csv, io, statistics\n"
        f"rows = list(csv.DictReader(io.StringIO({table!r})))\n"
        f"vals = [int(r['amount']) for r in rows{filt}]\n"
        f"print(round(statistics.{stat}(vals), 2))"
    )
    return prompt, f"{round(result, 2)}", "number", code, exact


def _linear(rng: random.Random, level: int) -> tuple[str, list[str], str, str]:
    names = list(VARIABLES[: 2 if level < 3 else 3])
    while True:
        solution = [rng.randint(-9, 9) for _ in names]
        rows = [[rng.randint(-6, 6) for _ in names] for _ in names]
        if _det([[Fraction(v) for v in r] for r in rows]) != 0:
            break
    eqs = []
    for row in rows:
        lhs = " + ".join(f"{c}*{v}" for c, v in zip(row, names, strict=True)).replace("+ -", "- ")
        eqs.append(f"{lhs} = {sum(c * s for c, s in zip(row, solution, strict=True))}")
    prompt = (
        "Solve the system of linear equations:\n" + "\n".join(eqs) +
        f"\nAnswer as {', '.join(f'{v}=<value>' for v in names)}."
    )
    rhs = [sum(c * s for c, s in zip(row, solution, strict=True)) for row in rows]
    code = (
        "from fractions import Fraction as F\n"
        f"A = [[F(v) for v in r] for r in {rows}]\nb = [F(v) for v in {rhs}]\n"
        "n = len(b)\n"
        "for i in range(n):\n"
        "    p = next(r for r in range(i, n) if A[r][i] != 0)\n"
        "    A[i], A[p], b[i], b[p] = A[p], A[i], b[p], b[i]\n"
        "    for r in range(n):\n"
        "        if r != i and A[r][i] != 0:\n"
        "            f = A[r][i] / A[i][i]\n"
        "            A[r] = [a - f * c for a, c in zip(A[r], A[i])]\n"
        "            b[r] -= f * b[i]\n"
        f"print(', '.join(f'{{v}}={{b[i] / A[i][i]}}' for i, v in enumerate({names})))"
    )
    return prompt, [str(s) for s in solution], "sequence", code


def _det(m: list[list[Fraction]]) -> Fraction:
    if len(m) == 2:
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]
    return sum(
        ((-1) ** j) * m[0][j] * _det([row[:j] + row[j + 1:] for row in m[1:]]) for j in range(len(m))
    )


KINDS: dict[str, Callable[[random.Random, int], tuple]] = {
    "bigint": _bigint,
    "fraction": _fraction,
    "date": _date,
    "unit": _unit,
    "stats": _stats,
    "linear": _linear,
}


def generate(kind: str, level: int, seed: int) -> Problem:
    if kind not in KINDS:
        raise ValueError(f"unknown computation kind {kind!r}; known: {', '.join(KINDS)}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}")
    rng = random.Random(f"envhub-computation/{kind}/{level}/{seed}")
    prompt, answer, answer_type, solver, *exact = KINDS[kind](rng, level)
    return Problem(kind, level, seed, prompt, answer, answer_type, solver, exact=exact[0] if exact else None)


def parse_task_id(task_id: str) -> tuple[str, int, int]:
    try:
        prefix, kind, level, seed = task_id.split("-")
        if prefix != "comp" or not level.startswith("L"):
            raise ValueError
        return kind, int(level[1:]), int(seed)
    except ValueError:
        raise KeyError(f"not a computation task id: {task_id!r} (expected comp-<kind>-L<level>-<seed>)") from None
