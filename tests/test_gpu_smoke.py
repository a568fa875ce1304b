"""scripts/gpu_smoke.sh runs only on a GPU machine; here: its syntax, shellcheck, the plan it prints with each
step's time limit (its own environment, the exported notebooks' setup cell, the T4-shaped SFT and GRPO with a kill
and --resume, TRL's colocated vLLM, the environment's vllm), a step that runs over its time killed and reported as a
failed TIMEOUT row, and the presets it runs."""

import os
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
    env = {k: v for k, v in os.environ.items() if k != "SMOKE_PYTHON"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh"), "--dry-run"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split(None, 3)[1:] for line in proc.stdout.splitlines()[1:]}
    assert list(rows) == ["env", "install", "measure", "data", "sft", "grpo", "resume", "grpo-trl", "serve", "eval"]
    assert sum(int(r[0]) for r in rows.values()) <= 2100 and "deadline 2100 s" in proc.stdout  # its 35 minutes
    assert "gpu-plan --config configs/gpu_smoke.toml --measure" in rows["measure"][2]  # before any download
    venv_python = str(ROOT / "runs" / "gpu_smoke" / "venv" / "bin" / "python")
    assert rows["env"][2] == "uv venv --clear --python 3.12 runs/gpu_smoke/venv"  # its own Python, not the machine's
    assert "export_to_ipynb.sh --bundle" in rows["install"][2] and "setup cell" in rows["install"][2]
    assert rows["sft"][2].startswith(f"{venv_python} -m agentrl.cli sft --config configs/gpu_smoke.toml")
    assert "--gpu" not in rows["sft"][2] + rows["grpo"][2]  # the detected card's table applies
    assert "kill -9" in rows["grpo"][2] and "--resume" in rows["resume"][2]
    assert "configs/gpu_smoke_trl.toml" in rows["grpo-trl"][2]
    assert rows["serve"][2].startswith(f"{ROOT / 'runs' / 'gpu_smoke' / 'venv' / 'bin' / 'vllm'} serve ")
    assert "--max-lora-rank 64" in proc.stdout and "--split heldout" in rows["eval"][2]
    assert logs.exists() == existed  # the dry run wrote nothing


def test_a_step_that_runs_over_its_time_is_killed_and_reported_as_a_failed_timeout_row(tmp_path):
    """A copy of the script on a machine whose nvidia-smi and Python are stand-ins: the first step asks the given
    "Python" its version and it sleeps for a minute, the run's deadline is 2 s, so the step is killed at 2 s and
    every later step is skipped."""
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
    assert table == {"env": "TIMEOUT", "install": "SKIP", "measure": "SKIP", "data": "SKIP", "sft": "SKIP",
                     "grpo": "SKIP", "resume": "SKIP", "grpo-trl": "SKIP", "serve": "SKIP", "eval": "SKIP",
                     "total": "FAIL"}
    assert (tmp_path / "runs" / "gpu_smoke" / "env.log").exists()
    assert "env ran out of time: see runs/gpu_smoke/env.log" in proc.stdout and "SMOKE_TOTAL=" in proc.stdout


def test_gpu_smoke_refuses_unknown_arguments():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh"), "--fast"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument" in proc.stderr


def test_gpu_smoke_presets_are_t4_shaped_and_match_what_the_script_checks():
    """The smoke trains as colab_qwen3_4b does on a T4 (4-bit SFT with merge, 4-bit GRPO with fast_inference), on
    every card: each card has a table, so the detected card's applies, and each fits (agentrl gpu-plan). The
    served adapter is evaluated on the held-out split the script expects 20 answers from, GRPO's own held-out
    questions."""
    from agentrl.app.presets import load
    from agentrl.envs import registry
    from agentrl.train.gpu_plan import CARDS, plans

    preset = load("gpu_smoke")
    sft, grpo = preset.sft(), preset.grpo()
    assert (sft.max_steps, sft.save_steps, sft.merge, sft.model.backend, sft.model.load_in_4bit) == (
        20, 10, True, "unsloth", True)
    assert (grpo.max_steps, grpo.save_steps, grpo.model.load_in_4bit, grpo.model.fast_inference) == (4, 2, True, True)
    assert grpo.adapter == f"runs/sft/{sft.name}/adapter" and sft.name == "gpu-smoke"
    assert preset.get("eval")["endpoint"]["model"] == "smoke"
    served = load("gpu_smoke", ["eval.split=heldout"]).eval()
    heldout = registry.split_rows(registry.get(served.env), "heldout", served.env_settings, preset.data)
    assert len(heldout) == 20 and heldout == registry.split_rows(registry.get(grpo.env), "heldout",
                                                                 grpo.env_settings, preset.data)
    t4 = load("colab_qwen3_4b", card="T4")
    assert (t4.sft().model.load_in_4bit, t4.grpo().model.load_in_4bit, t4.grpo().model.fast_inference,
            t4.sft().merge) == (True, True, True, True)
    assert set(preset.get("gpu")) == set(CARDS)
    for card in CARDS:
        on_card = load("gpu_smoke", card=card)
        assert all(p.fits for p in plans(on_card.sft(), on_card.grpo(), card)), card
    trl_preset = load("gpu_smoke_trl")
    trl = trl_preset.grpo()
    assert (trl.model.backend, trl.use_vllm, trl.vllm_mode, trl.max_steps, trl.name) == (
        "transformers", True, "colocate", 2, "gpu-smoke-trl")
    assert trl.adapter == grpo.adapter and trl_preset.get("corpus")["name"] == preset.get("corpus")["name"]
