"""Every shipped preset parses into every phase's typed config (a typo in a TOML file fails here, not on a GPU)."""

import pytest

from agentrl.core.config import REPO_ROOT, load_preset

PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml"))
CPU_PRESETS = ("demo", "cpu_smol", "envs_demo")  # the tiny or the SmolLM2 model from runs/, stock TRL settings


def test_the_three_presets_ship():
    assert {"demo", "colab_qwen3_4b", "gpu_qwen2_5_7b"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_builds_every_phase_config(name):
    from agentrl.data.curate import data_config
    from agentrl.data.pipeline import corpus_configs
    from agentrl.rollout.evaluate import eval_config
    from agentrl.train.grpo import grpo_config, reward_functions
    from agentrl.train.sft import sft_config

    preset = load_preset(name)
    corpus, index = corpus_configs(preset)
    assert corpus.name and index.dense.embedder
    assert eval_config(preset).run.concurrency >= 1
    assert data_config(preset).name
    assert sft_config(preset).model.name
    grpo = grpo_config(preset)
    assert "grpo" in preset, "every preset needs a [grpo] table (the defaults train the tiny model)"
    assert reward_functions(grpo)[0] and grpo.batch_size * grpo.grad_accum % grpo.num_generations == 0
    from agentrl.train.dpo import dpo_config
    from agentrl.train.rft import rft_config
    from agentrl.train.sample import sample_config

    assert sample_config(preset).k >= 2 and dpo_config(preset).model.name  # [sample] / [dpo] optional, validated
    if "rft" in preset:
        assert rft_config(preset).adapter
    if name not in CPU_PRESETS:  # GPU presets name hub models and continue from their own SFT adapter
        assert not grpo.model.name.startswith("runs/") and grpo.adapter == f"runs/sft/{sft_config(preset).name}/adapter"


def test_unknown_preset_fields_are_named(tmp_path):
    from agentrl.core.io import DataError
    from agentrl.train.sft import sft_config

    bad = tmp_path / "bad.toml"
    bad.write_text("[sft]\nlearning_rat = 1e-4\n")
    with pytest.raises(DataError, match="sft: unknown field 'learning_rat'"):
        sft_config(load_preset(bad))
    bad.write_text("[sft.model.lora]\nr = 'big'\n")
    with pytest.raises(DataError, match=r"sft\.model\.lora\.r: expected int"):
        sft_config(load_preset(bad))


@pytest.mark.parametrize("name", PRESETS)
def test_every_card_variant_of_a_preset_builds_the_trainers_arguments(name, tmp_path):
    """The documented GPU commands (`agentrl sft|grpo --config NAME`, with the detected card's [gpu.CARD] tables)
    get arguments TRL accepts: built here on CPU for the base preset and every card table it carries."""
    from agentrl.train import grpo, sft
    from agentrl.train.gpu_plan import CARDS, apply_card

    preset = load_preset(name)
    assert set(preset.get("gpu") or {}) <= set(CARDS), "a [gpu.X] table names an unknown card"
    for card in [None, *(preset.get("gpu") or {})]:
        p = apply_card(preset, card)
        s, g = sft.sft_config(p), grpo.grpo_config(p)
        args = sft.training_args(s, s.model.backend, None, tmp_path)
        assert args.save_strategy == ("steps" if s.save_steps else "no")
        gargs = grpo.training_args(g, grpo.reward_functions(g)[1], tmp_path)
        optim = getattr(gargs.optim, "value", gargs.optim)
        assert (gargs.loss_type, gargs.epsilon_high, gargs.mask_truncated_completions, optim) == \
            (g.loss_type, g.epsilon_high, g.mask_truncated_completions, g.optim)
        # numbers, never None: Unsloth's patched config replaces only a None (epsilon_high, mask_truncated_...)
        assert isinstance(gargs.epsilon_high, float) and isinstance(gargs.mask_truncated_completions, bool)
        if name not in CPU_PRESETS:  # GPU presets spell out DAPO's settings, so Unsloth's defaults never apply
            assert "epsilon_high" in p["grpo"] and "mask_truncated_completions" in p["grpo"] and "optim" in p["grpo"]


def test_an_unset_upper_clip_is_resolved_to_what_both_trainers_then_use(tmp_path):
    """TRL 1.14.2's GRPOTrainer uses epsilon for epsilon_high=None; Unsloth 2026.10.9's patched GRPOConfig turns
    None into 0.28 for an explicit loss_type="dapo" (5.0 for cispo) and leaves a number alone. agentrl resolves
    None before either sees it, so the value in the manifest is the value both train with."""
    from agentrl.core.config import to_dict
    from agentrl.train import grpo

    dapo = grpo.grpo_config({"grpo": {"loss_type": "dapo", "epsilon": 0.2}})
    assert dapo.epsilon_high == 0.2 and to_dict(dapo)["epsilon_high"] == 0.2
    args = grpo.training_args(dapo, [1.0], tmp_path, "unsloth")
    assert (args.epsilon, args.epsilon_high, args.mask_truncated_completions) == (0.2, 0.2, False)
    assert grpo.grpo_config({"grpo": {"loss_type": "cispo"}}).epsilon_high == 5.0
    assert grpo.grpo_config({"grpo": {"epsilon_high": 0.28}}).epsilon_high == 0.28
    bare = grpo.GRPOSettings()  # built without grpo_config: training_args resolves it too
    assert bare.epsilon_high is None and grpo.training_args(bare, [1.0, 0.1], tmp_path).epsilon_high == 0.2


@pytest.mark.parametrize("backend", ["unsloth", "transformers"])
def test_sft_and_grpo_hand_gradient_checkpointing_to_the_trainer_alike(backend, tmp_path):
    """Unsloth checkpoints through its load-time setting (use_gradient_checkpointing="unsloth"), as its notebooks
    do: the Trainer's flag stays off for both phases; transformers + peft: the Trainer's flag is the preset's."""
    from agentrl.train import grpo, sft

    preset = load_preset("colab_qwen3_4b")
    s, g = sft.sft_config(preset), grpo.grpo_config(preset)
    g.optim = s.optim = "adamw_torch"
    assert s.model.gradient_checkpointing and g.model.gradient_checkpointing
    flags = {sft.training_args(s, backend, None, tmp_path).gradient_checkpointing,
             grpo.training_args(g, [1.0, 0.1], tmp_path, backend).gradient_checkpointing}
    assert flags == {backend == "transformers"}
