"""Every shipped preset parses into every phase's typed settings (a typo in a TOML file fails here, not on a GPU)."""

import pytest

from agentrl.app.presets import load
from agentrl.core.config import REPO_ROOT

PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml"))
CPU_PRESETS = ("demo", "cpu_smol", "envs_demo", "mcp_example")  # models from runs/, stock TRL settings


def _value(v):
    return getattr(v, "value", v)  # TRL's config holds transformers' enums (optim, save_strategy, ...)


def test_the_three_presets_ship():
    assert {"demo", "colab_qwen3_4b", "gpu_qwen2_5_7b"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_builds_every_phase_config(name):
    from agentrl.train.grpo import reward_functions

    preset = load(name)
    corpus, index = preset.settings("corpus"), preset.settings("index")
    assert corpus.name and index.dense.embedder
    assert preset.eval().run.concurrency >= 1
    assert preset.curate().name
    sft = preset.sft()
    assert sft.model.name
    assert "grpo" in preset, "every preset needs a [grpo] table (the defaults train the tiny model)"
    grpo = preset.grpo()
    batch = grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps
    assert reward_functions(grpo)[0] and batch % grpo.num_generations == 0
    dpo = preset.dpo()  # [sample] / [dpo] optional, validated; DPO's model: its own, else the adapter's base
    assert preset.sample().k >= 2 and (dpo.model.name or dpo.adapter)
    if "rft" in preset:
        assert preset.rft().adapter
    if name not in CPU_PRESETS:  # GPU presets name hub models and continue from their own SFT adapter
        assert not grpo.model.name.startswith("runs/") and grpo.adapter == f"runs/sft/{sft.name}/adapter"


def test_unknown_preset_fields_are_named(tmp_path):
    from agentrl.core.io import DataError

    bad = tmp_path / "bad.toml"
    bad.write_text("[sft]\nlearning_rat = 1e-4\n")
    with pytest.raises(DataError, match=r"bad\.toml:2: unknown key 'sft\.learning_rat' \(did you mean "
                                        r"'sft\.learning_rate'\?\)"):
        load(bad)
    bad.write_text("[sft.model.lora]\nr = 'big'\n")
    with pytest.raises(DataError, match=r"sft\.model\.lora\.r: expected int"):
        load(bad)


@pytest.mark.parametrize("name", PRESETS)
def test_every_card_variant_of_a_preset_builds_the_trainers_arguments(name, tmp_path):
    """The documented GPU commands (`agentrl sft|grpo --config NAME`, with the detected card's [gpu.CARD] tables)
    get arguments TRL accepts: built here on CPU for the base preset and every card table it carries."""
    from agentrl.train import grpo, sft
    from agentrl.train.configs import trl_args
    from agentrl.train.gpu_plan import CARDS

    base = load(name)
    assert set(base.get("gpu") or {}) <= set(CARDS), "a [gpu.X] table names an unknown card"
    for card in [None, *(base.get("gpu") or {})]:
        p = load(name, card=card)
        s, g = p.sft(), p.grpo()
        args = sft.build_args(s, None, tmp_path, "transformers")
        assert (_value(args.save_strategy), args.save_steps) == (s.save_strategy, s.save_steps)
        gargs = trl_args(g, grpo.derived_args(g, "transformers", tmp_path))
        assert (gargs.loss_type, gargs.mask_truncated_completions, _value(gargs.optim)) == \
            (g.loss_type, g.mask_truncated_completions, g.optim)
        # numbers, never None: Unsloth's patched config replaces only a None (epsilon_high, mask_truncated_...)
        assert isinstance(gargs.epsilon_high, float) and isinstance(gargs.mask_truncated_completions, bool)
        assert gargs.epsilon_high == (g.epsilon_high if g.epsilon_high is not None else g.epsilon)
        if name not in CPU_PRESETS:  # GPU presets spell out DAPO's settings, so Unsloth's defaults never apply
            table = p.get("grpo")
            assert "epsilon_high" in table and "mask_truncated_completions" in table and "optim" in table


def test_an_unset_upper_clip_is_resolved_to_what_both_trainers_then_use(tmp_path):
    """TRL 1.14.2's GRPOTrainer uses epsilon for epsilon_high=None; Unsloth 2026.10.9's patched GRPOConfig turns
    None into 0.28 for an explicit loss_type="dapo" (5.0 for cispo) and leaves a number alone. agentrl resolves
    None when it builds TRL's config, before either sees it, so the value both train with is the one resolved."""
    from agentrl.train import grpo
    from agentrl.train.configs import GRPOSettings, trl_args, upper_clip

    dapo = GRPOSettings.of(loss_type="dapo", epsilon=0.2)
    assert dapo.epsilon_high is None and upper_clip(dapo) == 0.2
    args = trl_args(dapo, grpo.derived_args(dapo, "unsloth", tmp_path))
    assert (args.epsilon, args.epsilon_high, args.mask_truncated_completions) == (0.2, 0.2, False)
    assert upper_clip(GRPOSettings.of(loss_type="cispo")) == 5.0
    assert upper_clip(GRPOSettings.of(epsilon_high=0.28)) == 0.28
    bare = GRPOSettings()  # built without a table: TRL's defaults, resolved the same way
    assert bare.epsilon_high is None
    assert trl_args(bare, grpo.derived_args(bare, "transformers", tmp_path)).epsilon_high == 0.2


@pytest.mark.parametrize("backend", ["unsloth", "transformers"])
def test_sft_and_grpo_hand_gradient_checkpointing_to_the_trainer_alike(backend, tmp_path):
    """Unsloth checkpoints through its load-time setting (use_gradient_checkpointing="unsloth"), as its notebooks
    do: the Trainer's flag stays off for both phases; transformers + peft: the Trainer's flag is the preset's."""
    from agentrl.train import grpo, sft
    from agentrl.train.configs import trl_args

    preset = load("colab_qwen3_4b", ["sft.optim=adamw_torch", "grpo.optim=adamw_torch"])
    s, g = preset.sft(), preset.grpo()
    assert s.gradient_checkpointing and g.gradient_checkpointing
    flags = {sft.build_args(s, None, tmp_path, backend).gradient_checkpointing,
             trl_args(g, grpo.derived_args(g, backend, tmp_path)).gradient_checkpointing}
    assert flags == {backend == "transformers"}
