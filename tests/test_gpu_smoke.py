"""scripts/gpu_smoke.sh runs only on a GPU machine; here: its syntax, shellcheck, and the plan it prints."""

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
    steps = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert steps == ["install", "data", "sft", "grpo", "serve", "eval"]
    assert "--max-lora-rank 64" in proc.stdout and "--limit 20" in proc.stdout and "agentrl.colab setup" in proc.stdout
    assert logs.exists() == existed  # the dry run wrote nothing


def test_gpu_smoke_refuses_unknown_arguments():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh"), "--fast"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument" in proc.stderr


def test_gpu_smoke_preset_steps_match_what_the_script_checks():
    from agentrl.config import load_preset
    from agentrl.train.grpo import grpo_config
    from agentrl.train.sft import sft_config

    preset = load_preset("gpu_smoke")
    sft, grpo = sft_config(preset), grpo_config(preset)
    assert (sft.max_steps, grpo.max_steps, sft.model.backend, grpo.model.fast_inference) == (20, 5, "unsloth", True)
    assert grpo.adapter == f"runs/sft/{sft.name}/adapter" and sft.name == "gpu-smoke"
    assert preset["eval"]["endpoint"]["model"] == "smoke"
