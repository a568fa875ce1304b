"""Runs survive a disconnect: SFT and GRPO write checkpoints every `save_steps`; a run killed with SIGKILL in a real
subprocess continues with `--resume` to the same final step count, keeping its loss curve, its agent evaluations
and, for SFT, the exact losses of an uninterrupted run (optimizer, scheduler and RNG state restored)."""

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import HOTPOT

# Runs the phase in-process with a callback that, once checkpoint-<STOP> is on disk, writes a marker file and
# waits to be killed: the test then kills the process at a known point, after a complete checkpoint.
KILLED_RUN = '''
import sys, time
from pathlib import Path
from transformers import TrainerCallback
from agentrl.app.presets import load

phase, preset_path, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])

class WaitForKill(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        if state.global_step == stop:
            Path("checkpoint-written").write_text(str(stop))
            time.sleep(600)

preset = load(preset_path)
if phase == "sft":
    from agentrl.train.sft import run_sft
    run_sft(preset.sft(), preset.heldout, None, preset.data, callbacks=[WaitForKill()])
else:
    from agentrl.train.grpo import run_grpo
    run_grpo(preset.grpo(), preset.heldout, preset.data, eval_run=preset.eval().run, callbacks=[WaitForKill()])
'''


def kill_at_checkpoint(tmp_path, phase: str, preset, stop: int) -> None:
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN)
    marker = tmp_path / "checkpoint-written"
    proc = subprocess.Popen([sys.executable, str(script), phase, str(preset), str(stop)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()


def resume(tmp_path, phase: str, preset) -> dict:
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", phase, "--config", str(preset), "--resume"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / "runs" / phase / "r" / "metrics.json").read_text())


@pytest.mark.slow
def test_sft_killed_after_a_checkpoint_resumes_to_the_same_losses_and_step_count(tmp_path, sft_data, tiny_model):
    from agentrl.app.presets import load
    from agentrl.train.sft import run_sft

    preset = tmp_path / "p.toml"
    preset.write_text(f'[sft]\nname = "r"\ndata = "{sft_data}"\nmax_steps = 6\nsave_steps = 2\n'
                      f'per_device_train_batch_size = 2\ngradient_accumulation_steps = 1\nlearning_rate = 2e-3\n'
                      f'lr_scheduler_type = "linear"\nwarmup_steps = 0.0\noptim = "adamw_torch"\nmax_length = 2048\n'
                      f'gradient_checkpointing = false\nreport_to = []\ncheck_questions = 0\nlogging_steps = 1\n'
                      f'[sft.model]\nname = "{tiny_model}"\n')
    kill_at_checkpoint(tmp_path, "sft", preset, stop=4)
    trainer_dir = tmp_path / "runs" / "sft" / "r" / "trainer"
    assert sorted(p.name for p in trainer_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not (tmp_path / "runs" / "sft" / "r" / "adapter").exists()  # the killed run never finished
    metrics = resume(tmp_path, "sft", preset)
    assert metrics["steps"] == 6 and metrics["resumed_from"] == "checkpoint-4"
    assert [x["step"] for x in metrics["loss"]] == [1, 2, 3, 4, 5, 6]  # the curve before the kill is kept
    assert (tmp_path / "runs" / "sft" / "r" / "adapter" / "adapter_config.json").is_file()

    straight = load(preset)
    uninterrupted = run_sft(straight.sft(), straight.heldout, None, straight.data, runs=tmp_path / "straight").metrics
    assert [x["loss"] for x in metrics["loss"]] == pytest.approx([x["loss"] for x in uninterrupted["loss"]],
                                                                 rel=1e-4)


@pytest.mark.slow
def test_grpo_killed_after_a_checkpoint_resumes_with_its_evaluations_and_step_count(tmp_path, tiny_model,
                                                                                    small_index):
    preset = tmp_path / "g.toml"
    preset.write_text(f'[grpo]\nname = "r"\nnum_generations = 4\nper_device_train_batch_size = 4\nmax_steps = 4\n'
                      f'save_steps = 2\neval_every = 2\neval_questions = 2\nmax_completion_length = 64\n'
                      f'max_tool_calling_iterations = 1\nreport_to = []\n'
                      f'log_completions = false\nlearning_rate = 3e-4\nlr_scheduler_type = "constant"\n'
                      f'optim = "adamw_torch"\ngradient_checkpointing = false\nlogging_steps = 1\n'
                      f'[grpo.search]\nindex = "{small_index}"\nqa = "{HOTPOT}"\ntrain = 12\ntop_k = 2\n'
                      f'passage_chars = 80\nrewards = {{answer_f1 = 1.0, tool_use = 0.5}}\n'
                      f'[grpo.model]\nname = "{tiny_model}"\n[eval.search]\nmax_turns = 2\nmax_new_tokens = 32\n')
    kill_at_checkpoint(tmp_path, "grpo", preset, stop=2)
    out = tmp_path / "runs" / "grpo" / "r"
    assert [e["step"] for e in json.loads((out / "evals.json").read_text())] == [2]
    metrics = resume(tmp_path, "grpo", preset)
    assert metrics["steps"] == 4 and metrics["resumed_from"] == "checkpoint-2"
    assert [e["step"] for e in metrics["evals"]] == [2, 4]  # the evaluation before the kill survived
    assert [h["step"] for h in metrics["history"]] == [1, 2, 3, 4]
    assert (out / "adapter" / "adapter_config.json").is_file()


def test_a_run_without_resume_moves_an_earlier_runs_checkpoints_aside_and_overwrite_deletes_them(tmp_path, capsys):
    from agentrl.cli import build_parser
    from agentrl.train.checkpoints import checkpoints, prepare

    trainer = tmp_path / "run" / "trainer"

    def checkpoint(step: int) -> None:
        (trainer / f"checkpoint-{step}").mkdir(parents=True)
        (trainer / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")

    checkpoint(2)
    checkpoint(4)
    (tmp_path / "run" / "evals.json").write_text("[]")
    assert prepare(trainer, resume=False, extra=("evals.json",)) is None
    first = trainer / "earlier-1"
    assert sorted(p.name for p in first.iterdir()) == ["checkpoint-2", "checkpoint-4", "evals.json"]
    assert f"moved to {first}" in capsys.readouterr().out and checkpoints(trainer) == []
    assert prepare(trainer, resume=True) is None  # what was moved aside is never resumed from
    checkpoint(6)
    prepare(trainer, resume=False)
    assert [p.name for p in (trainer / "earlier-2").iterdir()] == ["checkpoint-6"]
    checkpoint(8)
    prepare(trainer, resume=False, overwrite=True)
    assert not (trainer / "checkpoint-8").exists() and "deleted 1 checkpoint" in capsys.readouterr().out
    assert (first / "checkpoint-4" / "trainer_state.json").is_file()  # earlier runs' copies stay
    for phase in ("sft", "grpo"):
        assert build_parser().parse_args([phase, "--overwrite"]).overwrite
