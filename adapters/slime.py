"""slime integration: a custom generate function that plays envhub episodes.

slime calls ``--custom-generate-function-path envhub.adapters.slime.generate`` as
``await generate(args, sample, sampling_params)`` (``evaluation=`` on eval rollouts) and expects
the same ``Sample`` back with ``tokens`` (prompt + response), ``response_length``, ``loss_mask``
and ``rollout_log_probs`` (both of response length), ``reward`` and ``status``. Here the sample's
task (``sample.metadata["envhub"]`` or ``sample.metadata``: ``env_id``, ``task_id``) is played
by envhub's model policy over slime's SGLang router (``POST /generate`` with ``input_ids`` and
``return_logprob``, via :class:`envhub.adapters.engines.sglang_client.SGLangEngine`), so the
record is token in, token out, and the verifier's reward is set on the sample -- slime then skips
its reward model. :func:`reward` is a ``--custom-rm-path`` for setups that still call one.

The episode runs in a worker thread (envhub's env and policy are synchronous); slime's event loop
keeps generating other samples meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable
from typing import Any

from envhub.adapters.export.common import envhub_metadata, trainable_mask
from envhub.adapters.export.slime import sample_status
from envhub.types import OutcomeClass, TrajectoryRecord


def task_of(metadata: dict[str, Any] | None) -> tuple[str, str, dict[str, Any]]:
    """``(env_id, task_id, env_kwargs)`` from a sample's metadata (``envhub`` sub-dict or top level)."""
    meta = dict(metadata or {})
    inner = meta.get("envhub") if isinstance(meta.get("envhub"), dict) else meta
    env_id, task_id = inner.get("env_id"), inner.get("task_id")
    if not env_id or not task_id:
        raise ValueError("an envhub sample needs metadata with env_id and task_id "
                         "(write prompts with `envhub export RUN --format slime`)")
    return str(env_id), str(task_id), dict(inner.get("env_kwargs") or {})


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@functools.lru_cache(maxsize=8)
def _engine(url: str, max_context: int | None) -> Any:
    # slime calls us with its router address: we build our SGLang engine around it
    from envhub.adapters.engines.factory import make_engine

    return make_engine(f"sglang:{url}", max_context=max_context)


def router_engine(args: Any) -> Any:
    """slime's / Miles' SGLang router as an envhub Engine."""
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    return _engine(url, getattr(args, "rollout_max_context_len", None))


def model_policy(args: Any, sampling_params: dict[str, Any], *, engine: Any = None, tokenizer: Any = None) -> Any:
    """envhub's model policy over the router, with slime's sampling params for each turn."""
    from envhub.adapters.engines import SamplingParams
    from envhub.adapters.model_policy import ModelPolicy

    engine = engine or router_engine(args)
    tokenizer = tokenizer or _tokenizer(str(args.hf_checkpoint))
    top_k = int(sampling_params.get("top_k", -1) or -1)
    params = SamplingParams(
        max_new_tokens=int(sampling_params.get("max_new_tokens") or getattr(args, "rollout_max_response_len", 256)),
        temperature=float(sampling_params.get("temperature", 1.0)),
        top_p=float(sampling_params.get("top_p", 1.0) or 1.0),
        top_k=top_k if top_k > 0 else 0,
        stop=tuple(sampling_params.get("stop") or ()),
    )
    return ModelPolicy(engine, tokenizer, params=params, name="slime", model_id=str(getattr(args, "hf_checkpoint", "")))


def play(env_id: str, task_id: str, policy: Any, *, env_kwargs: dict[str, Any] | None = None,
         episode_id: str = "", seed: int = 0, split: str = "train") -> TrajectoryRecord:
    """One envhub episode of ``task_id`` with ``policy`` (synchronous)."""
    from envhub.registry import make
    from envhub.rollout.runner import EpisodePlan, run_episode

    env = make(env_id, split=split, **(env_kwargs or {}))
    try:
        plan = EpisodePlan(episode_id=episode_id or f"slime-{task_id}-{seed}", group_id=task_id, task_id=task_id,
                           sample_index=0, seed=seed)
        return run_episode(env, policy, plan, {"policy": policy.name, **policy.describe()})
    finally:
        env.close()


def fill_sample(sample: Any, record: TrajectoryRecord) -> Any:
    """Write an episode into a slime/Miles ``Sample`` in place (see the module docstring).

    Infra failures keep their tokens but get an all-zero ``loss_mask`` and ``remove_sample``:
    our failure must never become the model's gradient.
    """
    infra = record.outcome_class is OutcomeClass.INFRA_FAILURE
    sample.tokens = list(record.prompt_ids) + list(record.response_ids)
    sample.response_length = len(record.response_ids)
    sample.response = "".join(t.action_text for t in record.turns)
    sample.loss_mask = trainable_mask(record)
    sample.rollout_log_probs = list(record.response_logprobs)
    sample.reward = float(record.reward)
    sample.weight_versions = [v for v in record.versions.weight_versions if v is not None]
    status_cls = type(sample).Status
    sample.status = status_cls(sample_status(record.outcome))
    sample.remove_sample = bool(infra)
    sample.metadata = {**(sample.metadata or {}), "envhub": {**envhub_metadata(record), "reward": record.reward}}
    return sample


def _seed(sample: Any, task_id: str) -> int:
    key = f"{task_id}|{getattr(sample, 'group_index', None)}|{getattr(sample, 'index', None)}"
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)


async def play_sample(args: Any, sample: Any, sampling_params: dict[str, Any], *,
                      policy_factory: Callable[..., Any] = model_policy) -> Any:
    env_id, task_id, env_kwargs = task_of(sample.metadata)
    policy = policy_factory(args, sampling_params)
    seed = _seed(sample, task_id)
    record = await asyncio.to_thread(play, env_id, task_id, policy, env_kwargs=env_kwargs, seed=seed,
                                     episode_id=f"slime-{getattr(sample, 'index', None)}-{seed:08x}")
    return fill_sample(sample, record)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's ``--custom-generate-function-path`` (see the module docstring)."""
    return await play_sample(args, sample, sampling_params)


async def reward(args: Any, sample: Any, **kwargs: Any) -> float:
    """slime's ``--custom-rm-path``: the verifier's reward recorded by the episode."""
    meta = (sample.metadata or {}).get("envhub") or {}
    if "reward" not in meta:
        raise ValueError("this sample was not played by envhub's generate or agent function")
    return float(meta["reward"])
