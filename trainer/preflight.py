"""Refuse, before anything runs, a config that would train nothing or train on the wrong thing.

Every check here is a way a run has silently produced no learning signal: groups of one sample
(zero variance, zero advantage), greedy sampling (every sample of a group identical), clip or
importance-weight bounds that zero every token's weight, a split or curriculum without tasks, a
chat format that cannot show the model its tools, a budget in which no turn fits; or a wrong signal:
infra outcomes trained as the policy's failures. The error names the setting and what to change.
:func:`config_notes` are the lines said, not refused (which model is the KL reference).

What the config names must be there, also checked before any model loads: the model
(:func:`check_model`) and the env with its args and split (:func:`open_env`, :func:`split_tasks`);
each missing one is a line of its own (:func:`raise_unavailable`), not a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from envhub.env import Env
from envhub.trainer.config import TrainConfig
from envhub.trainer.trackers import missing_packages, tracker_names


class PreflightError(ValueError):
    """The config cannot train anything; the message lists every reason."""


#: what an env's constructor and its task listing raise for args that name nothing there (an unknown
#: env id is a KeyError, an unknown argument a TypeError, an unknown dataset or split a ValueError)
ENV_ERRORS = (ImportError, KeyError, TypeError, ValueError)


def check_model(config: TrainConfig) -> list[str]:
    """``model`` must be a known model (prepared, or its package installed) or a local model dir."""
    from envhub.adapters.engines.models import KNOWN_MODELS, ModelNotAvailableError, find_gguf, resolve_model

    name = config.model.removeprefix("hf:").split("?", 1)[0]
    try:
        resolve_model(config.model, prepare=False)
    except ModelNotAvailableError as exc:
        if name not in KNOWN_MODELS:
            return [f"model: {exc}"]
        try:
            find_gguf(KNOWN_MODELS[name])  # not converted yet, but it can be: the trainer prepares it
        except ModelNotAvailableError as missing:
            return [f"model {name}: {missing}"]
    return []


def _env_error(config: TrainConfig, exc: BaseException) -> PreflightError:
    env = config.env
    args = f" with env.args {env.args}" if env.args else ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return PreflightError(f"env {env.id!r}{args}, split {env.split!r}: {text}")


def open_env(config: TrainConfig, env_factory: Callable[[], Env]) -> Env:
    """The training split's env, or a one-line PreflightError naming what the config got wrong."""
    from envhub.registry import UnknownEnvError

    try:
        return env_factory()
    except UnknownEnvError as exc:
        raise PreflightError(f"env.id: {exc}") from None
    except ENV_ERRORS as exc:
        raise _env_error(config, exc) from None


def split_tasks(config: TrainConfig, env: Env) -> list[str]:
    """The task ids of ``env``'s split (listing them builds a generated env's tasks: a dataset the
    env args name wrongly fails here), or a one-line PreflightError."""
    try:
        return list(env.tasks.task_ids(env.split))
    except ENV_ERRORS as exc:
        raise _env_error(config, exc) from None


def raise_unavailable(problems: list[str]) -> None:
    """What the config names but is not there: one line each."""
    if problems:
        raise PreflightError("\n".join(problems))


