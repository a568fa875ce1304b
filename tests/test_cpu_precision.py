"""CPU precision: bf16 only where the CPU has it and this machine's measurement found it faster; the numerical
effect of bf16 autocast on an SFT loss of the tiny model is small."""

import json

import pytest
import torch

from agentrl.core import cpu_precision
from agentrl.core.io import DataError
from agentrl.train import models
from agentrl.train.models import ModelConfig


@pytest.fixture
def measurement(tmp_path, monkeypatch):
    """Write a measurement file and point the module at it; the CPU is taken to have bf16."""
    path = tmp_path / "cpu.json"
    monkeypatch.setattr(cpu_precision, "measurement_path", lambda: path)
    monkeypatch.setattr(cpu_precision, "cpu_has_bf16", lambda: True)
    monkeypatch.delenv("AGENTRL_CPU_PRECISION", raising=False)

    def write(train: float, generate: float):
        path.write_text(json.dumps({"train_bf16_speedup": train, "generate_bf16_speedup": generate}))

    return write


def test_bf16_is_used_only_for_the_work_the_measurement_found_faster(measurement):
    from agentrl.rollout.local import inference_dtype

    measurement(1.44, 0.86)
    assert models.cuda_precision(ModelConfig()) == {"bf16": True, "fp16": False}  # training: autocast
    assert inference_dtype("cpu") is torch.float32  # generation was slower in bf16
    measurement(1.02, 1.3)  # within noise: not faster
    assert models.cuda_precision(ModelConfig())["bf16"] is False and inference_dtype("cpu") is torch.bfloat16


def test_an_unmeasured_or_bf16_less_cpu_stays_fp32_and_the_preset_key_overrides(measurement, monkeypatch):
    assert models.cuda_precision(ModelConfig())["bf16"] is False  # no file written yet
    measurement(2.0, 2.0)
    monkeypatch.setattr(cpu_precision, "cpu_has_bf16", lambda: False)
    assert models.cuda_precision(ModelConfig())["bf16"] is False
    assert models.cuda_precision(ModelConfig(cpu_precision="bf16"))["bf16"] is True
    assert models.cuda_precision(ModelConfig(cpu_precision="fp32"))["bf16"] is False
    with pytest.raises(DataError, match="cpu precision must be one of"):
        models.cuda_precision(ModelConfig(cpu_precision="half"))


@pytest.mark.slow
def test_bf16_autocast_keeps_the_sft_loss_of_the_tiny_model_close_to_fp32(tiny_model):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    losses = {}
    for bf16 in (False, True):
        model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
        torch.manual_seed(1)
        ids = torch.randint(10, model.config.vocab_size - 1, (4, 128))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        curve = []
        for _ in range(5):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            curve.append(loss.item())
        losses[bf16] = curve
    assert losses[True][-1] < losses[True][0]  # it trains under autocast
    for a, b in zip(losses[False], losses[True], strict=True):
        assert abs(a - b) / a < 0.02, losses
