"""Every configs/accelerate/*.yaml the docs use turns into accelerate's launch environment and plugin, and the
training arguments built under it are ones transformers' Trainer accepts: no gradient checkpointing on top of
FSDP's activation checkpointing (the Trainer raises when both are set)."""

import re

import pytest

from agentrl.config import REPO_ROOT, load_preset

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "configs").glob("*"))]
USED = sorted({m for d in DOCS if d.is_file()
               for m in re.findall(r"(?:configs/accelerate/|`)([\w-]+)\.yaml", d.read_text())})


def launch_env(name: str) -> dict:
    """The environment `accelerate launch --config_file configs/accelerate/<name>.yaml` gives each process."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(REPO_ROOT / "configs" / "accelerate" /
                                                                    f"{name}.yaml"), "-m", "agentrl.cli", "sft"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        return prepare_deepspeed_cmd_env(args)[1]
    return prepare_multi_gpu_env(args)


def test_the_docs_use_every_accelerate_config_that_ships():
    shipped = sorted(p.stem for p in (REPO_ROOT / "configs" / "accelerate").glob("*.yaml"))
    assert shipped == USED, "a shipped accelerate config is undocumented, or the docs name a missing one"


@pytest.mark.parametrize("name", USED)
def test_accelerate_config_builds_its_plugin_and_training_arguments(name, monkeypatch, tmp_path):
    from agentrl.train import grpo, sft

    env = launch_env(name)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fsdp_ckpt = False
    if env.get("ACCELERATE_USE_FSDP") == "true":
        from accelerate.utils import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.activation_checkpointing
        fsdp_ckpt = plugin.activation_checkpointing
    if env.get("ACCELERATE_USE_DEEPSPEED") == "true":
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
        pytest.importorskip("deepspeed", reason="DeepSpeedPlugin needs deepspeed (installed on the GPU box)")
        from accelerate.utils import DeepSpeedPlugin

        assert DeepSpeedPlugin().zero_stage == 3
    preset = load_preset("demo" if name == "cpu_2proc" else "gpu_qwen2_5_7b")
    s = sft.sft_config(preset)
    s.model.backend = "transformers"  # several GPUs: Unsloth's kernels are single-GPU (docs/scaling.md)
    sft_args = sft.training_args(s, "transformers", None, tmp_path)
    g = grpo.grpo_config(preset)
    g.model.backend, g.optim = "transformers", "adamw_torch"
    grpo_args = grpo.training_args(g, [1.0], tmp_path)
    for args in (sft_args, grpo_args):
        assert not (fsdp_ckpt and args.gradient_checkpointing), "the Trainer refuses both checkpointing kinds"
        assert args.save_strategy == ("steps" if name != "cpu_2proc" else "no")
    if name in ("fsdp", "multi_gpu", "deepspeed_zero3"):  # the presets ask for checkpointing: FSDP does it instead
        assert sft_args.gradient_checkpointing == (not fsdp_ckpt)
