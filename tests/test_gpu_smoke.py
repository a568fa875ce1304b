"""scripts/gpu_smoke.sh runs only on a GPU machine; here: its syntax, shellcheck, the plan it prints with each
step's time limit, and a step that runs over its time killed and reported as a failed TIMEOUT row."""

import shutil
import subprocess

import pytest

from conftest import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_parse_and_pass_shellcheck(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (.ci/run installs it)")
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_gpu_smoke_dry_run_prints_every_step_and_runs_nothing():
    logs = ROOT / "runs" / "gpu_smoke"
    existed = logs.exists()
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh"), "--dry-run"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["install", "data", "sft", "grpo", "serve", "eval"]
    assert sum(int(r[1]) for r in rows) <= 900 and "deadline 900 s" in proc.stdout  # the 15 minutes it promises
    assert "--max-lora-rank 64" in proc.stdout and "--limit 20" in proc.stdout and "agentrl.colab setup" in proc.stdout
    assert logs.exists() == existed  # the dry run wrote nothing


def test_a_step_that_runs_over_its_time_is_killed_and_reported_as_a_failed_timeout_row(tmp_path):
    """A copy of the script on a machine whose nvidia-smi and Python are stand-ins: the install step's "Python"
    sleeps for a minute, the run's deadline is 2 s, so the step is killed at 2 s and every later step is skipped."""
    import os

    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("nvidia-smi", "echo 'Tesla T4, 580.82.07, 7.5, 15360'"), ("slow-python", "sleep 60")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "SMOKE_PYTHON": str(bin_dir / "slow-python"), "SMOKE_TOTAL": "2"}
    # killed at the deadline, not after the minute the step wanted (subprocess.run would raise TimeoutExpired)
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "gpu_smoke.sh")], env=env, capture_output=True,
                          text=True, timeout=50)
    table = {line.split()[0]: line.split()[1] for line in proc.stdout.split("step ")[-1].splitlines()[1:]}
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert table == {"install": "TIMEOUT", "data": "SKIP", "sft": "SKIP", "grpo": "SKIP", "serve": "SKIP",
                     "eval": "SKIP", "total": "FAIL"}
    assert (tmp_path / "runs" / "gpu_smoke" / "install.log").exists()


def test_gpu_smoke_refuses_unknown_arguments():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh"), "--fast"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument" in proc.stderr


def test_gpu_smoke_preset_steps_match_what_the_script_checks():
    from agentrl.core.config import load_preset
    from agentrl.train.grpo import grpo_config
    from agentrl.train.sft import sft_config

    preset = load_preset("gpu_smoke")
    sft, grpo = sft_config(preset), grpo_config(preset)
    assert (sft.max_steps, grpo.max_steps, sft.model.backend, grpo.model.fast_inference) == (20, 5, "unsloth", True)
    assert grpo.adapter == f"runs/sft/{sft.name}/adapter" and sft.name == "gpu-smoke"
    assert preset["eval"]["endpoint"]["model"] == "smoke"
