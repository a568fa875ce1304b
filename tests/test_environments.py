"""The environment registry: a user's environment outside the package (the complete example of
docs/environments.md, run as written) through eval, curation/export and a GRPO step; typed tool errors."""

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest

from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError
from agentrl.envs import registry
from conftest import ROOT


def example_environment(tmp_path):
    """Write the single Python block under "A complete environment" in docs/environments.md to a file."""
    doc = (ROOT / "docs" / "environments.md").read_text()
    section = doc.split("## A complete environment", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "kv_env.py"
    path.write_text(code)
    return path


def cli(args, cwd, timeout=900):
    r = subprocess.run([sys.executable, "-m", "agentrl.cli", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
    return r


@pytest.mark.slow
def test_the_documented_example_environment_runs_through_eval_export_and_a_grpo_step(tmp_path, tiny_model):
    env_file = example_environment(tmp_path)
    cli(["eval", "--env", str(env_file), "--split", "train", "--policy", "oracle", "--name", "kv_oracle", "--limit",
         "6"], tmp_path)  # demonstrations come from the training split
    metrics = json.loads((tmp_path / "runs" / "eval" / "kv_oracle" / "metrics.json").read_text())
    assert metrics["n"] == 6 and metrics["errors"] == 0 and metrics["overall"]["em"] == 1.0
    first = json.loads((tmp_path / "runs" / "eval" / "kv_oracle" / "trajectories.jsonl").read_text().splitlines()[0])
    assert first["env"] == "kv" and [t["function"]["name"] for t in first["tools"]] == ["get"]
    cli(["curate", "runs/eval/kv_oracle", "--name", "kv_data", "--val-fraction", "0"], tmp_path)
    cli(["export", "runs/data/kv_data"], tmp_path)
    assert len((tmp_path / "runs" / "data" / "kv_data" / "trl" / "train.jsonl").read_text().splitlines()) == 6
    preset = tmp_path / "kv.toml"
    preset.write_text(f'[grpo]\nname = "kv"\nenv = "{env_file}"\nnum_generations = 2\nper_device_train_batch_size = 2\n'
                      'max_steps = 1\nmax_completion_length = 64\nmax_tool_calling_iterations = 2\neval_questions = 2\n'
                      'gradient_checkpointing = false\nreport_to = []\nlog_completions = false\n'
                      f'[grpo.model]\nname = "{tiny_model}"\n'
                      '[eval.kv]\nmax_turns = 3\n')  # the environment's evaluation budget: GRPO's held-out one too
    cli(["grpo", "--config", str(preset)], tmp_path)
    grpo = json.loads((tmp_path / "runs" / "grpo" / "kv" / "metrics.json").read_text())
    assert grpo["steps"] == 1 and grpo["reward_funcs"] == ["kv_correct", "format"]
    assert grpo["evals"][-1]["n"] == 2 and grpo["train_rows"] > 0


def test_a_user_environment_is_found_by_path_and_by_module_name_and_a_wrong_one_is_named(tmp_path, monkeypatch):
    env_file = example_environment(tmp_path)
    spec = registry.get(str(env_file))
    assert spec.name == "kv" and registry.tools(spec) == ("get",) and "kv" in registry.names()
    train, heldout = (registry.split_rows(spec, split, spec.settings()) for split in ("train", "heldout"))
    assert HeldOut([spec.identity(r) for r in heldout]).drop(train, "kv training rows") == train  # no item shared
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.get("kv_env:ENVIRONMENT").name == "kv"
    with pytest.raises(DataError, match="unknown environment 'serch'.*search"):
        registry.get("serch")
    (tmp_path / "empty_env.py").write_text("X = 1\n")
    with pytest.raises(DataError, match="defines no ENVIRONMENT or load_environment"):
        registry.get(str(tmp_path / "empty_env.py"))


def test_a_tools_refusal_and_its_crash_are_told_apart_in_both_loops(tmp_path):
    """Our agent loop records the kind on the message; TRL renders {'error': ...} and the environment remembers."""
    from agentrl.envs.base import call_tool, tool_outcomes

    spec = registry.get(str(example_environment(tmp_path)))
    settings = spec.settings()
    task = spec.build(settings, {})
    row = registry.split_rows(spec, "heldout", settings)[0]
    key = row["metadata"]["keys"][0]
    env = task.make_env()
    env.reset(**row)
    ours = [{"role": "tool", "content": c, **({"error": k} if k else {})} for c, k in (
        asyncio.run(call_tool(env, "get", {"key": key})), asyncio.run(call_tool(env, "get", {"key": "zzz"})),
        asyncio.run(call_tool(env, "get", {"nope": key})), asyncio.run(call_tool(env, "fly", {})))]
    assert tool_outcomes(ours) == [None, "tool_error", "invalid_arguments", "unknown_tool"]
    env.reset(**row)
    trl = []  # what TRL 1.14's tool loop appends: str(result), or str({"error": str(exc)})
    for name, args in (("get", {"key": key}), ("get", {"key": "zzz"}), ("get", {"nope": key}), ("fly", {})):
        try:
            trl.append({"role": "tool", "name": name, "content": str(getattr(env, name)(**args))})
        except Exception as exc:  # noqa: BLE001 - as TRL does
            trl.append({"role": "tool", "name": name, "content": str({"error": str(exc)})})
    assert tool_outcomes(trl, env) == [None, "tool_error", "invalid_arguments", "unknown_tool"]
