"""`agentrl demo` end to end on a shrunk demo preset, in a scratch directory: every phase, then a clean rerun;
and the envs_demo preset's documented commands (text game, math, code, mixed: oracle -> SFT -> GRPO)."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, small_preset


@pytest.mark.slow
def test_demo_runs_every_phase_and_reruns_cleanly(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "data").symlink_to(ROOT / "data")
    (tmp_path / "configs" / "small.toml").write_text(small_preset((ROOT / "configs" / "demo.toml").read_text()))
    cmd = [sys.executable, "-m", "agentrl.cli", "demo", "--config", "small"]
    env = {**os.environ, "COLUMNS": "200"}
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stderr[-3000:]
    for phase in ("00 corpus", "01 eval", "01 eval sql", "01 eval textgame", "01 eval math", "01 eval code",
                  "02 data", "03 sft", "04 grpo"):
        assert phase in first.stdout, first.stdout
    # every environment's oracle row succeeded on every item (what the summary prints, from its metrics)
    for run, key, n in (("sql_oracle", "em", 12), ("textgame_oracle", "em", 4), ("math_oracle", "em", 8),
                        ("code_oracle", "em", 6)):
        metrics = json.loads((tmp_path / "runs" / "eval" / run / "metrics.json").read_text())
        assert metrics["n"] == n and metrics["errors"] == 0 and metrics["overall"][key] == 1.0, (run, metrics)
    lines = first.stdout.splitlines()
    for name in ("textgame", "math", "code"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"01 eval {name} "))
        assert "oracle success 1 " in lines[at + 1] + " ", lines[at:at + 2]
    for path in ("runs/corpus/hotpotqa_sample/index/index.json", "runs/eval/oracle/metrics.json",
                 "runs/eval/sql_oracle/metrics.json", "runs/eval/textgame_oracle/metrics.json",
                 "runs/eval/math_oracle/metrics.json", "runs/eval/code_oracle/metrics.json",
                 "runs/data/sft_demo/trl/train.jsonl",
                 "runs/sft/sft_demo/adapter/adapter_config.json", "runs/grpo/grpo_demo/metrics.json"):
        assert (tmp_path / path).exists(), path
    # the summary says what the held-out questions say, rising or not
    at = next(i for i, line in enumerate(lines) if line.startswith("04 grpo "))
    assert "held-out f1 first→last eval" in lines[at + 1], lines[at:at + 2]
    assert "held-out f1 base→sft" in next(lines[i + 1] for i, line in enumerate(lines) if line.startswith("03 sft "))
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "04 grpo" in again.stdout


def documented_commands() -> list[list[str]]:
    """The command lines in the envs_demo preset's header, as argument lists; `--env X  # or Y, Z (...)` gives one
    command per env."""
    out = []
    for line in (ROOT / "configs" / "envs_demo.toml").read_text().splitlines():
        m = re.match(r"#\s+uv run agentrl ([^#]*)(?:#\s*(.*))?$", line)
        if not m:
            continue
        cmd = shlex.split(m.group(1))
        out.append(cmd)
        alternatives = re.match(r"or ([\w, ]+)", m.group(2) or "")
        if alternatives and "--env" in cmd:
            k = cmd.index("--env") + 1
            out += [[*cmd[:k], env.strip(), *cmd[k + 1:]] for env in alternatives.group(1).split(",")]
    return out


@pytest.mark.slow
def test_the_envs_presets_documented_commands_run_sft_and_grpo_on_every_new_env(tmp_path, tiny_model, small_index):
    commands = documented_commands()
    assert [c[0] for c in commands] == ["tiny-model", "eval", "eval", "eval", "curate", "export", "sft", "grpo",
                                        "grpo", "grpo", "grpo"]
    assert [c[c.index("--env") + 1] for c in commands if c[0] == "grpo"] == ["textgame", "math", "code", "mixed"]
    (tmp_path / "configs").mkdir()
    (tmp_path / "data").symlink_to(ROOT / "data")
    (tmp_path / "runs" / "models").mkdir(parents=True)
    (tmp_path / "runs" / "models" / "tiny").symlink_to(tiny_model)
    preset = (ROOT / "configs" / "envs_demo.toml").read_text()
    member = re.search(r"^\[grpo\.mixed\.search\][^\n]*\n", preset, re.M)  # the mixture's search member
    assert member and preset.count("[grpo.mixed.search]") == 1
    preset = preset.replace(member.group(0), f'{member.group(0)}index = "{small_index}"\n')
    (tmp_path / "configs" / "envs_demo.toml").write_text(preset)
    env = {**os.environ, "COLUMNS": "200"}
    for cmd in commands[1:]:  # the tiny model is the session's
        cmd = [re.sub(r"^\d+$", "3", a) if i and cmd[i - 1] == "--limit" else a for i, a in enumerate(cmd)]
        cmd += {"sft": ["--max-steps", "3"], "grpo": ["--max-steps", "1", "--eval-questions", "1"]}.get(cmd[0], [])
        if cmd[0] == "grpo":  # one run per environment (the preset's [grpo] name is the text game's)
            cmd += ["--name", f"grpo_envs_{cmd[cmd.index('--env') + 1]}"]
        r = subprocess.run([sys.executable, "-m", "agentrl.cli", *cmd], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=1200)
        assert r.returncode == 0, (cmd, r.stderr[-3000:])
    for env_name, reward in (("textgame", "game_score"), ("math", "math_correct"), ("code", "code_pass"),
                             ("mixed", "task_success")):
        metrics = json.loads((tmp_path / "runs" / "grpo" / f"grpo_envs_{env_name}" / "metrics.json").read_text())
        assert metrics["steps"] == 1 and metrics["reward_funcs"] == [reward, "format"], metrics
        assert metrics["evals"][-1]["n"] == 1
