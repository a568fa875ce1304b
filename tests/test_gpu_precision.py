"""The dtype every GPU path picks, with the card's compute capability mocked (no GPU here): bf16 only where the card
has it natively (SM >= 8.0), fp16 with the Trainer's loss scaler on T4-class cards (SM 7.5), where torch's own
``is_bf16_supported()`` says True by emulation. And the presets without bitsandbytes (AGENTRL_GPU_STACK=none on a
runtime that lacks it): a real SFT run on the tiny model with the GPU presets' 8-bit optimiser and 4-bit weights
falls back with one line."""

import json
import logging

import pytest
import torch

from agentrl.core import device
from agentrl.train import models
from agentrl.train.models import LoraSettings, ModelConfig

CARDS = [((7, 5), False), ((8, 0), True), ((8, 9), True), ((9, 0), True)]  # T4, A100, L4, H100


@pytest.fixture
def gpu(monkeypatch):
    """Make torch report one CUDA GPU of the given compute capability, whose is_bf16_supported() answers True as
    torch 2.13/2.14 do on a T4 (bf16 emulated) unless asked to exclude emulation."""

    def card(capability):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True: including_emulation or capability[0] >= 8)
        monkeypatch.setattr(torch.version, "hip", None)

    return card


@pytest.mark.parametrize(("capability", "native"), CARDS)
def test_bf16_only_where_the_card_has_it_natively_else_fp16_on_every_loading_path(gpu, capability, native, caplog):
    from agentrl.rollout.local import inference_dtype

    gpu(capability)
    half = torch.bfloat16 if native else torch.float16
    assert torch.cuda.is_bf16_supported() is True  # what torch says, even on a T4: not what decides
    assert device.cuda_native_bf16() is native and device.cuda_half_dtype() is half
    assert models.cuda_precision() == {"bf16": native, "fp16": not native}  # SFT and GRPO trainer flags
    assert models._dtype(ModelConfig()) is half  # transformers + peft loading
    assert models.unsloth_load_args(ModelConfig(name="m"))["dtype"] is half  # Unsloth loading (was: Unsloth's pick)
    assert inference_dtype("cuda", "auto") is half and inference_dtype("cuda:0", "auto") is half  # LocalPolicy
    with caplog.at_level(logging.WARNING):
        assert models._dtype(ModelConfig(dtype="bfloat16")) is half  # a preset's explicit bf16 (gpu_qwen2_5_7b)
    assert (("no native bfloat16" in caplog.text) and ("7.5" in caplog.text)) is not native
    assert models._dtype(ModelConfig(dtype="float32")) is torch.float32


def test_without_cuda_nothing_is_half_precision(monkeypatch):
    from agentrl.core import cpu_precision
    from agentrl.rollout.local import inference_dtype

    monkeypatch.setattr(cpu_precision, "measured", lambda: None)  # an unmeasured CPU (tests/test_cpu_precision.py)
    monkeypatch.delenv("AGENTRL_CPU_PRECISION", raising=False)
    assert not torch.cuda.is_available()
    assert device.cuda_native_bf16() is False and models.cuda_precision() == {"bf16": False, "fp16": False}
    assert models._dtype(ModelConfig()) is torch.float32 and inference_dtype("cpu") is torch.float32
    assert models.unsloth_load_args(ModelConfig(name="m"))["dtype"] is None  # Unsloth's CPU backend chooses


