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


@pytest.mark.parametrize(("capability", "native"), CARDS)
def test_sft_and_grpo_trainers_get_bf16_or_fp16_with_a_loss_scaler_from_the_card(gpu, tmp_path, capability, native):
    """What agentrl derives for TRL's config (building the real one with CUDA mocked asks the missing driver):
    agentrl.train.configs.trl_args passes these last, and a preset setting bf16 / fp16 is refused."""
    from agentrl.train import dpo, grpo, sft
    from agentrl.train.configs import DERIVED, DPOSettings, GRPOSettings, SFTSettings

    gpu(capability)
    assert {"bf16", "fp16", "use_cpu"} <= set(DERIVED["common"])
    for args in (sft.derived_args(SFTSettings(), "transformers", None, tmp_path),
                 grpo.derived_args(GRPOSettings(), "transformers", tmp_path),
                 dpo.derived_args(DPOSettings(), tmp_path)):
        # fp16=True: the Trainer runs fp16 with its GradScaler (loss scaling); bf16 needs no scaler
        assert (args["bf16"], args["fp16"], args["use_cpu"]) == (native, not native, False)


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

    from agentrl.app.presets import load
    from agentrl.core.io import DataError
    from agentrl.train.configs import SFTSettings

    assert importlib.util.find_spec("bitsandbytes") is None
    preset = load("colab_qwen3_4b", card="T4")
    for cfg in (preset.sft(), preset.grpo()):
        assert cfg.optim == "adamw_8bit" and cfg.model.load_in_4bit
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            ran = models.bitsandbytes_fallback(cfg)
        assert ran.optim == "adamw_torch" and not ran.model.load_in_4bit and ran.model.name == cfg.model.name
        assert ran.learning_rate == cfg.learning_rate and cfg.optim == "adamw_8bit"  # the rest kept, a copy changed
        assert len(caplog.records) == 1
        assert "optim adamw_8bit -> adamw_torch, load_in_4bit -> 16-bit weights" in caplog.text
    plain = SFTSettings.of(optim="adamw_torch")
    assert models.bitsandbytes_fallback(plain) is plain  # nothing to change: nothing said
    with pytest.raises(DataError, match="lion_8bit"):
        models.bitsandbytes_fallback(replace(plain, trl={**plain.trl, "optim": "lion_8bit"}))


def test_an_sft_run_with_an_8bit_optimiser_and_4bit_weights_trains_without_bitsandbytes(tmp_path, sft_data,
                                                                                      tiny_model, caplog):
    """Without the fallback transformers raises ImportError at optimizer creation ("You need to install
    `bitsandbytes` in order to use bitsandbytes optimizers")."""
    from agentrl.core.heldout import HeldOut
    from agentrl.train.sft import run_sft
    from conftest import sft_settings

    settings = sft_settings(name="nobnb", data=str(sft_data), max_steps=2, per_device_train_batch_size=2,
                            check_questions=0, logging_steps=1, optim="adamw_8bit",
                            model={"name": str(tiny_model), "backend": "transformers", "load_in_4bit": True})
    with caplog.at_level(logging.WARNING):
        result = run_sft(settings, HeldOut(), runs=tmp_path)
    assert result.metrics["steps"] == 2
    said = [r.getMessage() for r in caplog.records if "bitsandbytes" in r.getMessage()]
    assert len(said) == 1 and "adamw_8bit -> adamw_torch" in said[0]
    manifest = json.loads((tmp_path / "sft" / "nobnb" / "manifest.json").read_text())
    assert manifest["config"]["trl"]["optim"] == "adamw_torch" and manifest["config"]["model"]["load_in_4bit"] is False
