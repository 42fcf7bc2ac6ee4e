"""Apply a unified diff (``git diff`` / ``diff -u`` output) to an in-memory file set, strictly.

Submissions graded by ``envhub verify --submissions`` may be patches. A hunk whose context does
not match exactly is an error naming the file and line, never a fuzzy guess.
"""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    pass


def _strip_prefix(path: str) -> str:
    path = path.split("\t")[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def apply_patch(files: dict[str, str], patch: str) -> dict[str, str]:
    """Return the changed files (path -> new content) after applying ``patch`` to ``files``."""
    lines = patch.splitlines(keepends=True)
    changed: dict[str, str] = {}
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError(f"line {i + 1}: '---' without a following '+++'")
        old_path, new_path = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
        path = new_path if new_path != "/dev/null" else old_path
        source = [] if old_path == "/dev/null" else changed.get(path, files.get(path))
        if source is None:
            raise PatchError(f"patch touches {path}, which does not exist")
        old = source.splitlines(keepends=True) if isinstance(source, str) else source
        out: list[str] = []
        pos = 0
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header")
            start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
            old_left = int(m.group(2) or 1)
            new_left = int(m.group(4) or 1)
            out.extend(old[pos:start])
            pos = start
            i += 1
            # hunk line counts, not line prefixes, end a hunk: "--- a/next" also starts with "-"
            while i < len(lines) and (old_left or new_left or lines[i][:1] == "\\"):
                tag, text = lines[i][:1], lines[i][1:]
                if tag not in (" ", "-", "+", "\\"):
                    raise PatchError(f"line {i + 1}: unexpected line inside a hunk")
                old_left -= tag in (" ", "-")
                new_left -= tag in (" ", "+")
                if tag == "\\":  # "\ No newline at end of file" applies to the previous line
                    if out and out[-1].endswith("\n") and lines[i - 1][:1] in (" ", "+"):
                        out[-1] = out[-1][:-1]
                    i += 1
                    continue
                if tag in (" ", "-"):
                    if pos >= len(old) or old[pos].rstrip("\n") != text.rstrip("\n"):
                        raise PatchError(f"{path}: hunk does not match at line {pos + 1}")
                    if tag == " ":
                        out.append(old[pos])
                    pos += 1
                else:
                    out.append(text)
                i += 1
        out.extend(old[pos:])
        changed[path] = "".join(out)
    if not changed:
        raise PatchError("no file headers ('--- a/...', '+++ b/...') found in the patch")
    return changed