class Captured:
    """Stands in for TRL's config class (building the real one with CUDA mocked asks the missing driver): records
    the arguments agentrl passes."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.mark.parametrize(("capability", "native"), CARDS)
def test_sft_and_grpo_trainers_get_bf16_or_fp16_with_a_loss_scaler_from_the_card(gpu, monkeypatch, tmp_path,
                                                                              capability, native):
    import trl

    from agentrl.train import grpo, sft

    gpu(capability)
    monkeypatch.setattr(trl, "SFTConfig", Captured)
    monkeypatch.setattr(trl, "GRPOConfig", Captured)
    for args in (sft.training_args(sft.SFTSettings(), "transformers", None, tmp_path),
                 grpo.training_args(grpo.GRPOSettings(), [1.0], tmp_path, "transformers")):
        # fp16=True: the Trainer runs fp16 with its GradScaler (loss scaling); bf16 needs no scaler
        assert (args.kwargs["bf16"], args.kwargs["fp16"], args.kwargs["use_cpu"]) == (native, not native, False)


@pytest.mark.parametrize(("capability", "native"), [CARDS[0], CARDS[1]])
def test_a_merged_model_is_saved_in_fp16_on_a_t4_and_bf16_where_native(gpu, tiny_model, tmp_path, capability, native):
    from agentrl.train.sft import merge_adapter

    loaded = models.load_for_training(ModelConfig(name=str(tiny_model), backend="transformers",
                                                  lora=LoraSettings(r=4, alpha=8)))
    gpu(capability)  # after loading: the merge decides the dtype
    out = merge_adapter(loaded, tmp_path / "merged")
    config = json.loads((out / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == ("bfloat16" if native else "float16")


def test_without_bitsandbytes_the_gpu_presets_fall_back_with_one_line(caplog):
    """AGENTRL_GPU_STACK=none installs bitsandbytes with agentrl; where it is missing anyway (this CPU venv has none)
    the presets' adamw_8bit and load_in_4bit fall back, said once, and a non-AdamW bitsandbytes optimiser stops."""
    import importlib.util
    from dataclasses import replace

    from agentrl.core.config import load_preset
    from agentrl.core.io import DataError
    from agentrl.train.gpu_plan import apply_card
    from agentrl.train.grpo import grpo_config
    from agentrl.train.sft import sft_config

    assert importlib.util.find_spec("bitsandbytes") is None
    preset = apply_card(load_preset("colab_qwen3_4b"), "T4")
    for cfg in (sft_config(preset), grpo_config(preset)):
        assert cfg.optim == "adamw_8bit" and cfg.model.load_in_4bit
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            ran = models.bitsandbytes_fallback(cfg)
        assert ran.optim == "adamw_torch" and not ran.model.load_in_4bit and ran.model.name == cfg.model.name
        assert len(caplog.records) == 1
        assert "optim adamw_8bit -> adamw_torch, load_in_4bit -> 16-bit weights" in caplog.text
    plain = replace(sft_config({}), optim="adamw_torch")
    assert models.bitsandbytes_fallback(plain) is plain  # nothing to change: nothing said
    with pytest.raises(DataError, match="lion_8bit"):
        models.bitsandbytes_fallback(replace(plain, optim="lion_8bit"))


def test_an_sft_run_with_an_8bit_optimiser_and_4bit_weights_trains_without_bitsandbytes(tmp_path, sft_data,
                                                                                      tiny_model, caplog):
    """Without the fallback transformers raises ImportError at optimizer creation ("You need to install
    `bitsandbytes` in order to use bitsandbytes optimizers")."""
    from agentrl.train.sft import SFTSettings, run_sft

    settings = SFTSettings(name="nobnb", data=str(sft_data), max_steps=2, batch_size=2, grad_accum=1, report_to=[],
                           check_questions=0, logging_steps=1, optim="adamw_8bit",
                           model=ModelConfig(name=str(tiny_model), backend="transformers", load_in_4bit=True))
    with caplog.at_level(logging.WARNING):
        result = run_sft(settings, runs=tmp_path)
    assert result.metrics["steps"] == 2
    said = [r.getMessage() for r in caplog.records if "bitsandbytes" in r.getMessage()]
    assert len(said) == 1 and "adamw_8bit -> adamw_torch" in said[0]
    manifest = json.loads((tmp_path / "sft" / "nobnb" / "manifest.json").read_text())
    assert manifest["config"]["optim"] == "adamw_torch" and manifest["config"]["model"]["load_in_4bit"] is False
