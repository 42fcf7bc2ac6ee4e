"""``envhub/CodeRepair-v0``: fix a planted bug in a small real project, graded by hidden tests."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode, SuiteCase, Verifier
from envhub.errors import InfraError, ToolError
from envhub.parsing import format_tool_call
from envhub.sandboxes.base import Limits, Listing, SandboxSpec
from envhub.tasks.code_repair import ENV_ID
from envhub.tools import tool
from envhub.types import Action, Task, ToolCall
from envhub.verifiers.integrity import is_cache_file

from .manifest import DEFAULT_MANIFEST, Instance, Manifest, load_manifest
from .verifier import CodeRepairVerifier, Snapshot
from .workspace import agent_files, visible_test_ids

BUDGETS = {
    1: Budget(max_turns=20, max_tool_calls=30, max_agent_seconds=600.0, max_format_errors=3),
    2: Budget(max_turns=30, max_tool_calls=45, max_agent_seconds=900.0, max_format_errors=3),
    3: Budget(max_turns=40, max_tool_calls=60, max_agent_seconds=1200.0, max_format_errors=3),
}
READ_LIMIT_LINES = 400
#: Disk a grading sandbox has beyond the agent's: the probes, runtime and runner (the largest suite's
#: take about 0.2 MiB; ``test_code_repair_infra_limits`` checks that every one fits).
PROBE_ROOM_MB = 8


class CodeRepairTasks:
    name = "code_repair"

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.version = f"code-repair-{manifest.checksum()[:12]}"
        self._by_id = {i.instance_id: i for i in manifest.instances}

    def task_ids(self, split: str) -> list[str]:
        return [i.instance_id for i in self.manifest.instances if i.split == split]

    def instance(self, task_id: str) -> Instance:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"unknown code-repair instance {task_id!r}") from None

    def get(self, task_id: str) -> Task:
        inst = self.instance(task_id)
        visible = visible_test_ids(inst)
        prompt = (
            f"Repository: `{inst.project}` (Python package under `src/`).\n\n"
            f"Issue report:\n{inst.issue_text}\n\n"
            + (f"Visible tests you may run: {', '.join(visible)}. " if visible else "")
            + "Fix the bug in the source code, then call `submit`. Hidden tests decide whether it is fixed; "
            "do not edit or add tests."
        )
        return Task(
            task_id=task_id, family="code_repair", split=inst.split, difficulty=inst.difficulty, prompt=prompt,
            metadata={"project": inst.project, "visible_tests": visible},
        )


class CodeRepairEnv(Env):
    """Edit a repository with file tools and a shell until the hidden tests pass.

    The agent's sandbox holds only the buggy sources (and a few visible tests); grading happens in
    a fresh sandbox with the original hidden tests (see :mod:`.verifier`).
    """

    env_id = ENV_ID
    family = "code_repair"
    version = "1"
    default_budget = BUDGETS[1]
    sandbox_spec: ClassVar[SandboxSpec] = SandboxSpec(limits=Limits(timeout_s=30.0, memory_mb=512, disk_mb=64))
    #: the probe runner reports every observation on stdout: room for the largest suites' reports; the
    #: disk holds whatever the agent's could, plus the probes (``PROBE_ROOM_MB``; see verifiers/placement.py)
    grading_limits: ClassVar[Limits] = Limits(timeout_s=120.0, memory_mb=512,
                                              disk_mb=sandbox_spec.limits.disk_mb + PROBE_ROOM_MB,
                                              output_bytes=16 * 1024 * 1024)

    def __init__(self, *, manifest: str | None = None, partial_credit: bool = False,
                 difficulties: Sequence[int] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._manifest_path = manifest
        self._partial_credit = partial_credit
        self._difficulties = set(difficulties or (1, 2, 3))
        self._budget_overridden = "budget" in kwargs and kwargs["budget"] is not None

    @cached_property
    def manifest(self) -> Manifest:
        return load_manifest(Path(self._manifest_path) if self._manifest_path else DEFAULT_MANIFEST)

    def load_tasks(self) -> CodeRepairTasks:
        manifest = self.manifest
        if self._difficulties != {1, 2, 3}:
            manifest = manifest.model_copy(update={
                "instances": [i for i in manifest.instances if i.difficulty in self._difficulties]})
        return CodeRepairTasks(manifest)

    def task_cache_key(self) -> tuple:
        return (self._manifest_path, tuple(sorted(self._difficulties)))

    def verifier_for(self, episode: Episode) -> Verifier:
        """The verifier of ``episode``'s submission, handed what it needs and no way back into the env:
        the instance, the grading pool and the agent's tree as it is now, at submit (reading it raises
        :class:`InfraError` only when the sandbox itself broke)."""
        return CodeRepairVerifier(self.tasks.instance(episode.task.task_id), self.grading_sandbox,
                                  Snapshot.read(self.sandbox()), partial_credit=self._partial_credit)

    def episode_budget(self, task: Task) -> Budget:
        """``BUDGETS`` by the task's difficulty, unless a ``budget`` was given."""
        return self.budget if self._budget_overridden else BUDGETS[task.difficulty]

    def system_prompt(self, task: Task) -> str:
        return (
            "You are a software engineer fixing a bug in a Python repository. Use the tools to explore "
            "and edit files; paths are relative to the repository root. Make the smallest correct "
            "fix in `src/`, then call `submit`. Call a tool by writing "
            f"{format_tool_call('read_file', {'path': 'src/module.py'})}."
        )

    def setup_episode(self, episode: Episode) -> None:
        self.sandbox().write_files(agent_files(self.tasks.instance(episode.task.task_id)))

    # ---- tools -------------------------------------------------------------------------------

    @tool
    def list_files(self, path: str = ".") -> str:
        """List the files under a directory of the repository, recursively."""
        names = self._sandbox_call(lambda sb: sb.list_files(path), path)
        shown = [n for n in names if not is_cache_file(n)]
        notes = names.notes() if isinstance(names, Listing) else []  # unreadable dirs, depth/entry bounds
        return "\n".join(shown + notes) if shown or notes else "(empty)"

    @tool
    def read_file(self, path: str, start_line: int = 1, end_line: int = 0) -> str:
        """Show a file with line numbers; optionally only lines start_line..end_line (1-based)."""
        text = self._sandbox_call(lambda sb: sb.read_file(path), path).decode("utf-8", "replace")
        lines = text.splitlines()
        if start_line < 1 or (end_line and end_line < start_line):
            raise ToolError(f"invalid line range {start_line}..{end_line}")
        last = min(len(lines), end_line or start_line + READ_LIMIT_LINES - 1)
        body = "\n".join(f"{n:5d}  {lines[n - 1]}" for n in range(start_line, last + 1))
        more = f"\n[... {len(lines) - last} more lines; use start_line={last + 1}]" if last < len(lines) else ""
        return (body or "(no lines in range)") + more

    @tool
    def search(self, pattern: str, path: str = ".") -> str:
        """Search files for a regular expression (grep -rnE); shows matching lines with numbers."""
        cmd = f"grep -rnE --devices=skip --exclude-dir=__pycache__ -e {shlex.quote(pattern)} -- {shlex.quote(path)}"
        result = self._sandbox_call(lambda sb: sb.exec(["sh", "-c", cmd], timeout=10), path)
        if result.exit_code == 1 and not result.stderr:
            return "(no matches)"
        return result.summary()

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file with the given content."""
        self._sandbox_call(lambda sb: sb.write_files({path: content}), path)
        return f"wrote {len(content.encode())} bytes to {path}"

    @tool
    def str_replace(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of `old` in a file with `new` (old must match exactly once)."""
        text = self._sandbox_call(lambda sb: sb.read_file(path), path).decode("utf-8", "replace")
        count = text.count(old) if old else 0
        if count != 1:
            raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once")
        self._sandbox_call(lambda sb: sb.write_files({path: text.replace(old, new)}), path)
        return f"replaced 1 occurrence in {path}"

    @tool
    def run(self, command: str) -> str:
        """Run a shell command in the repository (e.g. `PYTHONPATH=src python3 -m pytest -q tests`)."""
        return self._sandbox_call(lambda sb: sb.exec(["sh", "-c", command]), ".").summary()

    @tool(terminal=True)
    def submit(self) -> str:
        """Submit the repository as it is now for grading by the hidden tests."""
        return "submitted"

    def _sandbox_call(self, fn: Any, path: str) -> Any:
        """``fn(sandbox)``, with what the agent's own tree causes (missing, unreadable, a symlink,
        a FIFO, a directory) as a :class:`ToolError` it sees; only a broken sandbox is infra."""
        try:
            return fn(self.sandbox())
        except InfraError:
            raise
        except FileNotFoundError:
            raise ToolError(f"no such file or directory: {path}") from None
        except (ValueError, OSError) as exc:
            message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ToolError(message if path in message else f"{path}: {message}") from None

    # ---- scripted solutions -----------------------------------------------------------------

    def gold_actions(self, task: Task) -> list[Action]:
        """Write back the original content of every file the bugs touched, then submit."""
        inst = self.tasks.instance(task.task_id)
        from .workspace import project_sources

        original = project_sources(inst.project)
        calls = [format_tool_call("write_file", {"path": rel, "content": original[rel]}) for rel in inst.buggy_files]
        return [Action(text="\n".join(calls)), Action(text=format_tool_call("submit", {}))]

    def submission_actions(self, task: Task, submission: Any) -> list[Action]:
        """A final file set ``{path: content}`` or a unified diff against the buggy repository."""
        if isinstance(submission, dict):
            files = submission
        elif isinstance(submission, str):
            from .patching import apply_patch

            inst = self.tasks.instance(task.task_id)
            files = apply_patch(agent_files(inst), submission)
        else:
            raise ValueError("a code-repair submission is a {path: content} object or a unified diff string")
        given = agent_files(self.tasks.instance(task.task_id))
        calls = [ToolCall(name="write_file", arguments={"path": p, "content": c})
                 for p, c in files.items() if given.get(p) != c]
        return [Action(tool_calls=calls), Action(tool_calls=[ToolCall(name="submit")])]

    def export_harbor(self, task_ids: Sequence[str], dest: Path, *, base_image: str | None = None) -> list[Path]:
        """Write Harbor task directories for ``task_ids`` under ``dest``, ``FROM`` ``base_image``
        (default: a public python image, ``harbor.export.PUBLIC_BASE_IMAGE``)."""
        from .harbor import export_instance

        dest.mkdir(parents=True, exist_ok=True)
        return [export_instance(self.tasks.instance(t), self.tasks.get(t).prompt, dest, base_image=base_image)
                for t in task_ids]

    def adversarial_cases(self) -> list[SuiteCase]:
        """The manifest's own gold patch as a submission, then the attacks."""
        from .attacks import code_repair_attacks

        gold_patch = SuiteCase(
            "gold_patch", "pass",
            lambda env, task: env.submission_actions(task, env.tasks.instance(task.task_id).patch),
            "the manifest's unified diff, applied the way `envhub verify --submissions` applies one")
        return [gold_patch, *code_repair_attacks()]
