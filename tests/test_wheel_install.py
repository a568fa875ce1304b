"""The install a user's machine gets: the built wheel with its runtime dependencies only (the locked versions, no dev
group: no pytest, no IPython), in a fresh virtual environment, run from a directory outside the checkout. The demo's
CLI steps run there up to `agentrl sft --config demo` and a 2-step `agentrl grpo --config demo` (issue 31: presets
and bundled samples must travel in the wheel; progress must not need IPython)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv is not on PATH (.ci/run installs it): the wheel cannot be built and installed")
    return uv


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 900) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} -> {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv holding the built agentrl wheel and the lock's runtime packages only; returns its bin folder."""
    uv, root = _uv(), tmp_path_factory.mktemp("wheel")
    _run([uv, "build", "--wheel", "--out-dir", str(root / "dist"), str(REPO)], REPO)
    wheel = next((root / "dist").glob("agentrl-*.whl"))
    requirements = root / "runtime.txt"
    # the runtime dependencies at the lock's versions (as `uv sync --no-dev` would), without the project itself
    _run([uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-o", str(requirements)], REPO)
    _run([uv, "venv", "--python", sys.executable, str(root / "venv")], root)
    python = root / "venv" / "bin" / "python"
    try:  # the uv cache holds every locked wheel after `uv sync`; the package index otherwise
        _run([uv, "pip", "install", "--python", str(python), "--offline", "--no-deps", "-r", str(requirements),
              str(wheel)], root)
    except AssertionError:
        _run([uv, "pip", "install", "--python", str(python), "--no-deps", "-r", str(requirements), str(wheel)], root)
    return python.parent


def _user_env(bin_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_the_wheel_has_no_dev_tools_and_finds_its_presets_outside_the_checkout(wheel_venv, tmp_path):
    env = _user_env(wheel_venv)
    for dev_tool in ("IPython", "pytest"):
        probe = subprocess.run([str(wheel_venv / "python"), "-c", f"import {dev_tool}"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode != 0, f"{dev_tool} is importable: the venv is not a runtime-only install"
    where = _run([str(wheel_venv / "python"), "-c", "import agentrl; print(agentrl.__file__)"], tmp_path, env)
    assert str(REPO) not in where  # the wheel's copy, not the checkout
    plan = _run([str(wheel_venv / "agentrl"), "gpu-plan", "--config", "colab_qwen3_4b", "--gpu", "T4"], tmp_path, env)
    assert "sft on T4" in plan and "grpo on T4" in plan


def test_the_wheel_runs_the_demo_phases_up_to_sft_and_two_grpo_steps_without_ipython(wheel_venv, tmp_path):
    env, agentrl = _user_env(wheel_venv), str(wheel_venv / "agentrl")
    steps = [
        ["corpus", "--config", "demo"],
        ["index", "--corpus", "runs/corpus/hotpotqa_sample", "--quiet"],
        ["eval", "--config", "demo", "--policy", "oracle", "--split", "train", "--name", "oracle"],
        ["curate", "runs/eval/oracle", "--config", "demo"],
        ["export", "runs/data/sft_demo"],
        ["sft", "--config", "demo", "--set", "sft.max_steps=2", "--set", "sft.check_questions=2"],
        ["grpo", "--config", "demo", "--set", "grpo.max_steps=2", "--set", "grpo.eval_questions=2"],
    ]
    out = ""
    for step in steps:
        out = _run([agentrl, *step], tmp_path, env)
    assert (tmp_path / "runs" / "sft" / "sft_demo" / "adapter" / "adapter_config.json").is_file()
    grpo_dir = tmp_path / "runs" / "grpo" / "grpo_demo"
    assert (grpo_dir / "manifest.json").is_file(), out
    assert "IPython" not in out
