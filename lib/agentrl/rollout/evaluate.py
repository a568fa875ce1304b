"""Phase 01: evaluate (or synthesise trajectories with) a policy over an environment's rows, into
``runs/eval/<name>/``.

``EvalConfig`` is the ``[eval]`` table of a preset: which environment and rows, the policy, the batch, the judge; the
environment's own settings are its table inside (``[eval.search] top_k = 3``). :func:`run_eval` builds the task
(the registered environment's build), the policy and the optional judge from it and runs the batch runner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentrl.core.aio import run_sync
from agentrl.core.config import to_dict
from agentrl.core.io import DataError
from agentrl.core.tracking import log_scalars
from agentrl.core.validate import AtLeast0, AtLeast1, ExistingFile, Moved
from agentrl.envs import registry
from agentrl.envs.registry import EnvTables
from agentrl.rollout.endpoint import EndpointConfig, EndpointPolicy
from agentrl.rollout.judge import JudgeConfig, LLMJudge
from agentrl.rollout.local import LocalConfig, LocalPolicy
from agentrl.rollout.oracle import OraclePolicy
from agentrl.rollout.runner import RunConfig, arun_batch

POLICIES = ("endpoint", "local", "oracle")
# [eval] keys of the past that are an environment's settings now: where each went
MOVED_TO_ENV = {"top_k": "top_k (search)", "max_searches": "max_tool_calls", "passage_chars": "passage_chars (search)",
                "search_method": "search_method (search)", "raw_chunks": "raw_chunks (search)",
                "index": "index (search)", "mcp_url": "mcp_url (search)", "max_query_chars": "max_query_chars (search)",
                "prompt": "prompt", "sql_partial_credit": "partial_credit (sql)", "sql_jaccard": "jaccard (sql)",
                "sql_scoring": "scoring (sql)", "sql_backend": "backend (sql)", "env_args": "<its settings>"}


@dataclass
class EvalConfig:
    """The ``[eval]`` table: which environment and rows, the policy, batch and judge; the environment's settings are
    its table inside it (``[eval.search]``, ``[eval.sql]``: agentrl.envs.<name>'s settings dataclass)."""

    name: str = "eval"
    env: str = registry.DEFAULT  # a registered environment's name, or path/to/my_env.py / package.module[:attr]
    # the rows: a split of the environment (default: its eval_split; "all" when qa is given), then offset / limit
    split: Literal["train", "validation", "heldout", "all"] | None = None
    qa: str | None = None  # a file or a named source replacing the split's (the environment's README)
    offset: AtLeast0 = 0  # rows skipped from the start of the split
    limit: AtLeast1 | None = None  # rows run after the offset (None: the rest)
    policy: Literal["endpoint", "local", "oracle"] = "endpoint"
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    judge: JudgeConfig | None = None
    # an evaluation-only QA file (e.g. MultiHop-RAG's validation-200): none of its items is ever trained on
    # (agentrl.envs.heldout adds them to the preset's held-out set)
    heldout_qa: ExistingFile | None = None
    envs: dict = field(default_factory=dict, metadata={"extra": EnvTables(training=False)})
    moved: dict = field(default_factory=dict, metadata={"extra": Moved({
        k: f"the environment's table: [eval.<env>] {v}" for k, v in MOVED_TO_ENV.items()})})

    def __post_init__(self):
        self.env = registry.checked(self.env).name

    @property
    def env_settings(self):
        """The settings of the environment this run evaluates: its table here, else its defaults."""
        return self.envs.get(self.env) or registry.get(self.env).settings()

    def rows_split(self) -> str:
        """Return the split this run reads: ``split``, else "all" when ``qa`` names a source, else the environment's
        eval_split."""
        return self.split or ("all" if self.qa else registry.get(self.env).eval_split)


def variant(cfg: EvalConfig, **changes) -> EvalConfig:
    """Return a copy of ``cfg`` with ``changes``: EvalConfig fields, plus ``model_path`` / ``adapter`` /
    ``max_new_tokens`` (the local policy's) and ``concurrency`` (the batch's). For the library's own runs built from a
    preset's evaluation (the demo's oracle and base-model runs, GRPO's held-out evaluation)."""
    local = {k: changes.pop(k) for k in ("adapter", "max_new_tokens") if k in changes}
    if "model_path" in changes:
        local["model"] = changes.pop("model_path")
    run = {k: changes.pop(k) for k in ("concurrency",) if k in changes}
    out = dataclasses.replace(cfg, **changes)
    if local:
        out.local = dataclasses.replace(out.local, **local)
    if run:
        out.run = dataclasses.replace(out.run, **run)
    return out


def build_task(cfg: EvalConfig, preset: dict | None = None):
    """Return the Task of the run's environment built from its settings (loading the retriever, connecting to a
    server, ... as the environment needs)."""
    return registry.build_task(registry.get(cfg.env), cfg.env_settings, preset or {})


def build_policy(cfg: EvalConfig, task=None):
    """Return the policy named by ``cfg.policy`` (the oracle follows the task's plan)."""
    # the task's evaluation budget is every policy's tokens per turn (agentrl.envs.registry.build_task)
    tokens = task.max_new_tokens if task is not None and task.max_new_tokens else None
    if cfg.policy == "endpoint":
        return EndpointPolicy(dataclasses.replace(cfg.endpoint, max_tokens=tokens or cfg.endpoint.max_tokens))
    if cfg.policy == "local":
        return LocalPolicy(dataclasses.replace(cfg.local, max_new_tokens=tokens or cfg.local.max_new_tokens))
    if cfg.policy == "oracle":
        if task is None:
            raise DataError("the oracle needs the task whose plan it replays")
        return OraclePolicy(task.oracle_plan)
    raise DataError(f"unknown policy '{cfg.policy}' (choose from {', '.join(POLICIES)})")


def load_rows(cfg: EvalConfig, preset: dict | None = None) -> list[dict]:
    """Return the task rows to run: the environment's rows of the run's split (:meth:`EvalConfig.rows_split`; from
    ``qa`` when given), ``offset``/``limit`` applied."""
    rows = registry.split_rows(registry.get(cfg.env), cfg.rows_split(), cfg.env_settings, preset, cfg.qa)
    rows = rows[cfg.offset:]
    return rows[:cfg.limit] if cfg.limit is not None else rows


def run_eval(cfg: EvalConfig, preset: dict | None = None, *, runs: str | Path = "runs", resume: bool = False,
             overwrite: bool = False, policy=None, task=None, out_dir: str | Path | None = None,
             rows: list[dict] | None = None) -> dict:
    """Run the evaluation into ``runs/eval/<name>/`` (or ``out_dir``) and return its metrics. A run under
    ``runs/eval/<name>/`` also adds its metrics at step n (items done) to ``tensorboard/`` there.

    ``rows`` replaces the rows the config selects (e.g. a hand-picked subset)."""
    task = task or build_task(cfg, preset)
    policy = policy or build_policy(cfg, task)
    rows = rows if rows is not None else load_rows(cfg, preset)
    judge = LLMJudge(cfg.judge) if cfg.judge is not None else None
    out_dir = Path(out_dir) if out_dir else Path(runs) / "eval" / cfg.name
    config = {"eval": {k: v for k, v in to_dict(cfg).items() if k not in ("endpoint", "local", "judge", "envs")},
              "env": to_dict(cfg.env_settings),
              # a user's environment: where it was loaded from, so curation and SFT hold its held-out items too
              "env_source": registry.source_of(cfg.env),
              "budget": registry.budget_of(task),
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
        log_scalars(out_dir / "tensorboard", {**{f"eval/{k}": v for k, v in metrics["overall"].items()},
                                              **{f"tools/{k}": v for k, v in (metrics.get("tools") or {}).items()}},
                    step=metrics["n"])
    return metrics
