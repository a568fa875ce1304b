"""`agentrl demo` end to end on a shrunk demo preset, in a scratch directory: every phase, then a clean rerun."""

import os
import subprocess
import sys

from conftest import ROOT, small_preset


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
    assert "oracle em 1" in first.stdout
    for path in ("runs/corpus/hotpotqa_sample/index/index.json", "runs/eval/oracle/metrics.json",
                 "runs/eval/sql_oracle/metrics.json", "runs/eval/textgame_oracle/metrics.json",
                 "runs/eval/math_oracle/metrics.json", "runs/eval/code_oracle/metrics.json",
                 "runs/data/sft_demo/trl/train.jsonl",
                 "runs/sft/sft_demo/adapter/adapter_config.json", "runs/grpo/grpo_demo/metrics.json"):
        assert (tmp_path / path).exists(), path
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "04 grpo" in again.stdout