def check_config(config: TrainConfig) -> list[str]:
    """Problems visible from the config alone."""
    problems: list[str] = []
    algo, sampling, rollout = config.algorithm, config.sampling, config.rollout
    if (config.steps > 0 or rollout.mode == "async") and rollout.group_size < 2:
        problems.append(f"rollout.group_size is {rollout.group_size}: a group of one sample has zero variance, so "
                        "every advantage is 0 and nothing is learned; use >= 2 (typically 4-16)")
    if config.steps > 0 and sampling.temperature == 0:
        problems.append("sampling.temperature is 0 (greedy): every sample of a group is the same, so every group "
                        "has zero variance; sample with temperature > 0")
    if sampling.top_p < 1.0 or sampling.top_k > 0:
        problems.append("sampling.top_p < 1 or top_k > 0: the trainer scores tokens with temperature only, so the "
                        "importance ratio would be biased; train with top_p 1 and top_k 0")
    if algo.clip_low >= 1.0:
        problems.append(f"algorithm.clip_low is {algo.clip_low}: the lower bound 1 - clip_low <= 0 lets the clipped "
                        "weight reach 0; use a value below 1 (0.2 is usual)")
    clip_high = algo.clip_low if algo.clip_high is None else algo.clip_high
    if algo.loss != "cispo" and algo.clip_low == 0 and clip_high == 0:
        problems.append("algorithm.clip_low and clip_high are 0: the ratio is clipped to 1 on both sides and no "
                        "token moves after the first micro-batch")
    mismatch = algo.mismatch
    if mismatch.mode == "decoupled" and mismatch.weight == "mask" and mismatch.cap <= 1.0:
        problems.append(f"algorithm.mismatch.cap is {mismatch.cap} with weight 'mask': every token whose engine and "
                        "trainer probabilities agree (ratio ~1) would be masked; use a cap above 1 (2 is usual)")
    if mismatch.normalize == "group" and mismatch.mode != "decoupled":
        problems.append("algorithm.mismatch.normalize is group but mode is bypass: there are no importance weights "
                        "to normalize; set algorithm.mismatch.mode: decoupled")
    if sampling.max_new_tokens > rollout.max_response_tokens:
        problems.append(f"sampling.max_new_tokens ({sampling.max_new_tokens}) exceeds rollout.max_response_tokens "
                        f"({rollout.max_response_tokens}): no first turn would fit the response budget")
    if sampling.max_new_tokens >= rollout.max_context:
        problems.append(f"sampling.max_new_tokens ({sampling.max_new_tokens}) leaves no room for a prompt in "
                        f"rollout.max_context ({rollout.max_context})")
    if config.sft is not None:
        problems.extend(check_sft_runs(config))
    problems.extend(missing_packages(tracker_names(config)))  # before any model loads
    if "infra_failure" not in algo.exclude_classes and not algo.train_on_infra:
        problems.append(f"algorithm.exclude_classes is {list(algo.exclude_classes)}: infra outcomes (env_error, "
                        "verifier_error, engine_error) would be trained as reward-0 failures, punishing the policy "
                        "for a broken env, verifier or engine; keep infra_failure in exclude_classes, or set "
                        "algorithm.train_on_infra: true to train on them anyway")
    return problems + check_async(config)


def check_async(config: TrainConfig) -> list[str]:
    """What ``rollout.mode: async`` cannot honour (a group of one is refused for every mode above)."""
    rollout = config.rollout
    if rollout.mode != "async":
        return []
    problems = []
    if rollout.max_staleness < 0:
        problems.append(f"rollout.max_staleness is {rollout.max_staleness}: it is how many weight versions a "
                        "trained sample may lag behind the trainer; use 0 (like sync) or more")
    if rollout.buffer_groups is not None and rollout.buffer_groups < rollout.groups_per_step:
        problems.append(f"rollout.buffer_groups ({rollout.buffer_groups}) is smaller than a batch "
                        f"(rollout.groups_per_step {rollout.groups_per_step}): the trainer would wait forever; "
                        "use at least groups_per_step, or null")
    if rollout.stale_samples == "reweight" and config.algorithm.mismatch.mode != "decoupled":
        problems.append("rollout.stale_samples is reweight but algorithm.mismatch.mode is bypass: stale samples "
                        "are reweighted by the decoupled importance weights; set algorithm.mismatch.mode: "
                        "decoupled, or stale_samples: drop")
    if rollout.dynamic_sampling:
        problems.append("rollout.dynamic_sampling with rollout.mode async: the buffer's groups are already "
                        "sampled ahead; use one or the other")
    return problems


def check_sft_runs(config: TrainConfig) -> list[str]:
    """Each of ``sft.runs`` must be a run directory holding at least one record of an accepted outcome;
    checked from the files alone, before any model loads. The message names the command that makes one."""
    from envhub.run_dir import Run
    from envhub.store import read_jsonl

    assert config.sft is not None
    make = (f"make one with `envhub rollout {config.env.id} --policy gold --split {config.env.split} "
            "--episodes 64 --out DIR` (add the env's --env-arg settings), or a run of a model that succeeds")
    if not config.sft.runs:
        return [f"sft.runs is empty: name run directories with accepted trajectories; {make}"]
    problems, wanted = [], set(config.sft.outcomes)
    for path in config.sft.runs:
        run = Run(path)
        if not run.exists():
            problems.append(f"sft.runs: {path} holds no trajectories ({run.trajectories_path} is missing); {make}")
            continue
        try:
            accepted = any(r.get("outcome") in wanted for r in read_jsonl(run.trajectories_path))
        except (OSError, ValueError) as exc:
            problems.append(f"sft.runs: {run.trajectories_path} cannot be read: {exc}")
            continue
        if not accepted:
            problems.append(f"sft.runs: {path} has no episode with outcome in {sorted(wanted)} "
                            f"(sft.outcomes); {make}")
    return problems


