"""Progress of long commands, on stderr only: a count toward a total (:class:`Progress`) or named
stages with their elapsed time (:class:`Stages`).

Whether it shows (:func:`progress_wanted`): a command's ``--progress`` / ``--no-progress``;
otherwise ``ENVHUB_PROGRESS=1`` forces it on and ``0`` off; otherwise it shows when stderr is a
terminal. On a terminal it is live (a rich bar, cleared when done); elsewhere (forced on in CI or a
test) it is plain lines: one when a stage starts and ends, and for a count one after
:data:`FIRST_LINE_S`, then at most one per :data:`LINE_INTERVAL_S`, plus the last. A finished job
leaves one summary line. Off, nothing is written: a command prints exactly what it printed
without progress. Nothing here writes to stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

ENV_VAR = "ENVHUB_PROGRESS"
#: In plain-line mode, the most often one count prints a line (seconds); its last line always prints.
LINE_INTERVAL_S = 5.0
#: ... and the earliest its first line prints (a job done sooner prints only its last line).
FIRST_LINE_S = 1.0


def progress_wanted(flag: bool | None = None, stream: TextIO | None = None) -> bool:
    """``flag`` (a command's ``--progress/--no-progress``; None when not given) wins; then
    ``ENVHUB_PROGRESS`` (1/true/yes/on or 0/false/no/off); then whether ``stream`` (stderr) is a terminal."""
    if flag is not None:
        return flag
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced in {"1", "true", "yes", "on"}:
        return True
    if forced in {"0", "false", "no", "off"}:
        return False
    return _isatty(stream or sys.stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def elapsed(seconds: float) -> str:
    """``4.2s``, ``3m07s`` or ``1h02m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s // 60 % 60:02d}m"


class Progress:
    """``done`` of ``total`` items (``total`` None: not known yet, or nothing to count), with a
    short ``note`` (e.g. "2 violations"); a ``unit`` makes it a count even before its total is
    known. ``show`` False shows nothing (the count and the note are still kept, for :meth:`line`).
    Thread-safe. Use as a context manager, or call :meth:`close`."""

    def __init__(self, label: str, total: int | None = None, *, show: bool, stream: TextIO | None = None,
                 unit: str = "") -> None:
        self.label, self.total, self.show, self.unit = label, total, show, unit
        self.done, self.note = 0, ""
        self.started = time.monotonic()
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._last_line = self.started - LINE_INTERVAL_S + FIRST_LINE_S  # plain lines: when the first is due
        self._closed = False
        self._bar: Any = None
        if show and _isatty(self._stream):
            self._start_bar()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if self.total is not None or self.unit:  # a count (its total may come later: set_total)
            columns += [BarColumn(), MofNCompleteColumn()]
        columns += [TimeElapsedColumn(), TextColumn("{task.fields[note]}")]
        self._bar = RichProgress(*columns, console=Console(file=self._stream), transient=True)
        self._task = self._bar.add_task(self.label, total=self.total, note="")
        self._bar.start()

    def advance(self, n: int = 1, note: str | None = None) -> None:
        """``n`` more items done; ``note`` replaces the note when given."""
        self.update(self.done + n, note)

    def update(self, done: int | None = None, note: str | None = None) -> None:
        """Set the count and the note (kept even when not shown, for :meth:`line`)."""
        with self._lock:
            if done is not None:
                self.done = done
            if note is not None:
                self.note = note
            if not self.show or self._closed:
                return
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done, note=self.note)
                return
            now = time.monotonic()
            if now - self._last_line >= LINE_INTERVAL_S and not self._finished():
                self._last_line = now
                self._write(self.line())

    def set_total(self, total: int, label: str | None = None) -> None:
        """The total, once it is known (and a label that can say more now)."""
        with self._lock:
            self.total = total
            self.label = label or self.label
            if self._bar is not None and not self._closed:
                self._bar.update(self._task, total=total, description=self.label)

    def say(self, text: str) -> None:
        """A line of its own now (e.g. a warning), above the live bar on a terminal."""
        if not self.show:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(text, markup=False, highlight=False)
            else:
                self._write(text)

    def _finished(self) -> bool:
        return self.total is not None and self.done >= self.total

    def line(self) -> str:
        """``label 5/8 units (note) 3.1s``: where the count stands."""
        count = f" {self.done}/{self.total}" if self.total is not None else f" {self.done}" if self.done else ""
        unit = f" {self.unit}" if self.unit and count else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.label}{count}{unit}{note} {elapsed(time.monotonic() - self.started)}"

    def close(self, summary: str | None = None) -> None:
        """Stop the live bar and print ``summary`` (default: :meth:`line`; "": no line). Idempotent."""
        if not self.show:
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.stop()
            summary = self.line() if summary is None else summary
            if summary:
                self._write(summary)

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # stderr went away: progress is never worth failing for
            pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(None if exc_type is None else "")  # a failure says itself; no count line before it


