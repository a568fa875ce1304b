"""`agentrl gpu-plan`: the memory estimate against published figures, the per-card presets, the command itself."""

import json

import pytest

from agentrl.app.presets import load
from agentrl.core.config import REPO_ROOT
from agentrl.train.gpu_plan import ARCHS, CARDS, GIB, arch_for, card_for, plan_grpo, plan_sft, plans

CPU_PRESETS = ("demo", "cpu_smol", "envs_demo", "mcp_example")  # the tiny or the SmolLM2 model from runs/: no GPU plan
GPU_PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml") if p.stem not in CPU_PRESETS)


def test_kv_cache_bytes_match_vllms_log_of_unsloths_qwen3_4b_t4_notebook():
    """Source: the vLLM log printed by Unsloth's "Qwen3 (4B) GRPO" Colab notebook on a Tesla T4
    (unslothai/notebooks, nb/Qwen3_(4B)-GRPO.ipynb, Unsloth 2025.5.7, vLLM 0.8.5.post1): "model weights take
    7.63GiB; ... the rest of the memory reserved for KV Cache is 1.68GiB", "# cuda blocks: 764", "Maximum
    concurrency for 2048 tokens per request: 5.97x", with max_lora_rank 32. vLLM's KV cache is
    2 (K, V) x layers x kv_heads x head_dim x 2 bytes per token in blocks of 16 tokens.
    Tolerance, against those logged figures: 1% on the KV cache (only rounding of the logged GiB), 2% on the
    weights (biases and buffers)."""
    qwen3 = ARCHS["qwen3-4b"]
    tokens = 764 * 16
    assert qwen3.kv_bytes_per_token() == 147456
    assert tokens * qwen3.kv_bytes_per_token() / GIB == pytest.approx(1.68, rel=0.01)
    assert tokens / 2048 == pytest.approx(5.97, abs=0.005)
    lora_slots = qwen3.layers * 32 * sum(i + o for i, o in qwen3.shapes().values()) * 2
    assert (qwen3.params * 2 + lora_slots) / GIB == pytest.approx(7.63, rel=0.02)


def test_the_issue_case_16_bit_qwen3_4b_at_0_6_on_a_t4_leaves_no_room_for_one_sequence():
    """The defect this fixes: 16-bit Qwen3-4B with gpu_memory_utilization 0.6 on a T4 (14.74 GiB). One
    4096-token sequence needs 0.5625 GiB of KV cache (4096 x 147456 bytes); the same log as above puts vLLM's
    runtime (activation peak 0.88 GiB + CUDA graphs 0.34 GiB) on top of the 7.5 GiB of weights. Checked against
    that log's figures through the estimate (exact to 0.01 GiB on the KV cache of one sequence)."""
    preset = load("colab_qwen3_4b", ["grpo.model.load_in_4bit=false", "grpo.model.gpu_memory_utilization=0.6"])
    p = plan_grpo(preset.grpo(), "T4", adapter_rank=64)
    assert p.vllm["kv_one_sequence"] == pytest.approx(0.56, abs=0.01)
    assert p.vllm["kv"] < p.vllm["kv_one_sequence"] and not p.fits
    assert any("gpu_memory_utilization" in a and "4-bit" in a for a in p.advice)


@pytest.mark.parametrize(("model", "four_bit", "stated_gb"), [
    ("llama-3.2-3b", True, 3.5), ("mistral-7b-v0.3", True, 5), ("llama-3.1-8b", True, 6), ("qwen2.5-14b", True, 8.5),
    ("llama-3.2-3b", False, 8), ("mistral-7b-v0.3", False, 19), ("llama-3.1-8b", False, 22), ("qwen2.5-14b", False, 33),
])
def test_sft_estimate_is_near_unsloths_stated_minimum_vram(model, four_bit, stated_gb):
    """Source: Unsloth's requirements page ("Fine-tuning VRAM requirements", unsloth.ai/docs, get-started/
    fine-tuning-for-beginners/unsloth-requirements): QLoRA 4-bit / LoRA 16-bit "absolute minimum" GB for 3B
    3.5/8, 7B 5/19, 8B 6/22, 14B 8.5/33. Compared at Unsloth's smallest setting (batch 1, 512 tokens, r 16,
    adamw_8bit, its offloaded gradient checkpointing), on the architectures those sizes usually mean.
    Tolerance, against those stated GB: 4-bit within -5%..+45% (we keep the 16-bit embeddings and LM head as
    bitsandbytes does, and count a chunk of fp32 logits; the page calls its figures an absolute minimum), 16-bit
    within 25%."""
    from agentrl.train.configs import SFTSettings

    s = SFTSettings.of(model={"name": model, "backend": "unsloth", "load_in_4bit": four_bit, "lora": {"r": 16}},
                       gradient_checkpointing=True, per_device_train_batch_size=1, max_length=512, optim="adamw_8bit")
    ratio = plan_sft(s, "A100-80").training * GIB / 1e9 / stated_gb
    assert (0.95 <= ratio <= 1.45) if four_bit else (0.75 <= ratio <= 1.25), ratio


