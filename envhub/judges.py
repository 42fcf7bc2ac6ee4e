"""LLM judges, as the kernel knows them: the engine contract, the pin, and where engines come from.

* :class:`JudgeEngine` -- what a judge backend offers: one reply text to a chat prompt, in its
  answer form. envhub's backends (``hf:``, ``sglang:``, ``openai:``) live in
  :mod:`envhub.adapters.judge_engines` and are found through the ``envhub.judges`` entry point group
  (pyproject.toml), as policy kinds are; :func:`make_judge_engine` makes one from a spec and
  :func:`shared_judge_engine` gives the process's one per spec (every env of a run judges through it,
  so an in-process engine batches concurrent episodes' requests and loads its weights once).
* :class:`JudgePin` -- a judge is pinned like a dependency: what model, which weights, which prompt
  and rubric, which sampling; recorded in every verdict it scores and claimed by every run that
  uses it (:func:`claim_pin`), so a resumed run never mixes two judges' rewards.

The rubric, the prompt, the strict parsing and the judged quality check are the verifiers'
(:mod:`envhub.verifiers.judge`).

``weights_sha256`` is the SHA-256 over a local model's weight files (``*.safetensors``, else
``*.bin``, in name order, each name then its bytes); a judge served over HTTP has none we can
compute (None: the pin then holds the server's model id only, and says so).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from envhub.store import write_json_atomic

#: Entry point group of judge backends: ``name = "module:factory"``, ``factory(target, **options)``.
JUDGE_ENTRY_POINT_GROUP = "envhub.judges"
PIN_FILE = "judge.json"
_hash_lock = threading.Lock()
_hash_cache: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}


class JudgeEngine(Protocol):
    """A judge backend. ``model``, ``weights_sha256`` and ``answer_form`` (how a reply is asked for
    and read) go into the pin; ``complete`` is thread-safe; an engine that cannot reach its model
    raises :class:`~envhub.errors.EngineError`."""

    model: str
    weights_sha256: str | None
    answer_form: str

    def complete(
        self, messages: list[dict[str, str]], *, reply_prefix: str, temperature: float, seed: int | None
    ) -> str:
        """The judge's whole reply to ``messages``. An engine that can start the reply itself
        (a token engine) starts it with ``reply_prefix`` and samples only what the answer form
        leaves open; one that cannot (a chat server) returns what the model wrote."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class JudgePin:
    """What makes a judge's scores comparable: ``model`` (the judge spec without options),
    ``weights_sha256`` (None where not computable), ``prompt_sha256`` (the prompt template and its
    answer form), ``rubric_sha256`` (the rubric's text and scale), ``sampling`` (temperature,
    samples per verdict, max tokens, seed)."""

    model: str
    weights_sha256: str | None
    prompt_sha256: str
    rubric_sha256: str
    sampling: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JudgePin:
        """The inverse of :meth:`to_dict`; ValueError naming what is missing."""
        missing = [k for k in ("model", "weights_sha256", "prompt_sha256", "rubric_sha256") if k not in data]
        if missing:
            raise ValueError(f"a judge pin needs {', '.join(missing)}")
        return cls(
            model=data["model"],
            weights_sha256=data["weights_sha256"],
            prompt_sha256=data["prompt_sha256"],
            rubric_sha256=data["rubric_sha256"],
            sampling=dict(data.get("sampling") or {}),
        )


def text_sha256(text: str) -> str:
    """The hex SHA-256 of ``text`` in UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def weights_sha256(model_dir: Path) -> str | None:
    """The SHA-256 over a local model's weight files (see the module docstring), or None when the
    directory holds none. Cached per process by the files' names, sizes and mtimes."""
    files = sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin"))
    if not files:
        return None
    key = (str(model_dir.resolve()), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    with _hash_lock:
        if key in _hash_cache:
            return _hash_cache[key]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 22):
                digest.update(chunk)
    value = digest.hexdigest()
    with _hash_lock:
        _hash_cache[key] = value
    return value


def pin_differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``field: BEFORE != NOW`` for every field of two pins (as dicts) that differs, in field order."""
    keys = [*before, *[k for k in now if k not in before]]
    return [
        f"{k}: {json.dumps(before.get(k), sort_keys=True)} != {json.dumps(now.get(k), sort_keys=True)}"
        for k in keys
        if before.get(k) != now.get(k)
    ]


def claim_pin(run_path: Path, pins: dict[str, dict[str, Any]]) -> None:
    """Record the judges of a run (check name -> pin) in ``RUN/judge.json`` the first time; later a
    different set is a ValueError naming each difference with both values. A run without judges
    claims nothing, and continuing a judged run without its judge is refused too."""
    path = run_path / PIN_FILE
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        if before != pins:
            raise ValueError(
                f"{run_path} was judged by another judge ({describe_change(before, pins)}); "
                "resume with the same judge or use another run directory"
            )
        return
    if pins:
        run_path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, pins)


def describe_change(before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> str:
    """One line naming how two runs' judge sets differ (a judge added, removed, or its pin's fields)."""
    parts: list[str] = []
    for name in sorted({*before, *now}):
        if name not in now:
            parts.append(f"{name}: judged before, not now")
        elif name not in before:
            parts.append(f"{name}: judged now, not before")
        elif before[name] != now[name]:
            parts.append(f"{name}: " + "; ".join(pin_differences(before[name], now[name])))
    return "; ".join(parts)


_engines: dict[str, JudgeEngine] = {}
_engines_lock = threading.Lock()


def make_judge_engine(spec: str, **options: Any) -> JudgeEngine:
    """A new judge engine for ``KIND:TARGET`` (``hf:NAME_OR_PATH``, ``sglang:URL``, ``openai:URL``,
    or a kind another package declares in the ``envhub.judges`` group); ValueError for another spec."""
    kind, _, target = spec.partition(":")
    found = entry_points(group=JUDGE_ENTRY_POINT_GROUP, name=kind) if kind and target else ()
    if not found:
        kinds = sorted(ep.name for ep in entry_points(group=JUDGE_ENTRY_POINT_GROUP))
        raise ValueError(
            f"judge spec {spec!r}: use {', '.join(f'{k}:...' for k in kinds) or 'a KIND:TARGET'} "
            f"(the {JUDGE_ENTRY_POINT_GROUP!r} entry points)"
        )
    return next(iter(found)).load()(target, **options)


def shared_judge_engine(spec: str, **options: Any) -> JudgeEngine:
    """The process's one engine for ``spec`` and ``options``, made on first use (see the module docstring)."""
    key = json.dumps([spec, options], sort_keys=True, default=str)
    with _engines_lock:
        if key not in _engines:
            _engines[key] = make_judge_engine(spec, **options)
        return _engines[key]


def close_shared_judge_engines() -> None:
    """Close and forget the process's shared judge engines (the next use makes them again)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.close()


__all__ = [
    "JUDGE_ENTRY_POINT_GROUP",
    "PIN_FILE",
    "JudgeEngine",
    "JudgePin",
    "claim_pin",
    "close_shared_judge_engines",
    "describe_change",
    "make_judge_engine",
    "pin_differences",
    "shared_judge_engine",
    "text_sha256",
    "weights_sha256",
]
