"""Presets are checked whole before anything loads (file:line + the nearest valid key), ``--set`` overrides are checked
the same way on every command and notebook, ``*_config`` helpers refuse unknown overrides, ``[sft.trl]`` /
``[grpo.trl]`` reach TRL's configs, and ``[grpo.model.lora]`` on top of an adapter is applied or refused."""

import json

import pytest

from agentrl.app.presets import load
from agentrl.core.config import REPO_ROOT, key_line, parse_set
from agentrl.core.io import DataError

PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("name", PRESETS)
def test_every_shipped_preset_passes_the_whole_preset_check(name):
    assert load(name)["_path"].endswith(f"{name}.toml")


def test_a_misspelt_phase_table_names_the_file_line_and_the_table_meant(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[corpus]\nname = "x"\n\n[gpro]\nmax_steps = 2\n')
    with pytest.raises(DataError, match=r"bad\.toml:4: unknown table 'gpro' \(did you mean 'grpo'\?\)"):
        load(bad)


def test_unknown_preset_key_names_the_nearest_valid_one_at_any_depth(tmp_path):
    bad = tmp_path / "bad.toml"
    cases = {"[grpo]\nname = 'x'\nmax_step = 2\n": r":3: unknown key 'grpo.max_step' \(did you mean 'grpo.max_steps'",
             "[sft.model.lora]\nr = 8\ndropuot = 0.1\n": r":3: unknown key 'sft.model.lora.dropuot' .*lora.dropout'",
             "[gpu.T4.grpo.model]\nload_in_4bt = true\n": r":2: unknown key 'gpu.T4.grpo.model.load_in_4bt' .*4bit",
             "[gpu.T5.sft]\nmax_steps = 1\n": r":1: unknown key 'gpu.T5' \(did you mean 'gpu.T4'\?\)",
             "[eval]\nrun = {concurency = 2}\n": r":2: unknown key 'eval.run.concurency' .*'eval.run.concurrency'",
             "[demo]\ntrain_question = 3\n": r":2: unknown key 'demo.train_question' .*'demo.train_questions'",
             "[sft]\nmax_steps = 'many'\n": r":2: sft.max_steps: expected int"}
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(DataError, match=message):
            load(bad)


def test_key_line_finds_tables_dotted_keys_and_inline_tables():
    text = ("[eval]\nname = 'x'\nrun.max_turns = 3\n\n[eval.local]   # comment\nmodel = 'm'\n"
            "[grpo]\nrewards = {f1 = 1}\n")
    assert key_line(text, "eval.run.max_turns") == 3
    assert key_line(text, "eval.local") == 5 and key_line(text, "eval.local.model") == 6
    assert key_line(text, "grpo.rewards.f1") == 8  # inside an inline table: the line that holds it
    assert key_line(text, "sft.name") is None


def test_set_values_are_toml_values_and_a_bare_word_is_a_string():
    assert parse_set("grpo.max_steps=2") == (["grpo", "max_steps"], 2)
    assert parse_set("grpo.trl.importance_sampling_level=sequence")[1] == "sequence"
    assert parse_set('grpo.adapter=""')[1] == ""
    assert parse_set("sft.learning_rate=1e-4")[1] == 1e-4 and parse_set("grpo.use_vllm=true")[1] is True
    assert parse_set("grpo.report_to=[]")[1] == [] and parse_set("grpo.rewards={format = 0.5}")[1] == {"format": 0.5}
    for bad in ("max_steps=2", "grpo.max_steps", "grpo..x=1"):
        with pytest.raises(DataError, match="expected section.key=value"):
            parse_set(bad)


def test_set_overrides_reach_the_phase_configs():
    from agentrl.train.grpo import grpo_config

    preset = load("demo", ["grpo.max_steps=2", "grpo.trl.importance_sampling_level=sequence",
                           "grpo.model.lora.dropout=0.1"])
    cfg = grpo_config(preset)
    assert cfg.max_steps == 2 and cfg.trl == {"importance_sampling_level": "sequence"}
    assert cfg.model.lora.dropout == 0.1 and cfg.num_generations == 8  # the rest of the table is kept


@pytest.mark.parametrize("command", ["grpo", "sft", "eval", "curate runs/x", "corpus", "index --corpus runs/x",
                                     "gpu-plan --gpu T4", "demo"])
def test_a_bad_set_key_exits_2_naming_the_key_on_every_command_that_reads_a_preset(command, capsys):
    from agentrl.cli import main

    assert main([*command.split(), "--config", "demo", "--set", "grpo.bogus=1"]) == 2
    err = capsys.readouterr().err
    assert "--set grpo.bogus=1: unknown key 'grpo.bogus'" in err


def test_set_without_a_preset_is_a_usage_error(capsys):
    from agentrl.cli import main

    assert main(["sft", "--set", "sft.max_steps=1"]) == 2
    assert "--set needs --config" in capsys.readouterr().err


def test_notebooks_gather_set_flags_as_marimo_and_the_environment_give_them():
    from marimo._cli.parse_args import parse_args as marimo_parse  # what mo.cli_args() returns, parsed by marimo

    from agentrl.app.notebook import cli_args, collect_sets, parse_args

    marimo_style = marimo_parse(["--config", "demo", "--set", "grpo.max_steps=2", "--set", "grpo.use_vllm=false",
                                 "--set", "grpo.trl.importance_sampling_level=sequence"])
    assert collect_sets(marimo_style) == {"config": "demo", "set": [
        "grpo.max_steps=2", "grpo.use_vllm=false", "grpo.trl.importance_sampling_level=sequence"]}
    env = parse_args("--config demo --set grpo.max_steps=2 --set sft.max_steps=3")
    assert collect_sets(env)["set"] == ["grpo.max_steps=2", "sft.max_steps=3"]
    assert collect_sets({"set": "grpo.max_steps=2"})["set"] == ["grpo.max_steps=2"]
    assert isinstance(cli_args(), dict)


def test_config_helpers_refuse_unknown_overrides():
    from agentrl.app.notebook import oracle_config
    from agentrl.data.curate import data_config
    from agentrl.rollout.evaluate import eval_config
    from agentrl.train.grpo import grpo_config
    from agentrl.train.sft import sft_config

    preset = load("demo")
    for helper, bad in ((sft_config, "max_step"), (grpo_config, "eval_question"), (data_config, "min_f"),
                        (eval_config, "concurency"), (oracle_config, "top_kk")):
        with pytest.raises(DataError, match=f"unknown setting '{bad}'"):
            helper(preset, **{bad: 1})
    assert sft_config(preset, max_steps=3, model_name="m").model.name == "m"


def test_trl_tables_name_the_nearest_trl_field_or_the_agentrl_key_to_set_instead():
    from agentrl.train.grpo import grpo_config
    from agentrl.train.sft import sft_config

    with pytest.raises(DataError, match=r"did you mean 'grpo.trl.importance_sampling_level'"):
        load("demo", ["grpo.trl.importance_sampling_levl=sequence"])
    with pytest.raises(DataError, match=r"grpo.trl.learning_rate: .* from grpo.learning_rate; set that instead"):
        grpo_config(load("demo", ["grpo.trl.learning_rate=1.0"]))
    with pytest.raises(DataError, match=r"sft.trl.lr_scheduler_type: .* from sft.lr_scheduler"):
        sft_config(load("demo", ["sft.trl.lr_scheduler_type=linear"]))
    assert sft_config(load("demo", ["sft.trl.neftune_noise_alpha=5"])).trl == {"neftune_noise_alpha": 5}


def test_the_owned_trl_field_lists_match_what_training_args_set(tmp_path):
    from agentrl.train import grpo, sft
    from agentrl.train.trl_args import GRPO_OWNED, SFT_OWNED

    g = grpo.grpo_config(load("demo", ["grpo.save_steps=5"]))
    assert set(grpo.trainer_kwargs(g, [1.0], tmp_path, "transformers")) == set(GRPO_OWNED)
    s = sft.sft_config(load("demo", ["sft.save_steps=5"]))
    assert set(sft.trainer_kwargs(s, "transformers", None, tmp_path)) == set(SFT_OWNED)


def test_grpo_trl_fields_land_in_trls_config(tmp_path):
    from agentrl.train.grpo import grpo_config, training_args
    from agentrl.train.sft import sft_config
    from agentrl.train.sft import training_args as sft_args

    g = grpo_config(load("demo", ["grpo.trl.importance_sampling_level=sequence", "grpo.trl.num_iterations=2",
                                  "grpo.trl.disable_dropout=true"]))
    args = training_args(g, [1.0, 0.2, 0.5], tmp_path, "transformers")
    assert (args.importance_sampling_level, args.num_iterations, args.disable_dropout) == ("sequence", 2, True)
    s = sft_config(load("demo", ["sft.trl.neftune_noise_alpha=5"]))
    assert sft_args(s, "transformers", None, tmp_path).neftune_noise_alpha == 5


def test_a_lora_shape_on_top_of_an_adapter_is_refused():
    from agentrl.train.grpo import grpo_config

    with pytest.raises(DataError, match=r"grpo.model.lora.r: GRPO continues from the adapter .* shape"):
        grpo_config(load("demo", ["grpo.model.lora.r=8"]))
    assert grpo_config(load("demo", ["grpo.model.lora.r=8", 'grpo.adapter=""'])).adapter is None  # fresh LoRA


def test_lora_dropout_on_top_of_an_adapter_is_applied_and_recorded(tiny_model, small_index, tmp_path):
    """One GRPO step on the tiny model from a saved adapter (dropout 0) with [grpo.model.lora] dropout 0.3 and GSPO
    (importance_sampling_level = "sequence"): the loaded adapter trains with the new dropout and the manifest
    records both."""
    import torch

    from agentrl.train.grpo import GRPOSettings, run_grpo
    from agentrl.train.models import LoraSettings, ModelConfig, load_for_training
    from conftest import check_preset

    fresh = load_for_training(ModelConfig(name=str(tiny_model), lora=LoraSettings(r=8, alpha=16, dropout=0.0)))
    fresh.model.save_pretrained(str(tmp_path / "adapter"))
    settings = GRPOSettings(model=ModelConfig(name=str(tiny_model), backend="transformers",
                                              lora=LoraSettings(dropout=0.3)),
                            adapter=str(tmp_path / "adapter"), num_generations=4, batch_size=4, max_steps=1,
                            max_completion_length=64, max_tool_calling_iterations=1, train_questions=8, top_k=2,
                            passage_chars=80, eval_questions=0, report_to=[], log_completions=False,
                            trl={"importance_sampling_level": "sequence"})
    result = run_grpo(settings, check_preset(small_index), runs=tmp_path / "runs")
    drops = [m for mod in result.model.modules() if isinstance(getattr(mod, "lora_dropout", None), torch.nn.ModuleDict)
             for m in mod.lora_dropout.values()]
    assert drops and all(isinstance(m, torch.nn.Dropout) and m.p == 0.3 for m in drops)
    manifest = json.loads((tmp_path / "runs" / "grpo" / "grpo" / "manifest.json").read_text())
    assert manifest["trl"] == {"importance_sampling_level": "sequence"} and manifest["lora_dropout"] == [0.3]
    assert manifest["config"]["trl"] == {"importance_sampling_level": "sequence"}
    saved = json.loads((tmp_path / "runs" / "grpo" / "grpo" / "adapter" / "adapter_config.json").read_text())
    assert saved["lora_dropout"] == 0.3 and saved["r"] == 8


def test_a_set_key_wins_over_the_cards_table(capsys):
    from agentrl.cli import _preset, build_parser
    from agentrl.train.grpo import grpo_config

    args = build_parser().parse_args(["grpo", "--config", "colab_qwen3_4b", "--gpu", "L4",
                                      "--set", "grpo.model.gpu_memory_utilization=0.4"])
    assert grpo_config(_preset(args)).model.gpu_memory_utilization == 0.4  # [gpu.L4.grpo.model] says 0.65
    args = build_parser().parse_args(["grpo", "--config", "colab_qwen3_4b", "--gpu", "L4"])
    assert grpo_config(_preset(args)).model.gpu_memory_utilization == 0.65