@pytest.mark.parametrize("card", list(CARDS))
@pytest.mark.parametrize("name", GPU_PRESETS)
def test_every_gpu_preset_fits_the_cards_it_targets(name, card):
    """colab_qwen3_4b targets every card (T4 included, for GRPO: 4-bit with vLLM fast_inference); gpu_qwen2_5_7b
    the A100s and H100. No published figure is compared here: this is the estimate itself, whose parts the tests
    above hold against vLLM's T4 log (KV cache 1%, weights 2%) and Unsloth's stated minimum VRAM (4-bit -5..+45%,
    16-bit 25%). The training side must also leave 10% of its share free: the estimate does not model allocator
    fragmentation, and a preset planned at 97% of the card (gpu_qwen2_5_7b's old GRPO micro-batch of 16 on an
    80 GB card once the logits' gradient is counted) would fail on the first long batch."""
    targets = {"colab_qwen3_4b": set(CARDS), "gpu_qwen2_5_7b": {"A100-40", "A100-80", "H100"}}.get(name, set(CARDS))
    if card not in targets:
        pytest.skip(f"{name} does not target {card}")
    preset = load(name, card=card)
    for p in plans(preset.sft(), preset.grpo(), card):
        assert p.fits and p.training <= 0.9 * p.limit, (p.phase, p.training, p.limit, p.advice)


def test_trl_grpo_counts_the_16_bit_completion_logits_and_their_gradient():
    """What TRL 1.14.2 materialises (trainer/grpo_trainer.py `_full_logits_logps`, kernels/logprob_entropy.py):
    the model returns the micro-batch's completion logits (batch x completion x vocab, logits_to_keep) in 16-bit,
    the fused Triton log-prob/entropy kernel saves them for the backward pass and allocates a gradient of the
    same shape and dtype (`torch.empty_like(logits)`) there; no fp32 copy is made on CUDA. Exact arithmetic on
    those shapes, so no tolerance: 2 x 8 x 2048 x 152064 x 2 bytes = 9.28 GiB for gpu_qwen2_5_7b on an A100-80."""
    g = load("gpu_qwen2_5_7b", card="A100-80").grpo()
    p = plan_grpo(g, "A100-80")
    vocab = ARCHS["qwen2.5-7b"].vocab
    tokens = g.per_device_train_batch_size * g.max_completion_length
    assert p.parts["logits"] == round(2 * tokens * vocab * 2 / GIB, 2) == 9.28
    had = ["grpo.per_device_train_batch_size=16", "grpo.gradient_accumulation_steps=2"]  # the preset's old micro-batch
    old = plan_grpo(load("gpu_qwen2_5_7b", had, card="A100-80").grpo(), "A100-80")
    assert old.parts["logits"] == 18.56 and old.training > 0.95 * old.limit
    unsloth = plan_grpo(load("gpu_qwen2_5_7b", card="A100-40").grpo(), "A100-40")
    assert unsloth.parts["logits"] == round(2 * 1024 * vocab * 4 / GIB, 2)  # Unsloth: fp32 chunks of 1024 tokens


def test_colab_preset_on_a_t4_runs_grpo_in_4_bit_with_vllm_and_16_bit_on_an_l4():
    t4, l4 = (load("colab_qwen3_4b", card=c).grpo() for c in ("T4", "L4"))
    assert t4.model.load_in_4bit and t4.model.fast_inference and t4.model.backend == "unsloth"
    assert not l4.model.load_in_4bit and l4.model.fast_inference
    assert (t4.loss_type, t4.epsilon_high, t4.mask_truncated_completions) == ("dapo", 0.28, True)


def test_cards_are_recognised_from_nvidia_smi_names():
    assert card_for("Tesla T4", 15360) == "T4"
    assert card_for("NVIDIA L4", 23034) == "L4"
    assert card_for("NVIDIA A100-SXM4-40GB", 40960) == "A100-40"
    assert card_for("NVIDIA A100-SXM4-80GB", 81920) == "A100-80"
    assert card_for("NVIDIA H100 80GB HBM3", 81559) == "H100"
    assert card_for("NVIDIA RTX A6000", 49140) == "A100-40"  # unknown: the largest class its memory covers


