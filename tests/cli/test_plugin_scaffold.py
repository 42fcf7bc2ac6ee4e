"""`envhub new-env`: the generated plugin installs, registers through its entry point, passes its suite."""

import subprocess
import sys
import textwrap
import uuid

import pytest
import typer
from typer.testing import CliRunner

from envhub.cli.scaffold import PluginNames, create_plugin, new_env_command

NAME = f"scaffold-selftest-{uuid.uuid4().hex[:8]}"  # unique: concurrent test runs must not collide
NAMES = PluginNames.from_name(NAME)


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=180)


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.mark.parametrize(("name", "class_name", "package", "env_id"), [
    ("word-count", "WordCount", "envhub_word_count", "plugin/WordCount-v0"),
    ("WordCount", "WordCount", "envhub_word_count", "plugin/WordCount-v0"),
    ("HTTPThing", "HttpThing", "envhub_http_thing", "plugin/HttpThing-v0"),
])
def test_names(name, class_name, package, env_id):
    names = PluginNames.from_name(name)
    assert (names.class_name, names.package, names.env_id) == (class_name, package, env_id)


@pytest.mark.parametrize("bad", ["", "1abc", "a b!", "word--count", "class"])
def test_invalid_names_are_refused(bad):
    with pytest.raises(ValueError):
        PluginNames.from_name(bad)


def test_command_writes_the_package_and_refuses_to_overwrite(tmp_path):
    app = typer.Typer()
    app.command("new-env")(new_env_command)
    app.command("noop")(lambda: None)  # a second command keeps typer from collapsing to a single one
    result = CliRunner().invoke(app, ["new-env", "word-count", "--dir", str(tmp_path), "--namespace", "acme"])
    assert result.exit_code == 0, result.output
    root = tmp_path / "envhub-word-count"
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points."envhub.envs"]' in pyproject
    assert 'word_count = "envhub_word_count:register_envs"' in pyproject
    assert 'env_id = "acme/WordCount-v0"' in (root / "src/envhub_word_count/env.py").read_text()
    assert "acme/WordCount-v0" in result.output and "pip install -e" in result.output
    again = CliRunner().invoke(app, ["new-env", "word-count", "--dir", str(tmp_path)])
    assert again.exit_code == 2 and "exists" in again.output
    assert CliRunner().invoke(app, ["new-env", "word-count", "--dir", str(tmp_path), "--force"]).exit_code == 0


@pytest.mark.slow
def test_generated_plugin_installs_and_passes_its_own_suite(tmp_path):
    scaffold = create_plugin(NAME, tmp_path)
    for path in scaffold.files:
        if path.suffix == ".py":
            compile(path.read_text(), str(path), "exec")
    install = _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(scaffold.root))
    assert install.returncode == 0, install.stderr
    try:
        # importing the plugin package first (it imports envhub) raises no false alarm, and the env
        # is still registered on the first lookup
        own_import = _run("-c", f"import {NAMES.package}; import envhub; "
                                f"print({NAMES.env_id!r} in {{s.env_id for s in envhub.list_envs()}}); "
                                f"envhub.make({NAMES.env_id!r}).close()", cwd=tmp_path)
        assert own_import.returncode == 0, own_import.stderr
        assert own_import.stderr == "" and own_import.stdout.strip() == "True"
        # a fresh interpreter: the env is found only through the installed entry point
        verify = _run("-m", "envhub.cli", "verify", NAMES.env_id, "--limit", "10", cwd=tmp_path)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert "gold" in verify.stdout and "two_candidates" in verify.stdout
        probe = textwrap.dedent(f"""
            import gymnasium
            import envhub
            env = gymnasium.make({NAMES.env_id!r})
            text, info = env.reset(seed=1)
            task = env.unwrapped.env.episode.task
            for action in env.unwrapped.env.gold_actions(task):
                _, reward, terminated, truncated, _ = env.step(action.text)
            assert terminated and not truncated and reward == 1.0, reward
            print("ok", {NAMES.env_id!r} in {{s.env_id for s in envhub.list_envs()}})
        """)
        gym = _run("-c", probe, cwd=tmp_path)
        assert gym.returncode == 0, gym.stderr
        assert gym.stdout.strip() == "ok True"
        own = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(scaffold.root / "tests"), cwd=scaffold.root)
        assert own.returncode == 0, own.stdout + own.stderr  # the package's own tests pass too
    finally:
        uninstall = _pip("uninstall", "-y", NAMES.dist_name)
    assert uninstall.returncode == 0, uninstall.stderr
    gone = _run("-c", f"import envhub; print({NAMES.env_id!r} in {{s.env_id for s in envhub.list_envs()}})",
                cwd=tmp_path)
    assert gone.stdout.strip() == "False"
