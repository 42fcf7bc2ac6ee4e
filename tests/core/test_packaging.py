import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_only_the_envhub_import_root(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(ROOT)], check=True, capture_output=True, timeout=300,
    )
    [wheel] = tmp_path.glob("envhub-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"envhub", next(t for t in tops if t.endswith(".dist-info"))}
    for sub in ("sandboxes", "verifiers", "adapters", "trainer", "tasks"):
        assert f"envhub/{sub}/__init__.py" in names
    for shipped in ("envhub/tasks/computation/generator.py", "envhub/tasks/code_repair/data/manifest.json.gz",
                    "envhub/tasks/code_repair/projects/roman/src/roman.py", "envhub/tasks/retrieval/data/corpus.jsonl.gz",
                    "envhub/cli/templates/new_env/env.py.tmpl", "envhub/verifiers/pytest_report_plugin.py",
                    "envhub/sandboxes/executor.py"):
        assert shipped in names, shipped
    top_level = [n for n in names if n.endswith("top_level.txt")]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level[0]).decode().split() == ["envhub"]


def test_installed_distribution_provides_no_other_top_level_module():
    from importlib.metadata import distribution

    probe = (
        "import importlib.util, sys\n"
        "for n in ('verifiers', 'adapters', 'trainer', 'sandboxes', 'tasks'):\n"
        "    s = importlib.util.find_spec(n)\n"
        "    print(n, s.origin if s and s.origin else (list(s.submodule_search_locations) if s else None))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/", check=True)
    for line in out.stdout.splitlines():
        assert str(ROOT) not in line, f"envhub shadows a top-level package: {line}"
    assert distribution("envhub").entry_points.select(group="envhub.envs")
