"""Colab's Python (3.13, its runtime since August 2026): the built wheel with the lock's runtime packages in a fresh
3.13 environment, and the demo's CLI chain (corpus -> index -> eval -> curate -> export -> sft -> grpo, with a text
game evaluation) exits as soon as each command's work is done. On 3.13 py4j's callback server joins a thread that never
ends when the text game's JVM is left to be collected at interpreter shutdown: `agentrl curate` (whose held-out gate
generates the game's dev-fold games) wrote its dataset and then hung (issue 47)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from test_wheel_install import _run, _user_env, _uv

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


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
def venv313(tmp_path_factory) -> Path:
    """A fresh Python 3.13 venv holding the built wheel and the lock's runtime packages; returns its bin folder."""
    python = python313()
    if python is None:
        pytest.skip("no Python 3.13 interpreter here (pyenv install 3.13, or Debian's python3.13)")
    if shutil.which("java") is None:
        pytest.skip("the text game needs Java 17 (apt-get install openjdk-17-jre-headless)")
    uv, root = _uv(), tmp_path_factory.mktemp("py313")
    _run([uv, "build", "--wheel", "--out-dir", str(root / "dist"), str(REPO)], REPO)
    wheel = next((root / "dist").glob("agentrl-*.whl"))
    _run([uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-o", str(root / "runtime.txt")],
         REPO)
    _run([uv, "venv", "--python", python, str(root / "venv")], root)
    # 3.13 builds of the compiled packages (torch among them) come from the index the first time, the cache after
    _run([uv, "pip", "install", "--python", str(root / "venv" / "bin" / "python"), "--no-deps", "-r",
          str(root / "runtime.txt"), str(wheel)], root, timeout=1800)
    return root / "venv" / "bin"


def test_the_demo_cli_chain_exits_after_each_command_on_python_313(venv313, tmp_path):
    env, agentrl = _user_env(venv313), str(venv313 / "agentrl")
    assert _run([str(venv313 / "python"), "-c", "import sys; print(sys.version)"], tmp_path, env).startswith("3.13")
    steps = [
        ["corpus", "--config", "demo"],
        ["index", "--corpus", "runs/corpus/hotpotqa_sample", "--quiet"],
        ["eval", "--config", "demo", "--policy", "oracle", "--split", "train", "--name", "oracle"],
        ["eval", "--config", "demo", "--env", "textgame", "--policy", "oracle", "--split", "train", "--limit", "2",
         "--name", "tg_oracle"],  # plays two games in the JVM
        ["curate", "runs/eval/oracle", "runs/eval/tg_oracle", "--config", "demo"],  # the gate's dev games too
        ["export", "runs/data/sft_demo"],
        ["sft", "--config", "demo", "--set", "sft.max_steps=2", "--set", "sft.check_questions=2"],
        ["grpo", "--config", "demo", "--set", "grpo.max_steps=1", "--set", "grpo.eval_questions=2"],
    ]
    for step in steps:
        # a hang at exit is a timeout here: each of these exits within a minute or two of starting on 2 cores
        _run([agentrl, *step], tmp_path, env, timeout=600)
    assert (tmp_path / "runs" / "data" / "sft_demo" / "trl" / "train.jsonl").is_file()
    assert (tmp_path / "runs" / "grpo" / "grpo_demo" / "manifest.json").is_file()
