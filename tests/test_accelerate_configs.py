"""Every configs/accelerate/*.yaml the docs use turns into accelerate's launch environment and plugin, and the
settings chosen under it work: `backend = "auto"` picks transformers + peft on a CUDA machine with Unsloth
installed, the detected card's single-GPU tables (Unsloth fast_inference on a 40 GB A100) are not applied, no
gradient checkpointing on top of FSDP's activation checkpointing (the Trainer raises when both are set, and
Unsloth's would recompute every layer a second time), and Unsloth's colocated vLLM is refused under FSDP."""

import re

import pytest

from agentrl.app.presets import load
from agentrl.core.config import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "configs").glob("*"))]
USED = sorted({m for d in DOCS if d.is_file()
               for m in re.findall(r"(?:configs/accelerate/|`)([\w-]+)\.yaml", d.read_text())})


def launch_env(name: str, ranks: bool = False) -> dict:
    """The environment `accelerate launch --config_file configs/accelerate/<name>.yaml` gives each process; with
    ``ranks`` also the WORLD_SIZE that torchrun (which accelerate starts) sets in each of them."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(REPO_ROOT / "configs" / "accelerate" /
                                                                    f"{name}.yaml"), "-m", "agentrl.cli", "sft"])
    args, defaults, _ = _validate_launch_command(args)
    world = {"WORLD_SIZE": str(args.num_processes * args.num_machines)} if ranks else {}
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        return {**prepare_deepspeed_cmd_env(args)[1], **world}
    return {**prepare_multi_gpu_env(args), **world}


def test_the_docs_use_every_accelerate_config_that_ships():
    shipped = sorted(p.stem for p in (REPO_ROOT / "configs" / "accelerate").glob("*.yaml"))
    assert shipped == USED, "a shipped accelerate config is undocumented, or the docs name a missing one"


@pytest.mark.slow
@pytest.mark.parametrize("name", USED)
def test_accelerate_config_builds_its_plugin_and_training_arguments(name, monkeypatch, tmp_path):
    from agentrl.train import grpo, sft
    from agentrl.train.configs import trl_args
    from agentrl.train.models import choose_backend, unsloth_checkpointing

    env = launch_env(name)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    preset = load("demo" if name == "cpu_2proc" else "gpu_qwen2_5_7b")
    s, g = preset.sft(), preset.grpo()
    # the preset's own backend ("auto" for SFT), on a CUDA machine with Unsloth installed, in one of the processes
    # (WORLD_SIZE only here: TrainingArguments would join a process group under it)
    with monkeypatch.context() as m:
        m.setenv("WORLD_SIZE", launch_env(name, ranks=True)["WORLD_SIZE"])
        backend, reason = choose_backend(s.model.backend, cuda=True, unsloth=True)
        gbackend = choose_backend(g.model.backend, cuda=True, unsloth=True)[0]
    assert backend == gbackend == "transformers", reason
    if s.model.backend == "auto":
        assert "distributed launch" in reason
    fsdp_ckpt = False
    if env.get("ACCELERATE_USE_FSDP") == "true":
        from accelerate.utils import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.activation_checkpointing
        fsdp_ckpt = plugin.activation_checkpointing
    # an explicit backend = "unsloth": its offloaded checkpointing, except on top of FSDP's own
    assert unsloth_checkpointing(s.gradient_checkpointing) == ("unsloth" if s.gradient_checkpointing and not fsdp_ckpt
                                                               else False)
    if env.get("ACCELERATE_USE_DEEPSPEED") == "true":
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
        pytest.importorskip("deepspeed", reason="DeepSpeedPlugin needs deepspeed (installed on the GPU box)")
        from accelerate.utils import DeepSpeedPlugin

        assert DeepSpeedPlugin().zero_stage == 3
    sft_args = sft.build_args(s, None, tmp_path, backend)
    grpo_args = trl_args(g, grpo.derived_args(g, gbackend, tmp_path))
    for args, settings in ((sft_args, s), (grpo_args, g)):
        assert not (fsdp_ckpt and args.gradient_checkpointing), "the Trainer refuses both checkpointing kinds"
        # the preset's checkpoints (TRL's save_strategy "steps", its save_steps; demo: TRL's default of 500)
        assert (getattr(args.save_strategy, "value", args.save_strategy), args.save_steps) == ("steps",
                                                                                              settings.save_steps)
        if name != "cpu_2proc":
            assert "save_steps" in preset.get(settings.KIND)
    if name in ("fsdp", "multi_gpu", "deepspeed_zero3"):  # the presets ask for checkpointing: FSDP does it instead
        assert sft_args.gradient_checkpointing == (not fsdp_ckpt)


def test_a_single_process_on_a_gpu_still_gets_unsloth_for_auto(monkeypatch):
    from agentrl.train.models import choose_backend

    for key in ("WORLD_SIZE", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(key, raising=False)
    assert choose_backend("auto", cuda=True, unsloth=True) == ("unsloth", "CUDA GPU present")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert choose_backend("auto", cuda=True, unsloth=True)[0] == "unsloth"


@pytest.mark.parametrize("name", ["fsdp", "multi_gpu"])
def test_under_accelerate_the_detected_cards_single_gpu_tables_are_not_applied(name, monkeypatch, tmp_path, capsys):
    """gpu_qwen2_5_7b on 40 GB A100s (an nvidia-smi stand-in on PATH: the project's detection runs for real): a
    single process gets [gpu.A100-40] (Unsloth + fast_inference), `accelerate launch` gets the base tables (TRL's
    vLLM, transformers); `--gpu A100-40` still applies them, and then fast_inference is refused under FSDP
    before anything is loaded."""
    import os

    from agentrl.app.commands import preset_of
    from agentrl.cli import build_parser
    from agentrl.core.io import DataError
    from agentrl.train.models import check_fast_inference, choose_backend

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA A100-SXM4-40GB, 580.82.07, 8.0, 40960'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    for key in ("WORLD_SIZE", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(key, raising=False)
    args = build_parser().parse_args(["grpo", "--config", "gpu_qwen2_5_7b"])
    single = preset_of(args).grpo()
    assert single.model.backend == "unsloth" and single.model.fast_inference and not single.use_vllm
    for key, value in launch_env(name, ranks=True).items():
        monkeypatch.setenv(key, value)
    launched = preset_of(args).grpo()
    assert "are not applied" in capsys.readouterr().err
    assert launched.model.backend == "transformers" and not launched.model.fast_inference and launched.use_vllm
    forced = preset_of(build_parser().parse_args(["grpo", "--config", "gpu_qwen2_5_7b", "--gpu", "A100-40"])).grpo()
    backend = choose_backend(forced.model.backend, cuda=True, unsloth=True)[0]
    if name == "fsdp":
        with pytest.raises(DataError, match="fast_inference = true cannot run under FSDP"):
            check_fast_inference(forced.model, backend)
    else:
        check_fast_inference(forced.model, backend)  # DDP: one engine per process is Unsloth's to run
