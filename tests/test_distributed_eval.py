"""Held-out evaluation during a distributed GRPO run, with every rank taking part (agentrl.train.rank_eval): a real
two-process DDP launch on CPU (configs/accelerate/cpu_2proc.yaml) with eval_every > 0, and a real two-process FSDP2
model on CPU (gloo), where a rank generating alone on the sharded weights would wait forever in an all-gather."""

import json
import subprocess
import sys

import pytest

from conftest import HOTPOT, ROOT


@pytest.mark.slow
def test_a_two_process_grpo_run_with_eval_every_evaluates_on_both_ranks_and_writes_its_evaluations(
        tmp_path, tiny_model, small_index):
    preset = tmp_path / "p.toml"
    preset.write_text(f'[grpo]\nname = "ddp"\nnum_generations = 4\nper_device_train_batch_size = 4\nmax_steps = 2\n'
                      f'eval_every = 1\nmax_completion_length = 48\nmax_tool_calling_iterations = 1\n'
                      f'eval_questions = 3\nreport_to = []\nlog_completions = false\n'
                      f'optim = "adamw_torch"\ngradient_checkpointing = false\n'
                      f'[grpo.search]\nindex = "{small_index}"\nqa = "{HOTPOT}"\ntrain = 20\ntop_k = 2\n'
                      f'passage_chars = 120\nrewards = {{answer_f1 = 1.0}}\n'
                      f'[grpo.model]\nname = "{tiny_model}"\n[eval.search]\nmax_turns = 2\nmax_new_tokens = 24\n')
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"), "-m", "agentrl.cli", "grpo", "--config",
           str(preset)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "runs" / "grpo" / "ddp"
    evals = json.loads((out / "evals.json").read_text())
    assert [e["step"] for e in evals] == [1, 2] and all(e["n"] == 3 for e in evals)
    assert [e["step"] for e in json.loads((out / "metrics.json").read_text())["evals"]] == [1, 2]
    for step in (1, 2):
        run = out / "eval" / f"step_{step}"
        # rank 0 ran questions 0 and 2, rank 1 question 1; the main process wrote all three in row order
        shares = [len((run / f"rank_{r}" / "trajectories.jsonl").read_text().splitlines()) for r in (0, 1)]
        assert shares == [2, 1]
        merged = [json.loads(line)["id"] for line in (run / "trajectories.jsonl").read_text().splitlines()]
        assert len(merged) == 3 == len(set(merged))
        assert json.loads((run / "metrics.json").read_text())["n"] == 3
        assert json.loads((run / "manifest.json").read_text())["counts"]["ranks"] == 2
    assert proc.stdout.count("eval @ step 2") == 1  # only the main process reports


@pytest.mark.slow
def test_held_out_evaluation_of_a_sharded_fsdp2_model_runs_on_both_ranks_and_gathers_every_row(
        tmp_path, tiny_model, small_index):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           str(ROOT / "tests" / "fsdp2_eval_worker.py"), str(tiny_model), str(small_index), str(HOTPOT), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((tmp_path / f"report_{r}.json").read_text()) for r in (0, 1)]
    assert reports[0]["metrics"]["n"] == 3 and reports[0]["metrics"]["step"] == 1 and reports[1]["metrics"] is None
    assert reports[0]["forwards"] > 0 and reports[1]["forwards"] > 0  # each rank generated alone
    for r in reports:
        assert r["kinds"] == r["kinds_after_eval"] == ["DTensor"] and r["same_logits"]  # sharded again after
    assert len((tmp_path / "step_1" / "trajectories.jsonl").read_text().splitlines()) == 3


def test_held_out_evaluation_under_fsdp1_is_refused_before_training(monkeypatch):
    from agentrl.core.io import DataError
    from agentrl.train.rank_eval import check_launch, main_decides, world

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(DataError, match="fsdp_version: 2"):
        check_launch(eval_questions=5)
    check_launch(eval_questions=0)  # no held-out evaluation: nothing to refuse
    monkeypatch.setenv("FSDP_VERSION", "2")
    check_launch(eval_questions=5)
    assert world() == (0, 1) and main_decides(True) is True and main_decides(False) is False
