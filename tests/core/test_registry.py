import subprocess
import sys
import textwrap

import gymnasium
import pytest

import envhub
from envhub.registry import UnknownEnvError

PLUGIN_MODULE = '''
from envhub import Env, Task, tool
from envhub.verifiers import AnswerPresent, ExactMatch, LayeredVerifier
from envhub.parsing import format_tool_call
from envhub.types import Action


class Tasks:
    name = "echo"
    version = "1"

    def task_ids(self, split):
        return [f"echo-{split}-{i}" for i in range(3)]

    def get(self, task_id):
        word = task_id.rsplit("-", 1)[1]
        return Task(task_id=task_id, family="echo", split=task_id.split("-")[1], prompt=f"Say {word}",
                    hidden={"answer": word})


class EchoEnv(Env):
    env_id = "tinyplugin/Echo-v0"
    family = "echo"

    def load_tasks(self):
        return Tasks()

    def make_verifier(self):
        return LayeredVerifier(gate=[AnswerPresent()], correctness=ExactMatch())

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """Submit."""
        return answer

    def gold_actions(self, task):
        return [Action(text=format_tool_call("answer", {"answer": task.hidden["answer"]}))]


def register_envs():
    from envhub import register
    register("tinyplugin/Echo-v0", EchoEnv, description="echo a word")
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    (root / "envhub_tinyplugin.py").write_text(PLUGIN_MODULE)
    (root / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "envhub-tinyplugin"
        version = "0.0.1"

        [tool.setuptools]
        py-modules = ["envhub_tinyplugin"]

        [project.entry-points."envhub.envs"]
        echo = "envhub_tinyplugin:register_envs"
    '''))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", str(root)], check=True,
                   capture_output=True, timeout=300)
    yield
    subprocess.run([*pip, "uninstall", "-y", "envhub-tinyplugin"], check=True, capture_output=True)


@pytest.mark.slow
def test_plugin_env_is_found_through_entry_points_and_works(plugin):
    code = textwrap.dedent('''
        import envhub, gymnasium
        from envhub.policies import make_policy
        from envhub.rollout.runner import run_rollouts
        import tempfile
        assert "tinyplugin/Echo-v0" in [s.env_id for s in envhub.list_envs()]
        env = gymnasium.make("tinyplugin/Echo-v0")
        obs, _ = env.reset(seed=0)
        assert "Say" in obs
        r = run_rollouts("tinyplugin/Echo-v0", make_policy("gold"), out_dir=tempfile.mkdtemp(), episodes=3)
        print(r.report["strict_success_rate"])
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


def test_unknown_env_suggests_the_closest_ids():
    with pytest.raises(UnknownEnvError) as info:
        envhub.make("envhub/Computaton-v0")
    assert "Did you mean: envhub/Computation-v0" in str(info.value)


def test_bad_env_id_is_rejected():
    with pytest.raises(ValueError, match="namespace/Name-v0"):
        envhub.register("NoNamespace", object)


@pytest.mark.slow
def test_every_env_is_registered_with_gymnasium_on_import():
    for spec in envhub.list_envs():
        assert spec.env_id in gymnasium.registry


def test_an_argument_the_env_does_not_take_is_named_with_those_it_takes():
    """``make`` (and so ``gymnasium.make``) checks the keyword arguments against the constructors
    they go through (each ``**kwargs`` hands on to the base class): one clear error, a TypeError."""
    from envhub.registry import EnvArgumentError, env_arguments

    assert env_arguments("envhub/Computation-v0") == ["budget", "kinds", "levels", "parser", "sandbox",
                                                      "sandbox_pool", "split"]
    for make in (envhub.make, gymnasium.make):
        with pytest.raises(EnvArgumentError, match=r"envhub/Computation-v0 takes no argument 'bogus' "
                                                   r"\(it takes: budget, kinds, levels, parser, sandbox"):
            make("envhub/Computation-v0", bogus=1)
    assert issubclass(EnvArgumentError, TypeError)
