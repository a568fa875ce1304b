"""One owner for every knob: a preset's layers merge once (file, card, --set, flags, form), trainer tables are TRL's
field names plus agentrl's own, every bad value exits 2 naming where it was written before any model or index
loads, old keys name their new place, and the manifest records what the run used."""

import json
import subprocess
import sys

import pytest

from agentrl.app.commands import layers
from agentrl.app.presets import load
from agentrl.cli import build_parser, main
from agentrl.core.config import Layer
from agentrl.core.io import DataError
from conftest import ROOT

NO_MODEL = "grpo.model.name=/nonexistent/model"  # a run that got as far as loading a model would fail on this


@pytest.mark.parametrize(("args", "message"), [
    # the review's list: each one ended in a traceback (the last two after the model had loaded)
    (["grpo", "--set", "demo.heldout_questions=abc"],
     "--set demo.heldout_questions=abc: demo.heldout_questions is no longer a key here: use the search split"),
    (["grpo", "--set", "grpo.search.rewards.answer_f1=abc"],
     "--set grpo.search.rewards.answer_f1=abc: grpo.search.rewards.answer_f1: expected float, got 'abc'"),
    (["grpo", "--set", "grpo.importance_sampling_level=bogus"],
     "grpo.importance_sampling_level: 'bogus' is not one of 'token', 'sequence'"),
    (["grpo", "--set", "grpo.search.rewards.answer_f2=1"],
     "grpo.search.rewards.answer_f2: unknown reward (choose from answer_f1"),
    (["grpo", "--set", "grpo.lr_scheduler_type=cosine_wrong"], "grpo.lr_scheduler_type: 'cosine_wrong' is not one of"),
    (["grpo", "--set", "grpo.loss_type=dapoo"], "(did you mean 'dapo'?)"),
    (["grpo", "--env", "textgame", "--set", "grpo.textgame.rewards={answer_f1 = 1.0}"],
     "grpo.textgame.rewards.answer_f1: cannot train textgame"),
    (["grpo", "--max-steps", "many"], "argument --max-steps: invalid int value"),
    (["sft", "--set", "sft.batch_size=4"], "sft.batch_size is no longer a key here: use per_device_train_batch_size"),
    (["sft", "--set", "sft.output_dir=x"], "sft.output_dir: agentrl sets TRL's output_dir itself"),
    (["grpo", "--set", "grpo.trl={steps_per_generation = 4}"], "grpo.trl is no longer a key here: use its keys "
                                                               "directly in this table"),
    (["dpo", "--set", "dpo.loss_type=[\"sigmoid\", \"nope\"]"], "dpo.loss_type[1]: 'nope' is not one of 'sigmoid'"),
    (["dpo", "--set", "dpo.loss_type={a = 1}"], "dpo.loss_type: expected Literal or a list, got {'a': 1}"),
    (["dpo", "--set", "dpo.loss_type=3"], "dpo.loss_type: 3 is not one of 'sigmoid'"),
    (["sample", "--items", "-170"], "--items: sample.items: must be at least 1, got -170"),
    (["grpo", "--set", "grpo.per_device_train_batch_size=3"],
     "[grpo]: TRL's GRPOConfig refuses these settings"),
    (["grpo", "--set", "grpo.merge_for_generation=on", "--set", "grpo.use_vllm=true"],
     "grpo.merge_for_generation: vLLM generates from its own copy of the weights"),
    (["grpo", "--set", "grpo.merge_for_generation=yes"], "grpo.merge_for_generation: 'yes' is not one of"),
])
def test_every_bad_value_exits_2_naming_where_it_was_written_before_any_model_loads(args, message, capsys):
    """A model that does not exist is set too: a run that got to loading it would fail on that instead."""
    code = None
    try:
        code = main([*args[:1], "--config", "demo", "--set", NO_MODEL, *args[1:]])
    except SystemExit as exc:  # argparse: a flag of the wrong type
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "nonexistent" not in err


