"""What the config names but is not there -- the model, the env, a reasoning-gym dataset -- is one line
of the real ``envhub train`` before any model loads: exit code 2, no traceback, nothing written.

The env and dataset cases train a model dir that cannot load (a ``config.json`` of nothing): had the
trainer loaded it before checking the env, the error would be the model's, not the env's."""

import subprocess
import sys

import pytest
import yaml
from trainer_fixtures import letter_config


def _config(tmp_path, model, **sections):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(letter_config(tmp_path / "run", model, **sections)))
    return path


def _unloadable_model(tmp_path):
    model = tmp_path / "unloadable"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def _train(*args, module="envhub.cli"):
    command = [sys.executable, "-m", module, *(["train"] if module == "envhub.cli" else []), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _one_line_error(done, says):
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]
    assert done.stdout == ""


@pytest.mark.parametrize("module", ["envhub.cli", "envhub.trainer"])
def test_a_missing_model_is_one_line(tmp_path, module):
    path = _config(tmp_path, tmp_path / "no-such-model", env={"id": "envhub/Computation-v0"})
    done = _train(path, module=module)
    _one_line_error(done, f"model: '{tmp_path / 'no-such-model'}' is neither a known model")
    assert not (tmp_path / "run").exists()


def test_an_unknown_env_id_is_one_line_before_the_model_loads(tmp_path):
    done = _train(_config(tmp_path, _unloadable_model(tmp_path), env={"id": "envhub/Computaton-v0"}))
    _one_line_error(done, "env.id: unknown env 'envhub/Computaton-v0'. Did you mean: envhub/Computation-v0")
    assert not (tmp_path / "run").exists()


def test_an_unknown_reasoning_gym_dataset_is_one_line_before_the_model_loads(tmp_path):
    pytest.importorskip("reasoning_gym")
    env = {"id": "envhub/ReasoningGym-v0", "args": {"dataset": "chain_summ"}}
    done = _train(_config(tmp_path, _unloadable_model(tmp_path), env=env))
    _one_line_error(done, "env 'envhub/ReasoningGym-v0' with env.args {'dataset': 'chain_summ'}, split 'train': "
                          "cannot build reasoning-gym dataset 'chain_summ'")
    assert "Known datasets: " in done.stderr and "chain_sum," in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_resume_with_a_wrong_env_leaves_the_run_as_it_was(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    before = {"config.json": '{"kept": true}\n', "steps.jsonl": '{"step": 1}\n', "checkpoints/latest": "step-000001\n"}
    for name, text in before.items():
        (run / name).write_text(text)
    done = _train(_config(tmp_path, _unloadable_model(tmp_path), env={"id": "envhub/NoSuch-v0"}), "--resume")
    _one_line_error(done, "env.id: unknown env 'envhub/NoSuch-v0'")
    assert {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()} == set(before)
    assert all((run / name).read_text() == text for name, text in before.items())
