"""Phase 01: evaluate (or synthesise trajectories with) a policy over a QA set, into ``runs/eval/<name>/``.

``EvalConfig`` is the ``[eval]`` table of a preset; :func:`run_eval` builds the task (the registered environment's
build: environment + prompt), the policy and the optional judge from it and runs the batch runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentrl.core.io import DataError
from agentrl.envs import registry
from agentrl.envs.task import EPISODE_KEYS, EpisodeSettings
from agentrl.rollout.endpoint import EndpointConfig
from agentrl.rollout.judge import JudgeConfig
from agentrl.rollout.local import LocalConfig
from agentrl.rollout.runner import RunConfig

POLICIES = ("endpoint", "local", "oracle")


@dataclass
class EvalConfig(EpisodeSettings):
    """Everything an evaluation run needs besides the preset's corpus: the episode settings (EpisodeSettings: top_k,
    max_searches, prompt, ...) and which rows, policy, batch and judge."""

    name: str = "eval"
    qa: str | None = None  # a file or a named source of the env's rows (its README); default its eval rows
    limit: int | None = None
    offset: int = 0
    env: str = registry.DEFAULT  # a registered environment's name, or path/to/my_env.py / package.module[:attr]
    policy: str = "endpoint"
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    judge: JudgeConfig | None = None
    # an evaluation-only QA file (e.g. MultiHop-RAG's validation-200): none of its items is ever trained on
    # (agentrl.train.heldout drops them from curation, SFT and GRPO)
    heldout_qa: str | None = None


# EvalConfig fields a command-line flag of the same name sets
_OWN_KEYS = (*EPISODE_KEYS, "name", "qa", "limit", "offset", "env", "policy")
# every key eval_config takes: those, and the endpoint / local / batch / judge flags it maps to nested fields
OVERRIDES = (*_OWN_KEYS, "base_url", "model", "api_key", "temperature", "top_p", "max_tokens", "endpoint_transport",
             "extra_body", "retries", "model_path", "adapter", "concurrency", "max_turns", "timeout", "judge_model",
             "judge_base_url")


def eval_config(preset: dict | None = None, **overrides) -> EvalConfig:
    """Return the preset's ``[eval]`` config with flag-style overrides applied (None values are ignored).

    Keys: any EvalConfig field; endpoint ``base_url, model, api_key, temperature, top_p, max_tokens,
    extra_body`` (JSON text or dict), ``retries``, ``endpoint_transport``; local ``model_path, adapter``; batch
    ``concurrency, max_turns, timeout``; judge ``judge_model, judge_base_url``. Any other key is a DataError. An
    environment with ``min_turns`` (a text game's gold path is 7+ actions) gets at least that many turns unless
    ``max_turns`` is given.
    """
    import json

    from agentrl.core.config import from_dict

    cfg = from_dict(EvalConfig, (preset or {}).get("eval"), "eval")
    o = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(o) - set(OVERRIDES))
    if unknown:
        raise DataError(f"eval_config: unknown setting '{unknown[0]}' (known: {', '.join(OVERRIDES)})")
    for key in _OWN_KEYS:
        if key in o:
            setattr(cfg, key, o[key])
    for key in ("base_url", "model", "api_key", "temperature", "top_p", "max_tokens"):
        if key in o:
            setattr(cfg.endpoint, key, o[key])
    if "endpoint_transport" in o:
        cfg.endpoint.transport = o["endpoint_transport"]
    if "extra_body" in o:
        body = o["extra_body"]
        try:
            cfg.endpoint.extra_body = body if isinstance(body, dict) else json.loads(body)
        except json.JSONDecodeError as exc:
            raise DataError(f"--extra-body is not valid JSON ({exc})") from None
    if "retries" in o:
        cfg.endpoint.max_retries = o["retries"]
    if "model_path" in o:
        cfg.local.model = o["model_path"]
    if "adapter" in o:
        cfg.local.adapter = o["adapter"]
    for key, attr in (("concurrency", "concurrency"), ("max_turns", "max_turns"), ("timeout", "item_timeout")):
        if key in o:
            setattr(cfg.run, attr, o[key])
    spec = registry.get(cfg.env)
    cfg.env = spec.name
    if "max_turns" not in o:
        cfg.run.max_turns = max(cfg.run.max_turns, spec.min_turns)
    if "judge_model" in o:
        cfg.judge = cfg.judge or JudgeConfig()
        cfg.judge.model = o["judge_model"]
        cfg.judge.base_url = o.get("judge_base_url", cfg.judge.base_url)
    return cfg


def build_task(cfg: EpisodeSettings, preset: dict | None = None, env: str | None = None):
    """Return the Task of environment ``env`` (default ``cfg.env``) built from the episode settings ``cfg``
    (loading the retriever, connecting to a server, ... as the environment needs)."""
    return registry.get(env or cfg.env).build(cfg, preset or {})


def build_policy(cfg: EvalConfig, task=None):
    """Return the policy named by ``cfg.policy`` (the oracle follows the task's plan)."""
    if cfg.policy == "endpoint":
        from agentrl.rollout.endpoint import EndpointPolicy

        return EndpointPolicy(cfg.endpoint)
    if cfg.policy == "local":
        from agentrl.rollout.local import LocalPolicy

        return LocalPolicy(cfg.local)
    if cfg.policy == "oracle":
        from agentrl.rollout.oracle import OraclePolicy

        if task is None:
            raise DataError("the oracle needs the task whose plan it replays")
        return OraclePolicy(task.oracle_plan)
    raise DataError(f"unknown policy '{cfg.policy}' (choose from {', '.join(POLICIES)})")


def load_rows(cfg: EvalConfig, preset: dict | None = None) -> list[dict]:
    """Return the task rows to run: the environment's eval rows (or those of ``cfg.qa``), ``offset``/``limit``
    applied."""
    n = cfg.offset + (cfg.limit if cfg.limit is not None else registry.GENERATED_ROWS)  # what a generator makes
    rows = registry.get(cfg.env).rows("eval", cfg.qa, n, preset or {})
    rows = rows[cfg.offset:]
    return rows[:cfg.limit] if cfg.limit is not None else rows


def run_eval(cfg: EvalConfig, preset: dict | None = None, *, runs: str | Path = "runs", resume: bool = False,
             overwrite: bool = False, policy=None, task=None, out_dir: str | Path | None = None,
             rows: list[dict] | None = None) -> dict:
    """Run the evaluation into ``runs/eval/<name>/`` (or ``out_dir``) and return its metrics. A run under
    ``runs/eval/<name>/`` also adds its metrics at step n (items done) to ``tensorboard/`` there.

    ``rows`` replaces the rows the config selects (e.g. a hand-picked subset)."""
    from agentrl.core.aio import run_sync
    from agentrl.core.config import to_dict
    from agentrl.rollout.runner import arun_batch

    task = task or build_task(cfg, preset)
    policy = policy or build_policy(cfg, task)
    rows = rows if rows is not None else load_rows(cfg, preset)
    judge = None
    if cfg.judge is not None:
        from agentrl.rollout.judge import LLMJudge

        judge = LLMJudge(cfg.judge)
    out_dir = Path(out_dir) if out_dir else Path(runs) / "eval" / cfg.name
    config = {"eval": {k: v for k, v in to_dict(cfg).items() if k not in ("endpoint", "local", "judge")},
              "judge": judge.describe() if judge else None}

    async def annotate(traj: dict) -> None:
        verdict = await judge.judge(traj["question"], traj["golden_answers"], traj["prediction"])
        traj["metrics"]["judge"] = float(verdict["correct"])
        traj["judge"] = {k: verdict[k] for k in ("status", "attempts")}

    async def main():
        try:
            return await arun_batch(policy, task, rows, out_dir, cfg.run, resume=resume, overwrite=overwrite,
                                    manifest_config=config, inputs={"qa": cfg.qa or "preset"},
                                    annotate=annotate if judge else None,
                                    extra_secrets=judge.secrets if judge else ())
        finally:
            if judge is not None:
                await judge.aclose()

    metrics = run_sync(main())
    if out_dir == Path(runs) / "eval" / cfg.name:  # a phase-01 run: its metrics over the items done, in TensorBoard
        from agentrl.core.tracking import log_scalars

        log_scalars(out_dir / "tensorboard", {**{f"eval/{k}": v for k, v in metrics["overall"].items()},
                                              **{f"tools/{k}": v for k, v in (metrics.get("tools") or {}).items()}},
                    step=metrics["n"])
    return metrics