class EpisodeProgress(Progress):
    """Episodes of a resumable run toward ``planned``, starting from those already in
    ``trajectories`` (counted as the run's own: a resumed run skips them), with the outcomes so far."""

    def __init__(self, trajectories: Path, planned: int, *, show: bool, stream: TextIO | None = None) -> None:
        super().__init__("episodes", planned, show=show, stream=stream)
        self.before = min(episodes_on_disk(trajectories), planned) if show else 0
        self.ran = self.success = self.infra = 0
        self.update(self.before, self._note())

    def on_episode(self, record: Any) -> None:
        """An ``on_episode`` callback: one more episode finished (a :class:`~envhub.types.TrajectoryRecord`)."""
        # What the callback raises would turn this episode into an env_error record: never raise.
        with contextlib.suppress(Exception):
            self.ran += 1
            self.success += record.outcome == "success"
            self.infra += record.outcome.is_infra
            self.update(min(self.before + self.ran, self.total or 0), self._note())

    def _note(self) -> str:
        parts = [f"{self.before} already on disk"] if self.before else []
        if self.ran:
            parts.append(f"{self.success} success" + (f", {self.infra} infra" if self.infra else ""))
        return "; ".join(parts)


class Stages:
    """A job of named stages, each shown with its elapsed time; a failed stage is named with the
    error (which is re-raised, never swallowed). ``show`` False makes it silent."""

    def __init__(self, title: str, *, show: bool, stream: TextIO | None = None) -> None:
        self.title, self.show = title, show
        self._stream = stream or sys.stderr
        self.started = time.monotonic()
        self.times: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None, unit: str = "") -> Iterator[Progress]:
        """Run one stage; the :class:`Progress` it yields counts the stage's items (``total`` of
        them when known) and carries a note about where it is."""
        label = f"{self.title}: {name}"
        if self.show and not _isatty(self._stream):
            self._say(f"{label} ...")
        progress = Progress(label, total, show=self.show, stream=self._stream, unit=unit)
        t0 = time.monotonic()
        try:
            yield progress
        except BaseException as exc:
            took = time.monotonic() - t0
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed: {_one_line(exc)}"
            progress.close(f"{label} {why} after {elapsed(took)}")
            raise
        took = time.monotonic() - t0
        self.times.append((name, took))
        count = (f" {progress.done}" + (f"/{progress.total}" if progress.total is not None else "")
                 + (f" {unit}" if unit else "")) if progress.done else ""
        note = f" ({progress.note})" if progress.note else ""
        progress.close(f"{label} done{count}{note} in {elapsed(took)}")

    def finish(self, what: str = "done") -> None:
        """The summary line: ``title: done in 45.2s (stage 1.0s, stage 40.1s)``."""
        parts = ", ".join(f"{name} {elapsed(took)}" for name, took in self.times)
        self._say(f"{self.title}: {what} in {elapsed(time.monotonic() - self.started)}"
                  + (f" ({parts})" if parts else ""))

    def _say(self, text: str) -> None:
        if self.show:
            with contextlib.suppress(OSError, ValueError):
                self._stream.write(text + "\n")
                self._stream.flush()


def episodes_on_disk(trajectories: Path) -> int:
    """Complete records in a trajectories file (0 when there is none yet; a torn last line is not one)."""
    try:
        with open(trajectories, "rb") as fh:
            return sum(1 for line in fh if line.endswith(b"\n") and line.strip())
    except OSError:  # not there yet (or --out is unusable, which the run itself reports)
        return 0


def interrupted_message(trajectories: Path, planned: int | None = None) -> str:
    """What Ctrl-C of a resumable run says: how many episodes are on disk (of how many planned,
    when known), and how to resume."""
    n = episodes_on_disk(trajectories)
    of = f" (of {planned} planned)" if planned is not None else ""
    return (f"interrupted: {n} episode{'' if n == 1 else 's'} on disk in {trajectories}{of}; "
            "rerun the same command to resume: episodes on disk are skipped")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


__all__ = ["ENV_VAR", "FIRST_LINE_S", "LINE_INTERVAL_S", "EpisodeProgress", "Progress", "Stages", "elapsed",
           "episodes_on_disk", "interrupted_message", "progress_wanted"]
