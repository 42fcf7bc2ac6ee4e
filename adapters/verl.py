"""veRL integration: an ``AgentLoopBase`` subclass whose episodes are envhub episodes.

veRL's agent-loop worker instantiates a loop per sample (``hydra.utils.instantiate`` of the entry
named by the dataset row's ``agent_name`` in the YAML at
``actor_rollout_ref.rollout.agent.agent_loop_config_path``) and awaits
``run(sampling_params, **row)``. :class:`EnvhubAgentLoop` resets the row's task
(``extra_info.env_id`` / ``extra_info.task_id``), plays it with envhub's model policy -- the
prompt templated once, sampled tokens appended verbatim, env replies appended as masked
template tokens -- and returns ``AgentLoopOutput`` with the verifier's reward as
``reward_score``. Generation goes through veRL's own ``server_manager`` (its vLLM / SGLang
replicas, sticky per episode), bridged to envhub's synchronous Engine protocol; the episode runs
in a worker thread so veRL's event loop keeps serving other samples.

The episode is bounded so that its whole response -- sampled tokens *and* env-reply tokens --
fits ``rollout.response_length``: the policy's context is ``len(prompt_ids) + response_length``,
fixed once the prompt is rendered, and each turn may sample at most what is left of it. An
episode that runs out of room ends as ``context_overflow`` (reward 0), as veRL's
``ToolAgentLoop`` stops at ``response_length``. A prompt longer than ``rollout.prompt_length`` is
refused with a :class:`ValueError` (veRL's dataset does the same with ``truncation="error"``),
never played and never reported as an env failure. Should a response still come back longer
(a server that ignores ``max_tokens``), it is cut to ``response_length`` as veRL's own loops do,
marked ``extra_fields["envhub"]["truncated_response"]``, and scored 0: the verifier judged the
uncut episode, not the one the trainer sees. Write the YAML and a task dataset with
``envhub export RUN --format verl`` or :func:`envhub.adapters.export.verl.agent_loop_yaml`.

:class:`EnvhubRLHFDataset` (``data.custom_cls.path=pkg://envhub.adapters.verl
data.custom_cls.name=EnvhubRLHFDataset``) is veRL's ``RLHFDataset`` whose ``max_prompt_length``
filter measures each row's prompt exactly as the loop will render it -- with the env's tools --
so the rows it keeps are the ones the loop can play.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.utils.dataset.rl_dataset import RLHFDataset

from envhub.adapters.chat_format import chat_format_for
from envhub.adapters.export.verl import TOOLS_KEY, to_agent_loop_output
from envhub.adapters.model_policy import ModelAgent, ModelPolicy
from envhub.errors import EngineError
from envhub.types import Message, Observation, ToolSpec, TrajectoryRecord


class ServerManagerEngine:
    """envhub's Engine protocol over veRL's async ``server_manager.generate``.

    ``generate`` is called from the episode's worker thread and waits on the event loop that
    owns the server manager. One request id per episode keeps veRL's sticky routing (and its
    prefix cache) on one replica.
    """

    name = "verl"

    def __init__(self, server_manager: Any, loop: asyncio.AbstractEventLoop, *, max_context: int,
                 request_id: str, base_params: dict[str, Any]) -> None:
        self.server_manager, self.loop, self.max_context = server_manager, loop, max_context
        self.request_id, self.base_params = request_id, base_params
        self.logprobs_missing = False
        self.generate_seconds = 0.0
        self.preempted = 0

    @property
    def weight_version(self) -> str | None:
        return None

    def generate(self, prompt_ids: list[int], params: Any) -> Any:
        from envhub.adapters.engines import GenerateResult

        sampling = {
            **self.base_params,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "max_tokens": params.max_new_tokens,
            "logprobs": True,
        }
        if params.stop_token_ids:
            sampling["stop_token_ids"] = list(params.stop_token_ids)
        if params.stop:
            sampling["stop"] = list(params.stop)
        t0 = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(
            self.server_manager.generate(request_id=self.request_id, prompt_ids=list(prompt_ids),
                                         sampling_params=sampling), self.loop)
        try:
            out = future.result()
        except Exception as exc:
            raise EngineError(f"veRL server manager failed: {exc!r}") from exc
        finally:
            self.generate_seconds += time.monotonic() - t0
        ids = [int(t) for t in out.token_ids]
        logprobs = getattr(out, "log_probs", None)
        if logprobs is None:
            self.logprobs_missing = True
            logprobs = [0.0] * len(ids)
        if getattr(out, "num_preempted", None):
            self.preempted += int(out.num_preempted)
        stop_reason = getattr(out, "stop_reason", None)
        if stop_reason == "aborted":
            reason = "abort"
        elif ids and ids[-1] in params.stop_token_ids:
            reason = "stop"
        elif len(ids) >= params.max_new_tokens:
            reason = "length"
        else:
            reason = "stop"
        return GenerateResult(ids, [float(x) for x in logprobs], reason, None, {"verl_stop_reason": stop_reason})

    def close(self) -> None:
        pass


class PromptTooLongError(ValueError):
    """The rendered prompt does not fit ``rollout.prompt_length``."""


class _BoundedPolicy(ModelPolicy):
    """One episode's policy: its context is the prompt plus ``response_length``, set at start, and
    each turn samples at most what is left of it (``fit_turns``)."""

    def __init__(self, *args: Any, prompt_length: int, response_length: int, **kwargs: Any) -> None:
        super().__init__(*args, fit_turns=True, **kwargs)
        self.prompt_length, self.response_length = prompt_length, response_length
        self.rejected: str | None = None

    def start(self, env: Any, observation: Observation, *, seed: int) -> ModelAgent:
        agent = ModelAgent(self, observation, seed)
        n = len(agent.prompt_ids)
        if n > self.prompt_length:
            self.rejected = (f"task {env.episode.task.task_id if env.episode else '?'}: the rendered prompt has "
                             f"{n} tokens > rollout.prompt_length {self.prompt_length}; raise prompt_length or "
                             "leave the task out of the dataset")
            raise PromptTooLongError(self.rejected)
        self.max_context = n + self.response_length
        return agent


class EnvhubAgentLoop(AgentLoopBase):
    """``AgentLoopBase`` that runs one envhub episode per sample (see the module docstring).

    Options (extra keys of its YAML entry): ``env_id`` (when rows carry none), ``env_kwargs``,
    ``split``, ``max_new_tokens`` (per turn; default: ``rollout.response_length``; a turn never
    samples more than what is left of ``response_length``).
    """

    def __init__(self, *args: Any, env_id: str | None = None, env_kwargs: dict[str, Any] | None = None,
                 split: str = "train", max_new_tokens: int | None = None, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.split = split
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.max_new_tokens = int(max_new_tokens or self.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        from envhub.adapters.engines import SamplingParams

        extra = dict(kwargs.get("extra_info") or {})
        env_id = extra.get("env_id") or self.env_id
        task_id = extra.get("task_id")
        if not env_id or not task_id:
            raise ValueError("envhub agent loop: the dataset row needs extra_info.env_id and extra_info.task_id "
                             "(write the dataset with `envhub export RUN --format verl`)")
        loop = asyncio.get_running_loop()
        request_id = uuid.uuid4().hex
        engine = ServerManagerEngine(
            self.server_manager, loop, max_context=self.prompt_length + self.response_length,
            request_id=request_id,
            base_params={k: v for k, v in sampling_params.items() if k in ("repetition_penalty",)},
        )
        temperature = float(sampling_params.get("temperature", 1.0))
        params = SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=max(temperature, 0.0),
            top_p=float(sampling_params.get("top_p", 1.0) or 1.0),
            top_k=max(int(sampling_params.get("top_k", -1) or -1), 0),
        )
        policy = _BoundedPolicy(engine, self.tokenizer, params=params, max_context=engine.max_context,
                                name="verl", model_id="verl", prompt_length=self.prompt_length,
                                response_length=self.response_length)
        seed = int(hashlib.sha1(f"{task_id}|{request_id}".encode()).hexdigest()[:8], 16)
        record = await loop.run_in_executor(None, self._play, env_id, task_id, policy, seed, request_id)
        if policy.rejected is not None:  # a configuration problem, not an env failure: never a sample
            raise PromptTooLongError(f"envhub agent loop: {policy.rejected}")
        return self.to_output(record, engine)

    def _play(self, env_id: str, task_id: str, policy: Any, seed: int, episode_id: str) -> TrajectoryRecord:
        from envhub.registry import make
        from envhub.rollout.runner import EpisodePlan, run_episode

        env = make(env_id, split=self.split, **self.env_kwargs)
        try:
            plan = EpisodePlan(episode_id=episode_id, group_id=task_id, task_id=task_id, sample_index=0, seed=seed)
            return run_episode(env, policy, plan, {"policy": policy.name, **policy.describe()})
        finally:
            env.close()

    def to_output(self, record: TrajectoryRecord, engine: ServerManagerEngine) -> AgentLoopOutput:
        # the offline export's fields (cut to response_length, a cut response earns nothing, an
        # infra failure trains nothing) with this run's engine metrics
        fields = to_agent_loop_output(record, response_length=self.response_length)
        meta = fields["extra_fields"]["envhub"] | {
            "truncated_response": fields["extra_fields"]["truncated_response"],
            "reward": record.reward,  # the verifier's, of the uncut episode
            "logprobs_missing": engine.logprobs_missing,
        }
        return AgentLoopOutput(
            prompt_ids=fields["prompt_ids"],
            response_ids=fields["response_ids"],
            response_mask=fields["response_mask"],
            response_logprobs=None if engine.logprobs_missing else fields["response_logprobs"],
            reward_score=fields["reward_score"],
            num_turns=fields["num_turns"],
            metrics=AgentLoopMetrics(
                generate_sequences=engine.generate_seconds,
                tool_calls=record.metrics.sandbox_seconds,
                compute_score=record.metrics.verifier_seconds,
                num_preempted=engine.preempted,
            ),
            extra_fields={"envhub": meta, "turn_scores": [], "tool_rewards": []},
        )


def rendered_prompt_length(tokenizer: Any, row: dict[str, Any], prompt_key: str = "prompt") -> int | None:
    """Tokens of ``row``'s prompt as :class:`EnvhubAgentLoop` renders it (the env's messages with its
    tools, the model's chat template, the generation prompt); None for a row without envhub's tools."""
    tools = (row.get("extra_info") or {}).get(TOOLS_KEY)
    if tools is None:
        return None
    messages = [Message(role=m["role"], content=m["content"]) for m in row[prompt_key]]
    specs = [ToolSpec.model_validate(t) for t in json.loads(tools)]
    text = chat_format_for(tokenizer).render_prompt(tokenizer, messages, specs)
    return len(tokenizer.encode(text, add_special_tokens=False))


class EnvhubRLHFDataset(RLHFDataset):
    """veRL's ``RLHFDataset`` with a ``max_prompt_length`` filter that measures envhub rows as the
    loop renders them (see the module docstring); other rows are measured as veRL does."""

    def maybe_filter_out_long_prompts(self, dataframe: Any = None) -> Any:
        # veRL's measure first (it templates without the env's tools, so it never counts an envhub
        # row too long); then envhub rows again, as the loop renders them
        kept = super().maybe_filter_out_long_prompts(dataframe)
        if not self.filter_overlong_prompts:
            return kept
        tokenizer, key, limit = self.tokenizer, self.prompt_key, self.max_prompt_length
        kept = kept.filter(lambda doc: (rendered_prompt_length(tokenizer, doc, key) or 0) <= limit,
                           desc=f"Filtering prompts longer than {limit} tokens as envhub renders them")
        print(f"filter dataset len (envhub's rendering): {len(kept)}")
        return kept