def solved_warning(result: dict[str, Any] | None, *, threshold: float = 0.9) -> str | None:
    """A warning when the eval the GRPO steps start from (after SFT, or before training) already solves
    the tasks: nearly every group would be all-success, zero variance, and GRPO would train nothing."""
    if not result or result.get("strict_success", 0.0) < threshold:
        return None
    return (f"the {result['tag']} eval already solves {result['strict_success']:.0%} of {result['episodes']} "
            f"{result['split']} episodes: most GRPO groups will be all-success (zero variance) and train nothing. "
            "Train on what it solves sometimes: `envhub profile` with this model and env.curriculum, a harder "
            "split or level, fewer SFT steps or examples, or rollout.dynamic_sampling: true")


def config_notes(config: TrainConfig) -> list[str]:
    """What the config does that is not refused but easily misread: the trainer logs each line before
    anything runs."""
    notes = []
    if config.algorithm.kl_coef > 0 and config.sft is not None:
        notes.append(f"algorithm.kl_coef is {config.algorithm.kl_coef} with an SFT stage: the KL reference is the "
                     "policy after SFT (frozen at the start of GRPO), not the base model "
                     f"{config.model}")
    return notes


def check_tasks(config: TrainConfig, split_ids: Sequence[str], curriculum: Sequence[str]) -> list[str]:
    if not split_ids:
        return [f"{config.env.id} has no tasks in split {config.env.split!r}"]
    if config.env.curriculum is not None and not curriculum:
        return [f"the curriculum {config.env.curriculum} lists no task of split {config.env.split!r} "
                "(all-0 and all-1 tasks teach GRPO nothing; profile another split or drop the curriculum)"]
    return []


def check_rendering(env: Env, render: Any, encode: Any, max_context: int, max_new_tokens: int) -> list[str]:
    """The model's chat format must show the tools and leave room for a turn."""
    task_id = env.tasks.task_ids(env.split)[0]
    obs = env.reset(task_id=task_id)
    try:
        try:
            text = render(obs)
        except Exception as exc:
            return [f"the model's chat format cannot render this env's prompt with its tools: {exc!r}"]
        missing = [t.name for t in obs.tools if t.name not in text]
        if missing:
            return [f"the model's chat format drops the tools {missing} from the prompt; the model could never "
                    "call them (use a model whose chat format renders tools)"]
        prompt = len(encode(text))
        if prompt + max_new_tokens > max_context:
            return [f"the first prompt of {env.env_id} is {prompt} tokens; with max_new_tokens {max_new_tokens} it "
                    f"does not fit rollout.max_context {max_context}: every episode would overflow"]
        return []
    finally:
        env.close()


def check_sft(samples: Sequence[Any], stats: dict[str, int], runs: Sequence[str], *, max_new_tokens: int,
              longest_turn: Any) -> list[str]:
    """The SFT examples must exist, and every turn they teach must fit one sampled turn: a model taught
    a 90-token tool call and allowed 64 tokens is cut off before its call closes, every time."""
    if not samples:
        why = f"; {stats['too_long']} are longer than rollout.max_context" if stats.get("too_long") else ""
        return [f"sft: no accepted episode in {runs} ({stats}){why}"]
    longest = max(longest_turn(s) for s in samples)
    if longest - 1 > max_new_tokens:  # a turn may lose its end-of-turn token and still say everything
        return [f"sft: the examples have turns of up to {longest} tokens but sampling.max_new_tokens is "
                f"{max_new_tokens}: the model could never finish the turns it is taught; raise max_new_tokens"]
    return []


def raise_if(problems: list[str]) -> None:
    if problems:
        raise PreflightError("this config would train nothing (or the wrong thing):\n"
                             + "\n".join(f"  - {p}" for p in problems))