def test_a_value_in_the_preset_file_is_reported_at_its_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[grpo]\nname = "x"\n\n[grpo.search]\ntop_k = "many"\n')
    with pytest.raises(DataError, match=r"bad\.toml:5: grpo\.search\.top_k: expected int, got 'many'"):
        load(bad)
    bad.write_text('[grpo_sql]\nname = "x"\n')
    with pytest.raises(DataError, match=r"bad\.toml:1: \[grpo_sql\] tables are gone: .* are \[grpo\.sql\]"):
        load(bad)


def test_one_merge_in_one_order_file_then_card_then_set_then_flags_then_form():
    preset = load("colab_qwen3_4b", ["grpo.model.gpu_memory_utilization=0.3", "grpo.max_steps=7"], card="L4",
                  flags=[Layer({"grpo": {"max_steps": 8}}, "--max-steps")],
                  form={"grpo": {"learning_rate": 1e-5}})
    g = preset.grpo()
    assert g.model.load_in_4bit is False  # the L4 card's table over the file
    assert g.model.gpu_memory_utilization == 0.3  # --set over the card's table
    assert g.max_steps == 8 and g.learning_rate == 1e-5  # a flag over --set, the form over everything
    assert preset.merged.at("grpo.model.load_in_4bit").endswith("colab_qwen3_4b.toml:" + str(
        _line(preset.path, "[gpu.L4.grpo.model]") + 1))
    assert preset.merged.at("grpo.max_steps") == "--max-steps"
    assert preset.merged.at("grpo.learning_rate") == "the notebook's form"


def _line(path, text) -> int:
    return next(n for n, line in enumerate(open(path), start=1) if line.startswith(text))


@pytest.mark.slow
def test_a_flag_the_user_typed_wins_over_the_preset_source(tmp_path):
    """The demo preset builds its corpus from a QA file; --corpus-file replaces that source (it used to stop with
    "give exactly one of a QA file or a corpus file")."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": "Ed Wood\nEdward Davis Wood Jr. was an American filmmaker."})
                      + "\n")
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "corpus", "--config", "demo", "--corpus-file",
                          str(corpus), "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "1 passages from 1 documents" in out.stdout


def test_the_run_table_of_another_environment_is_its_own_table_not_a_merge():
    """`--env sql` on cpu_smol trains with [grpo.sql]'s settings and rewards, and [grpo]'s trainer settings."""
    args = build_parser().parse_args(["grpo", "--config", "cpu_smol", "--env", "sql"])
    g = load("cpu_smol", flags=layers(args, None)).grpo()
    assert g.env == "sql" and g.env_settings.train == 140 and g.rewards == {"sql_execution": 1.0, "format": 0.2}
    assert g.max_completion_length == 512 and g.per_device_train_batch_size == 4  # [grpo]'s, unchanged


def test_trainer_settings_read_trl_fields_as_attributes_with_trl_defaults():
    g = load("demo").grpo()
    assert g.per_device_train_batch_size == 16 and g.trl["per_device_train_batch_size"] == 16
    assert g.top_p == 1.0 and "top_p" not in g.trl  # TRL's default
    with pytest.raises(AttributeError, match="has no setting 'batch_size'"):
        _ = g.batch_size


def test_the_trl_config_is_agentrls_subclass_carrying_the_run_settings_and_pickles_as_trls(tmp_path):
    import pickle

    from trl import GRPOConfig

    from agentrl.train.configs import trl_args
    from agentrl.train.grpo import derived_args

    g = load("demo").grpo()
    args = trl_args(g, derived_args(g, "transformers", tmp_path))
    assert isinstance(args, GRPOConfig) and type(args).__name__ == "AgentGRPOConfig" and args.agentrl is g
    assert args.max_completion_length == 256 and args.reward_weights == [1.0, 0.2, 0.5]
    assert args.optim == "adamw_torch" and args.lr_scheduler_type == "constant" and args.epsilon_high == 0.2
    back = pickle.loads(pickle.dumps(args))
    assert type(back) is GRPOConfig and not hasattr(back, "agentrl") and back.max_completion_length == 256
    json.loads(args.to_json_string())  # TensorBoard writes it: agentrl's settings stay out of TRL's fields


def test_a_secret_given_on_the_command_line_is_masked_where_the_preset_is_recorded():
    preset = load("demo", ["eval.endpoint.api_key=sk-live-1234"])
    assert preset.describe()["sets"] == ["eval.endpoint.api_key=***"]
