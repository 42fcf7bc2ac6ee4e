"""Harbor task directories, read as Harbor reads them: ``task.toml`` (schema up to 1.4) into a
typed :class:`TaskConfig`, and a directory of tasks into a :class:`HarborTasks` task source.

A task directory holds ``task.toml``, ``instruction.md`` (the prompt), ``environment/`` (the
Docker build context: ``Dockerfile``), ``tests/`` (``test.sh``, uploaded only to grade) and
``solution/`` (``solve.sh``, the oracle). ``harbor:DIR`` names one task directory (a task set of
that one task, in the ``train`` split) or a directory whose subdirectories are task directories
(a task set: task id = subdirectory name, split 80 / 10 / 10 train / validation / test by a
stable hash of the id, as :func:`envhub.tasks.openenv.hosted_tasks.split_of`).

The model keeps what envhub acts on and tolerates every other key (later schema versions, Harbor
features the bridge does not run), so a newer ``task.toml`` parses; a value of the wrong type
for a known key is a ``ValueError`` naming the task.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envhub.task_source import SPLITS
from envhub.tasks.openenv.hosted_tasks import split_of
from envhub.types import Task

from .egress import normalize_allowed_hosts

FAMILY = "harbor"
TASK_TOML = "task.toml"
#: The files that make a Harbor task multi-container (docker compose), which the bridge refuses.
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
INSTRUCTION = "instruction.md"


class _Section(BaseModel):
    """A ``task.toml`` table: unknown keys are tolerated (kept out of the model)."""

    model_config = ConfigDict(extra="ignore")


class NetworkMode(StrEnum):
    """Harbor's network policy of a phase: ``public``, ``no-network`` or ``allowlist``."""

    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


class _Network(_Section):
    """A section's network policy: ``network_mode`` and, for ``allowlist``, ``allowed_hosts``
    (hostnames, ``*.suffix``, IP addresses or CIDRs, normalized as Harbor does; a bad entry is the
    task's error, an ``allowed_hosts`` without ``allowlist`` too)."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @model_validator(mode="after")
    def _hosts(self) -> _Network:
        if self.allowed_hosts is not None:
            if self.network_mode is not NetworkMode.ALLOWLIST:
                raise ValueError("allowed_hosts is only valid with network_mode = \"allowlist\"")
            self.allowed_hosts = normalize_allowed_hosts(self.allowed_hosts)
        return self


class VerifierConfig(_Network):
    """``[verifier]``: how ``tests/test.sh`` runs. ``user`` None: the image's default user.
    ``environment_mode``: where it runs -- ``shared`` (the agent's container; set explicitly, the
    bridge grades in place), ``separate`` (a fresh container of the image with the agent's work
    copied in) or None (the bridge's ``grading``, separate by default; :func:`.grade.grading_mode`)."""

    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: str | None = None


class AgentConfig(_Network):
    """``[agent]``: the agent's wall time (None: the bridge's budget) and its user."""

    timeout_sec: float | None = None
    user: str | int | None = None


class EnvironmentConfig(_Network):
    """``[environment]``: the image (built from ``environment/Dockerfile`` unless ``docker_image``
    names one) and the container's limits and network."""

    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int = 10240
    gpus: int = 0
    allow_internet: bool = True
    env: dict[str, str] = Field(default_factory=dict)


class SolutionConfig(_Section):
    """``[solution]``: environment variables of ``solution/solve.sh``."""

    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Section):
    """A whole ``task.toml``. ``version`` (schema < 1.1) is read as ``schema_version``."""

    schema_version: str = "1.0"
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)

    def network_policy(self, phase: str) -> tuple[NetworkMode, list[str]]:
        """The network of a phase (``agent`` or ``verifier``) as Harbor resolves it: the phase's own
        ``network_mode`` (and ``allowed_hosts``) where it sets one, else ``[environment]``'s, else
        ``allow_internet`` (true: ``public``, false: ``no-network``)."""
        section: _Network = self.agent if phase == "agent" else self.verifier
        if section.network_mode is None:
            section = self.environment
        mode = section.network_mode
        if mode is None:
            mode = NetworkMode.PUBLIC if self.environment.allow_internet else NetworkMode.NO_NETWORK
        return mode, list(section.allowed_hosts or [])

    @model_validator(mode="before")
    @classmethod
    def _version_renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data and "schema_version" not in data:
            data = {**data, "schema_version": str(data["version"])}
        return data

    @classmethod
    def from_toml(cls, text: str) -> TaskConfig:
        """Parse ``task.toml`` text. Raises ValueError (TOML syntax or a mistyped known key)."""
        try:
            return cls.model_validate(tomllib.loads(text))
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class HarborTask:
    """One task directory, parsed."""

    task_id: str
    path: Path
    config: TaskConfig
    instruction: str

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @classmethod
    def load(cls, path: Path, task_id: str | None = None) -> HarborTask:
        """Read the task directory ``path``. Raises ValueError when it is no valid task."""
        path = path.resolve()
        name = task_id or path.name
        try:
            config = TaskConfig.from_toml((path / TASK_TOML).read_text(encoding="utf-8"))
            instruction = (path / INSTRUCTION).read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise ValueError(f"harbor task {name!r} ({path}): {exc}") from None
        if not (path / "tests" / "test.sh").is_file():
            raise ValueError(f"harbor task {name!r} ({path}) has no tests/test.sh")
        compose = [f for f in COMPOSE_FILES if (path / "environment" / f).is_file()]
        if compose:  # its services would be missing: the agent would be blamed for what we did not run
            raise ValueError(f"harbor task {name!r} ({path}) is a multi-container task (environment/{compose[0]}), "
                             "which the harbor bridge does not run")
        if config.environment.gpus > 0:  # its tests would fail for want of a device, and the agent be blamed
            raise ValueError(f"harbor task {name!r} ({path}) asks for {config.environment.gpus} GPU(s) "
                             "([environment] gpus), which the harbor bridge does not give a container")
        return cls(task_id=name, path=path, config=config, instruction=instruction)


