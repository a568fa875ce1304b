"""The training notebooks' hyperparameter form: its fields come from the phase's settings with a help line each, and
what the user changes reaches the validated settings (and so the manifest) through the preset's own table."""

import pytest

from agentrl.app import hparams
from agentrl.core.config import load_preset, to_dict
from agentrl.core.io import DataError
from agentrl.train.grpo import grpo_config
from agentrl.train.sft import sft_config


def test_every_form_field_is_a_setting_with_a_one_line_help():
    preset = load_preset("demo")
    for section, settings in (("sft", sft_config(preset)), ("grpo", grpo_config(preset))):
        for name, (value, text) in hparams.fields(section, settings).items():
            assert text and "\n" not in text, name
            assert value is not None or name in ("check_questions",), name


def test_changed_values_reach_the_validated_settings_and_unchanged_ones_stay_out():
    preset = load_preset("demo")
    defaults = sft_config(preset)
    values = {name: value for name, (value, _) in hparams.fields("sft", defaults).items()}
    assert hparams.overrides(values, defaults) == {}  # the form untouched: the preset as it is
    values.update({"learning_rate": 1e-3, "model.lora.r": 8.0, "overlong": "truncate"})
    changes = hparams.overrides(values, defaults)
    assert changes == {"learning_rate": 1e-3, "model": {"lora": {"r": 8}}, "overlong": "truncate"}
    settings = sft_config(hparams.apply(preset, "sft", changes))
    effective = to_dict(settings)
    assert effective["learning_rate"] == 1e-3 and effective["model"]["lora"]["r"] == 8
    assert effective["model"]["lora"]["alpha"] == defaults.model.lora.alpha  # a nested table is merged, not replaced
    assert effective["model"]["name"] == defaults.model.name
    assert preset["sft"]["learning_rate"] != 1e-3  # the preset itself is not changed


def test_a_form_value_of_the_wrong_type_is_refused_by_the_preset_validation():
    preset = load_preset("demo")
    with pytest.raises(DataError, match="sft.packing"):
        sft_config(hparams.apply(preset, "sft", {"packing": "maybe"}))


def test_the_form_builds_one_widget_per_field():
    form = hparams.form("grpo", grpo_config(load_preset("demo")))
    assert set(form.value) == set(hparams.HELP["grpo"])
