"""The install a user's machine gets: the built wheel with its runtime dependencies only (the locked versions, no dev
group: no pytest, no IPython), in a fresh virtual environment on Colab's Python (3.13, its runtime since August
2026) where this machine has one, run from a directory outside the checkout. The demo's CLI chain runs there
(corpus -> index -> eval -> curate -> export -> sft -> two GRPO steps, with a text game evaluation) and each command
exits as soon as its work is done (issue 31: presets and bundled samples must travel in the wheel, progress must not
need IPython; issue 47: on 3.13 py4j's callback server joined a thread that never ends when the text game's JVM was
left to be collected at interpreter shutdown, and `agentrl curate`, whose held-out gate generates the game's dev-fold
games, wrote its dataset and then hung). One venv and one chain serve both (issue 46: they were two of each)."""

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


def python313() -> str | None:
    """Return a Python 3.13 interpreter of this machine (pyenv's, or python3.13 on PATH), None when there is none."""
    found = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"))]
    found += [p for p in (shutil.which("python3.13"),) if p]
    for candidate in found:
        probe = subprocess.run([candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 13)"],
                               capture_output=True, timeout=60)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv holding the built agentrl wheel and the lock's runtime packages only, on Python 3.13 where this
    machine has one (else this interpreter: the 3.13 test below then skips, saying so); returns its bin folder."""
    uv, root = _uv(), tmp_path_factory.mktemp("wheel")
    _run([uv, "build", "--wheel", "--out-dir", str(root / "dist"), str(REPO)], REPO)
    wheel = next((root / "dist").glob("agentrl-*.whl"))
    requirements = root / "runtime.txt"
    # the runtime dependencies at the lock's versions (as `uv sync --no-dev` would), without the project itself
    _run([uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-o", str(requirements)], REPO)
    _run([uv, "venv", "--python", python313() or sys.executable, str(root / "venv")], root)
    python = root / "venv" / "bin" / "python"
    try:  # the uv cache holds the locked wheels after `uv sync` (3.13 builds after a first install); the index else
        _run([uv, "pip", "install", "--python", str(python), "--offline", "--no-deps", "-r", str(requirements),
              str(wheel)], root)
    except AssertionError:
        _run([uv, "pip", "install", "--python", str(python), "--no-deps", "-r", str(requirements), str(wheel)], root,
             timeout=1800)
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


def test_the_wheel_venv_is_colabs_python_313(wheel_venv, tmp_path):
    if python313() is None:
        pytest.skip("no Python 3.13 interpreter here (pyenv install 3.13, or Debian's python3.13): the wheel's chain "
                    "ran on this interpreter instead")
    env = _user_env(wheel_venv)
    version = _run([str(wheel_venv / "python"), "-c", "import sys; print(sys.version)"], tmp_path, env)
    assert version.startswith("3.13")


def test_the_wheel_runs_the_demo_chain_without_ipython_and_each_command_exits(wheel_venv, tmp_path):
    if shutil.which("java") is None:
        pytest.skip("the text game needs Java 17 (apt-get install openjdk-17-jre-headless)")
    env, agentrl = _user_env(wheel_venv), str(wheel_venv / "agentrl")
    steps = [
        ["corpus", "--config", "demo"],
        ["index", "--corpus", "runs/corpus/hotpotqa_sample", "--quiet"],
        ["eval", "--config", "demo", "--policy", "oracle", "--split", "train", "--name", "oracle"],
        ["eval", "--config", "demo", "--env", "textgame", "--policy", "oracle", "--split", "train", "--limit", "2",
         "--name", "tg_oracle"],  # plays two games in the JVM
        ["curate", "runs/eval/oracle", "runs/eval/tg_oracle", "--config", "demo"],  # the gate's dev games too
        ["export", "runs/data/sft_demo"],
        ["sft", "--config", "demo", "--set", "sft.max_steps=2", "--set", "sft.check_questions=2"],
        ["grpo", "--config", "demo", "--set", "grpo.max_steps=2", "--set", "grpo.eval_questions=2"],
    ]
    for step in steps:
        # a hang at exit is a timeout here: each of these exits within a minute or two of starting on 2 cores
        out = _run([agentrl, *step], tmp_path, env, timeout=600)
        assert "IPython" not in out, (step, out[-2000:])
    assert (tmp_path / "runs" / "data" / "sft_demo" / "trl" / "train.jsonl").is_file()
    assert (tmp_path / "runs" / "sft" / "sft_demo" / "adapter" / "adapter_config.json").is_file()
    assert (tmp_path / "runs" / "grpo" / "grpo_demo" / "manifest.json").is_file()
