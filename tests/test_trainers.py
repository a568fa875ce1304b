"""agentrl's overrides of TRL internals live in one class (agentrl.train.trainers.AgentGRPOTrainer), each pinned to
the signature of the TRL it was written for, and TRL's own enumerations agentrl checks early agree with the TRL
installed."""

import dataclasses
import inspect
import json
import re

import pytest

from agentrl.train import trainers, trl_fields


def test_every_override_has_the_signature_of_the_pinned_trl():
    """When TRL changes one of these methods, this fails: the override must be read again against the new code."""
    from trl import GRPOTrainer

    for name, signature in trainers.OVERRIDES.items():
        assert str(inspect.signature(getattr(GRPOTrainer, name))) == signature, name


def test_the_one_trainer_class_holds_exactly_the_pinned_overrides():
    from trl import GRPOTrainer

    own = {n for n, v in vars(trainers.AgentGRPOTrainer).items() if callable(v) and hasattr(GRPOTrainer, n)}
    assert own == set(trainers.OVERRIDES)
    cls = trainers.grpo_trainer_class(GRPOTrainer)
    assert cls.__name__ == "AgentGRPOTrainer" and cls.__mro__[1:3] == (trainers.AgentGRPOTrainer, GRPOTrainer)
    assert trainers.grpo_trainer_class(GRPOTrainer) is cls  # combined once per TRL class


def test_equal_groups_are_masked_only_for_losses_normalised_by_the_token_count():
    """TRL 1.14's _compute_loss: grpo / sapo / luspo average each sequence, dr_grpo divides by a constant; dapo, bnpo,
    cispo and vespo divide by the batch's token count, which equal-reward groups inflate."""
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._compute_loss)
    start = source.index('if self.loss_type in ["grpo", "sapo"]:')  # the aggregation of the per-token loss
    block = source[start:source.index("Unknown loss type", start)]
    branches = re.split(r"\n\s*(?=elif self\.loss_type)", block)
    seen = set()
    for branch in branches:
        head, _, body = branch.partition("\n")
        losses = set(re.findall(r'"([a-z_]+)"', head))
        seen |= losses
        normalised_by_tokens = "num_items_in_batch" in body or "mask.sum().clamp" in body
        for loss in losses:
            assert (loss in trainers.MASKED_LOSSES) == normalised_by_tokens, loss
    assert seen == set(trl_fields.CHOICES["grpo"]["loss_type"])


def test_equal_groups_are_found_from_the_advantages():
    import torch

    adv = torch.tensor([0.0, 0.0, 0.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 1e-9, 0.0, 0.0])
    assert trainers.equal_groups(adv, 3).tolist() == [True, False, True, True]


def test_family_summary_averages_each_familys_reward_and_success():
    s = trainers.family_summary(["math", "code", "math", None], [1.0, 0.5, float("nan"), 2.0], [1.0, None, 0.0, 1.0])
    assert s == {"code/reward": 0.5, "math/reward": 1.0, "math/success": 0.5}


def test_trls_late_checked_choices_are_the_values_its_help_texts_name():
    """agentrl checks these string fields before anything loads (TRL only inside the training step)."""
    import trl

    for kind, fields in trl_fields.CHOICES.items():
        config = getattr(trl, trl_fields.CONFIGS[kind])
        helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(config)}
        for name, choices in fields.items():
            named = set(re.findall(r"`'?\"?([a-z_]+)\"?'?`", helps[name])) | set(re.findall(r"'([a-z_]+)'",
                                                                                             helps[name]))
            missing = [c for c in choices if c not in named and c not in ("none",)]
            assert not missing, (kind, name, missing, helps[name][:300])


@pytest.mark.slow
def test_the_cached_description_of_trls_fields_is_the_installed_trls(tmp_path, monkeypatch):
    """Read in a subprocess into an empty cache, it equals the description made in this process, where TRL is
    imported."""
    import json

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(trl_fields, "_FIELDS", None)
    import sys

    saved = sys.modules.pop("trl")  # as on a command that has not imported TRL: the subprocess reads it
    try:
        assert trl_fields.fields("grpo")
    finally:
        sys.modules["trl"] = saved
    cached = json.loads(trl_fields._cache_file().read_text())
    assert cached == json.loads(json.dumps(trl_fields.describe()))
    assert cached["grpo"]["max_completion_length"] == {"type": {"union": ["int", "none"]}, "default": 512}


@pytest.mark.parametrize(("kind", "name", "bad"), [("grpo", "loss_type", "ppo"), ("grpo", "scale_rewards", "yes"),
                                                   ("dpo", "loss_type", ["sigmoid", "ppo"]),
                                                   ("sft", "lr_scheduler_type", "stepwise")])
def test_a_value_outside_trls_choices_is_refused(kind, name, bad):
    from agentrl.core.validate import SettingError, coerce

    with pytest.raises(SettingError, match="is not one of"):
        coerce(trl_fields.field_type(kind, name), bad, f"{kind}.{name}")



def drops_earlier_turns(model_dir) -> str:
    """Return the model's chat template changed to drop the text of every assistant turn but the last (as reasoning
    templates drop earlier thinking): tool calls, tool results and the last turn render as before."""
    template = (model_dir / "chat_template.jinja").read_text()
    anchor = '{%- elif message.role == "assistant" %}'
    assert template.count(anchor) == 1
    return template.replace(anchor, anchor + "\n        {%- if not loop.last %}{%- set content = '' %}{%- endif %}")


def test_the_template_check_names_the_turn_a_template_re_renders(tiny_model):
    """The tiny model's own template keeps every earlier turn (one line); a template that drops an earlier
    assistant turn's text is refused naming the turn and the token."""
    from transformers import AutoTokenizer

    from agentrl.core.io import DataError
    from agentrl.train.template_check import check_template

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    tools = [{"type": "function", "function": {"name": "sql", "description": "Run a statement.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "description": "SQL"}}, "required": ["query"]}}}]
    assert check_template(tok, tools, None, "tiny").startswith("chat template of tiny: prefix-preserving over 5")
    with pytest.raises(DataError, match=r"adding turn 3 \(tool\) re-renders the conversation before it differently "
                                        r"from token \d+: 'I will look"):
        check_template(tok, tools, drops_earlier_turns(tiny_model), "tiny")


@pytest.mark.slow
def test_grpo_stops_before_training_on_a_model_whose_template_re_renders_earlier_turns(tmp_path, tiny_model):
    """TRL's own checks pass this template (it renders tool calls and results, its prefix check uses an empty
    assistant turn, and the tokenizer carries a response template); agentrl's check of a real conversation stops the
    run with exit 2 before the first step."""
    import shutil
    import subprocess
    import sys

    from trl.chat_template_utils import qwen3_template

    model = tmp_path / "tiny_bad_template"
    shutil.copytree(tiny_model, model)
    (model / "chat_template.jinja").write_text(drops_earlier_turns(tiny_model))
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "response_template": qwen3_template}))
    preset = tmp_path / "grpo.toml"
    preset.write_text('[grpo]\nname = "bad_template"\nenv = "math"\nnum_generations = 2\n'
                      'per_device_train_batch_size = 2\nmax_steps = 1\neval_questions = 0\nreport_to = []\n'
                      f'gradient_checkpointing = false\n[grpo.model]\nname = "{model}"\n')
    r = subprocess.run([sys.executable, "-m", "agentrl.cli", "grpo", "--config", str(preset)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "is not prefix-preserving: adding turn 3 (tool)" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "runs" / "grpo" / "bad_template" / "adapter").exists()