def test_a_local_model_is_sized_from_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 4000, "tie_word_embeddings": True}))
    a = arch_for(str(tmp_path))
    assert a.kv_bytes_per_token() == 2 * 2 * 2 * 32 * 2 and a.tied
    from agentrl.core.io import DataError

    with pytest.raises(DataError, match="unknown model"):
        arch_for("someone/Mystery-3B")


def test_gpu_plan_command_prints_the_table_and_exits_1_when_it_does_not_fit(tmp_path, capsys):
    from agentrl.cli import main

    assert main(["gpu-plan", "--config", "colab_qwen3_4b", "--gpu", "T4"]) == 0
    out = capsys.readouterr().out
    assert "grpo on T4" in out and "KV cache" in out and "FITS" in out
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO_ROOT / "configs" / "colab_qwen3_4b.toml").read_text()
                   .replace("load_in_4bit = true                         # T4:", "load_in_4bit = false  # T4:"))
    assert main(["gpu-plan", "--config", str(bad), "--gpu", "T4"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert main(["gpu-plan", "--config", "colab_qwen3_4b", "--gpu", "V100"]) == 2


@pytest.mark.parametrize("model", ["Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen2.5-7B-Instruct", "unsloth/Qwen3-0.6B"])
def test_the_measured_models_config_has_the_shapes_the_plan_sizes(tmp_path, model):
    """`gpu-plan --measure` builds its random model from the config gpu_plan's shapes make (no network): read back
    as a local model, it is sized exactly as the hub id is."""
    from agentrl.train.gpu_measure import model_config

    (tmp_path / "config.json").write_text(json.dumps(model_config(model, cpu=False)))
    assert arch_for(str(tmp_path)) == arch_for(model)
    shrunk = model_config(model, cpu=True)
    assert shrunk["hidden_size"] == 64 and shrunk["model_type"] == model_config(model, cpu=False)["model_type"]


def test_a_measured_peak_over_the_card_says_what_to_change_and_one_off_the_plan_says_by_how_much():
    from agentrl.train.gpu_measure import Measured

    over = Measured("grpo", [9.0, 2.0, 2.2], 4096, peak_gib=15.0, plan_gib=12.0, limit_gib=14.7,
                    advice=["gradient_checkpointing = true in [grpo]"])
    assert over.step_s == pytest.approx(2.1)
    assert over.verdict().startswith("does not fit (15.5 of 14.7 GiB): gradient_checkpointing = true")
    off = Measured("sft", [3.0, 1.0], 1000, peak_gib=6.0, plan_gib=5.0, limit_gib=14.7, advice=[])
    assert off.verdict() == "fits (6.5 of 14.7 GiB); the plan is off by +20% (docs/colab.md)"
    near = Measured("sft", [3.0, 1.0], 1000, peak_gib=5.2, plan_gib=5.0, limit_gib=14.7, advice=[])
    assert near.verdict() == "fits (5.7 of 14.7 GiB)"
    assert Measured("sft", [1.0], 10, None, None, None, []).verdict().startswith("CPU: shapes shrunk")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "colab_qwen3_4b"])
def test_gpu_plan_measure_runs_real_sft_and_grpo_steps_here_and_prints_the_table(tmp_path, name):
    """The CPU mode of `agentrl gpu-plan --measure` (what CI can run): the preset's model at tiny shapes, 3 SFT
    steps and 2 GRPO steps in the SQL environment through the real entry point, the table and measure.json."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "agentrl.cli", "gpu-plan", "--config", name, "--measure"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.index("gpu-plan --measure:"):]
    assert "on the CPU at tiny shapes" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:] if line.split()[:1] in (["sft"],
                                                                                                     ["grpo"])}
    assert set(rows) == {"sft", "grpo"} and rows["sft"][1] == "3" and rows["grpo"][1] == "2"
    report = json.loads((tmp_path / "runs" / "gpu_plan" / name / "measure.json").read_text())
    assert [p["phase"] for p in report["phases"]] == ["sft", "grpo"] and report["device"] == "cpu"
    assert all(len(p["steps"]) == {"sft": 3, "grpo": 2}[p["phase"]] for p in report["phases"])
    assert (tmp_path / "runs" / "gpu_plan" / name / "manifest.json").is_file()
    assert not list((tmp_path / "runs" / "gpu_plan" / name).glob("scratch-*"))  # the random weights are deleted
