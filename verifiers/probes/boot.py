"""The probe runner's entry point in the grading sandbox: ``python3 -s -P <it> PLAN``.

Stdlib only; shipped as ``<probe_dir>/envhub_probe_boot.py``. The host also ships
``envhub_probe_code.b64``: its magic number, a newline, then base64 of a marshalled ``{module name:
code}`` of every shipped module, compiled on the host from the very sources shipped beside it.
Where this interpreter reads bytecode of that magic number (the rule Python itself applies to
``.pyc`` files), the runner and the modules it loads start from that code: one load instead of
compiling some 2,000 lines on every grading run. Anywhere else (another Python in a foreign
harness), everything is compiled from the sources, with the same result.
"""

import base64
import importlib.util
import marshal
import os
import sys
import types

BUNDLE_FILE = "envhub_probe_code.b64"
RUNNER_MODULE = "envhub_probe_runner"


def shipped_code(probe_dir: str) -> dict[str, types.CodeType]:
    """The host's compiled modules, or nothing where this interpreter cannot run them."""
    try:
        with open(os.path.join(probe_dir, BUNDLE_FILE), "rb") as fh:
            magic, _, body = fh.read().partition(b"\n")
        if magic.decode("ascii") != importlib.util.MAGIC_NUMBER.hex():
            return {}
        codes = marshal.loads(base64.b64decode(body))
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(codes, dict) or not all(isinstance(c, types.CodeType) for c in codes.values()):
        return {}
    return codes


def main() -> int:
    if len(sys.argv) != 2:
        sys.stderr.write("usage: envhub_probe_boot.py PLAN_PATH\n")
        return 2
    probe_dir = os.path.dirname(sys.argv[0])
    codes = shipped_code(probe_dir)
    path = os.path.join(probe_dir, RUNNER_MODULE + ".py")
    code = codes.get(RUNNER_MODULE)
    if code is None:
        with open(path, "rb") as fh:
            code = compile(fh.read(), path, "exec", dont_inherit=True)
    runner = sys.modules[RUNNER_MODULE] = types.ModuleType(RUNNER_MODULE)
    runner.__file__ = path
    exec(code, runner.__dict__)
    return runner.main(sys.argv[1], codes)


if __name__ == "__main__":
    sys.exit(main())
