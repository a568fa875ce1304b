"""The training notebooks' hyperparameter form: its fields come from the phase's settings with a help line each, and
what the user changes reaches the validated settings (and so the manifest) as the last layer of the preset."""

import pytest

from agentrl.app import hparams
from agentrl.app.presets import load
from agentrl.core.config import to_dict
from agentrl.core.io import DataError

FORM = "the notebook's form"


def test_every_form_field_is_a_setting_with_a_one_line_help():
    preset = load("demo")
    for section, settings in (("sft", preset.sft()), ("grpo", preset.grpo())):
        for name, (value, text) in hparams.fields(section, settings).items():
            assert text and "\n" not in text, name
            assert value is not None or name in ("check_questions",), name


def test_changed_values_reach_the_validated_settings_and_unchanged_ones_stay_out():
    preset = load("demo")
    defaults = preset.sft()
    values = {name: value for name, (value, _) in hparams.fields("sft", defaults).items()}
    assert hparams.overrides(values, defaults) == {}  # the form untouched: the preset as it is
    values.update({"learning_rate": 1e-3, "model.lora.r": 8.0, "overlong": "truncate"})
    changes = hparams.overrides(values, defaults)
    assert changes == {"learning_rate": 1e-3, "model": {"lora": {"r": 8}}, "overlong": "truncate"}
    changed = preset.with_layer({"sft": changes}, FORM)
    effective = to_dict(changed.sft())
    assert effective["trl"]["learning_rate"] == 1e-3 and effective["model"]["lora"]["r"] == 8
    assert effective["model"]["lora"]["alpha"] == defaults.model.lora.alpha  # a nested table is merged, not replaced
    assert effective["model"]["name"] == defaults.model.name
    assert preset.sft().learning_rate != 1e-3 and preset.get("sft")["learning_rate"] != 1e-3  # the preset is kept
    assert changed.describe()["layers"] == [FORM]


def test_a_form_value_of_the_wrong_type_is_refused_by_the_preset_validation():
    preset = load("demo")
    with pytest.raises(DataError, match=f"{FORM}: sft.packing: "):
        preset.with_layer({"sft": {"packing": "maybe"}}, FORM)


def test_the_form_builds_one_widget_per_field():
    form = hparams.form("grpo", load("demo").grpo())
    assert set(form.value) == set(hparams.HELP["grpo"])
