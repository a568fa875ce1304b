"""Every shipped preset parses into every phase's typed config (a typo in a TOML file fails here, not on a GPU)."""

import pytest

from agentrl.config import REPO_ROOT, load_preset

PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml"))
CPU_PRESETS = ("demo", "cpu_smol", "envs_demo")  # the tiny or the SmolLM2 model from runs/, stock TRL settings


def test_the_three_presets_ship():
    assert {"demo", "colab_qwen3_4b", "gpu_qwen2_5_7b"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_builds_every_phase_config(name):
    from agentrl.curate import data_config
    from agentrl.evaluate import eval_config
    from agentrl.pipeline import corpus_configs
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
    if name not in CPU_PRESETS:  # GPU presets name hub models and continue from their own SFT adapter
        assert not grpo.model.name.startswith("runs/") and grpo.adapter == f"runs/sft/{sft_config(preset).name}/adapter"


def test_unknown_preset_fields_are_named(tmp_path):
    from agentrl.io import DataError
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
    from agentrl.gpu_plan import CARDS, apply_card
    from agentrl.train import grpo, sft

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
        if name not in CPU_PRESETS:  # GPU presets spell out DAPO's settings, so Unsloth's defaults never apply
            assert "epsilon_high" in p["grpo"] and "mask_truncated_completions" in p["grpo"] and "optim" in p["grpo"]