def is_task_dir(path: Path) -> bool:
    return (path / TASK_TOML).is_file()


class HarborTasks:
    """A :class:`~envhub.task_source.TaskSource` over one Harbor task directory or a directory of
    them (see the module docstring). Every task is parsed when the source is made.

    Args:
        root: the directory.
        task_ids: keep only these tasks (in this order); an unknown id is a ValueError.

    Raises:
        ValueError: ``root`` holds no task directory, or one of them is invalid.
    """

    def __init__(self, root: str | Path, *, task_ids: Sequence[str] | None = None) -> None:
        self.root = Path(root).expanduser().resolve()
        self.name = f"{FAMILY}:{self.root}"
        if not self.root.is_dir():
            raise ValueError(f"{self.root} is no directory")
        if is_task_dir(self.root):
            tasks = [HarborTask.load(self.root)]
            self._split = {tasks[0].task_id: "train"}
        else:
            tasks = [HarborTask.load(p) for p in sorted(self.root.iterdir()) if p.is_dir() and is_task_dir(p)]
            self._split = {t.task_id: split_of(t.task_id) for t in tasks}
        if not tasks:
            raise ValueError(f"{self.root} is no Harbor task directory (no {TASK_TOML}) and holds none")
        self.tasks = {t.task_id: t for t in tasks}
        if task_ids is not None:
            unknown = [tid for tid in task_ids if tid not in self.tasks]
            if unknown:
                raise ValueError(f"{self.name} has no tasks {unknown}")
            self.tasks = {tid: self.tasks[tid] for tid in task_ids}
        digest = hashlib.sha256()
        for tid, task in sorted(self.tasks.items()):
            digest.update(f"{tid}\0{task.config.model_dump_json()}\0{task.instruction}\0".encode())
        self.version = digest.hexdigest()[:12]

    def task_ids(self, split: str) -> Sequence[str]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        return [tid for tid in self.tasks if self._split[tid] == split]

    def harbor_task(self, task_id: str) -> HarborTask:
        """The parsed task directory of ``task_id``. Raises KeyError for an unknown id."""
        found = self.tasks.get(task_id)
        if found is None:
            raise KeyError(f"{self.name} has no task {task_id!r}")
        return found

    def get(self, task_id: str) -> Task:
        """The task: the instruction is its prompt; its config is in ``metadata["harbor"]``."""
        task = self.harbor_task(task_id)
        return Task(task_id=task_id, family=FAMILY, split=self._split[task_id],  # type: ignore[arg-type]
                    prompt=task.instruction,
                    metadata={"harbor": task.config.model_dump(mode="json"), "path": str(task.path)})


__all__ = [
    "FAMILY",
    "AgentConfig",
    "EnvironmentConfig",
    "HarborTask",
    "HarborTasks",
    "NetworkMode",
    "SolutionConfig",
    "TaskConfig",
    "VerifierConfig",
    "is_task_dir",
]
