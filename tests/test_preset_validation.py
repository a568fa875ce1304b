"""Presets are checked whole before anything loads (file:line + the nearest valid key), ``--set`` overrides are checked
the same way on every command and notebook, the settings builders and the notebook's form refuse unknown keys, an old
key is refused naming the new one, TRL's fields written directly in ``[sft]`` / ``[grpo]`` reach TRL's configs, and
``[grpo.model.lora]`` on top of an adapter is applied or refused."""

import json
import re

import pytest

from agentrl.app.presets import load
from agentrl.core.config import REPO_ROOT, key_line, parse_set
from agentrl.core.io import DataError

PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("name", PRESETS)
def test_every_shipped_preset_passes_the_whole_preset_check(name):
    preset = load(name)
    assert preset.path.endswith(f"{name}.toml") and preset.data["_path"] == preset.path and preset.name == name


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
             "[demo]\nsearch_task = 3\n": r":2: unknown key 'demo.search_task' .*'demo.search_tasks'",
             "[grpo.search]\ntop_kk = 3\n": r":2: unknown key 'grpo.search.top_kk' .*'grpo.search.top_k'",
             "[sft]\nmax_steps = 'many'\n": r":2: sft.max_steps: expected int"}
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(DataError, match=message):
            load(bad)


def test_key_line_finds_tables_dotted_keys_and_inline_tables():
    text = ("[eval]\nname = 'x'\nrun.concurrency = 3\n\n[eval.local]   # comment\nmodel = 'm'\n"
            "[grpo.search]\nrewards = {f1 = 1}\n")
    assert key_line(text, "eval.run.concurrency") == 3
    assert key_line(text, "eval.local") == 5 and key_line(text, "eval.local.model") == 6
    assert key_line(text, "grpo.search.rewards.f1") == 8  # inside an inline table: the line that holds it
    assert key_line(text, "sft.name") is None


def test_set_values_are_toml_values_and_a_bare_word_is_a_string():
    assert parse_set("grpo.max_steps=2") == (["grpo", "max_steps"], 2)
    assert parse_set("grpo.importance_sampling_level=sequence")[1] == "sequence"
    assert parse_set('grpo.adapter=""')[1] == ""
    assert parse_set("sft.learning_rate=1e-4")[1] == 1e-4 and parse_set("grpo.use_vllm=true")[1] is True
    assert parse_set("grpo.report_to=[]")[1] == []
    assert parse_set("grpo.search.rewards={format = 0.5}")[1] == {"format": 0.5}
    for bad in ("max_steps=2", "grpo.max_steps", "grpo..x=1"):
        with pytest.raises(DataError, match="expected section.key=value"):
            parse_set(bad)


def test_set_overrides_reach_the_phase_configs():
    preset = load("demo", ["grpo.max_steps=2", "grpo.importance_sampling_level=sequence",
                           "grpo.model.lora.dropout=0.1", "grpo.search.top_k=1"])
    cfg = preset.grpo()
    assert cfg.max_steps == 2 and cfg.importance_sampling_level == "sequence"
    assert cfg.trl["importance_sampling_level"] == "sequence"  # TRL's field, by TRL's name, in [grpo] itself
    assert cfg.model.lora.dropout == 0.1 and cfg.num_generations == 8  # the rest of the table is kept
    assert (cfg.env_settings.top_k, cfg.env_settings.passage_chars) == (1, 120)  # [grpo.search] merged key by key
    assert preset.describe()["sets"][0] == "grpo.max_steps=2"


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
                                 "--set", "grpo.importance_sampling_level=sequence"])
    assert collect_sets(marimo_style) == {"config": "demo", "set": [
        "grpo.max_steps=2", "grpo.use_vllm=false", "grpo.importance_sampling_level=sequence"]}
    env = parse_args("--config demo --set grpo.max_steps=2 --set sft.max_steps=3")
    assert collect_sets(env)["set"] == ["grpo.max_steps=2", "sft.max_steps=3"]
    assert collect_sets({"set": "grpo.max_steps=2"})["set"] == ["grpo.max_steps=2"]
    assert isinstance(cli_args("03_sft"), dict)


def test_settings_builders_and_the_notebooks_form_refuse_unknown_keys():
    from agentrl.app.notebook import oracle_config
    from agentrl.core.validate import from_dict
    from agentrl.data.curate import CurateConfig
    from agentrl.rollout.evaluate import EvalConfig
    from agentrl.train.configs import GRPOSettings, SFTSettings

    cases = ((lambda: SFTSettings.of(max_step=1), "sft.max_step", "sft.max_steps"),
             (lambda: GRPOSettings.of(eval_question=1), "grpo.eval_question", "grpo.eval_questions"),
             (lambda: GRPOSettings.of(search={"top_kk": 1}), "grpo.search.top_kk", "grpo.search.top_k"),
             (lambda: from_dict(CurateConfig, {"min_f": 1}, "data"), "data.min_f", "data.min_f1"),
             (lambda: from_dict(EvalConfig, {"run": {"concurency": 1}}, "eval"), "eval.run.concurency",
              "eval.run.concurrency"))
    for build, bad, meant in cases:
        with pytest.raises(DataError, match=rf"unknown key '{bad}' \(did you mean '{meant}'\?\)"):
            build()
    preset = load("demo")
    with pytest.raises(DataError, match=r"the notebook's form: unknown key 'sft.max_step' "):
        preset.with_layer({"sft": {"max_step": 3}}, "the notebook's form")
    changed = preset.with_layer({"sft": {"max_steps": 3, "model": {"name": "m"}}}, "the notebook's form").sft()
    assert (changed.max_steps, changed.model.name, changed.model.lora.r) == (3, "m", 32)  # the rest kept
    assert preset.sft().max_steps == 300  # the preset itself is not changed
    oracle = oracle_config(preset, limit=3)
    assert (oracle.policy, oracle.split, oracle.limit, oracle.env_settings.top_k) == ("oracle", "train", 3, 3)


def test_old_keys_are_refused_naming_where_they_went():
    cases = {"sft.epochs=2": "sft.epochs is no longer a key here: use num_train_epochs",
             "sft.lr_scheduler=linear": "use lr_scheduler_type", "grpo.batch_size=4": "use per_device_train_batch_size",
             "grpo.grad_accum=2": "use gradient_accumulation_steps", "dpo.warmup=0.1": "use warmup_steps",
             "grpo.trl.importance_sampling_level=sequence": "grpo.trl is no longer a key here: use its keys directly "
                                                            "in this table",
             "sft.trl.neftune_noise_alpha=5": "sft.trl is no longer a key here",
             "grpo.rewards={format = 1.0}": "use the environment's table: [grpo.<env>] rewards",
             "grpo.train_questions=30": "use the environment's table: [grpo.<env>] train",
             "grpo.max_searches=2": "use [<run>.<env>] max_tool_calls",
             "grpo.mixture={math = 1.0}": "use [grpo.mixed] mixture",
             "demo.train_questions=3": "use the search split: [eval.search] heldout"}
    for expr, message in cases.items():
        with pytest.raises(DataError, match=re.escape(f"--set {expr}: ") + ".*" + re.escape(message)):
            load("demo", [expr])


def test_grpo_env_tables_replace_the_grpo_env_tables_of_old(tmp_path):
    """``[grpo_sql]`` (a copy of [grpo] with fields replaced) is gone: the SQL run's environment is ``[grpo.sql]``
    inside [grpo], read when the run trains on sql (``--env sql``); an old table is refused naming the new one."""
    from agentrl.app.commands import preset_of
    from agentrl.cli import build_parser

    g = preset_of(build_parser().parse_args(["grpo", "--config", "cpu_smol", "--env", "sql"])).grpo()
    assert (g.env, g.env_settings.train, g.rewards) == ("sql", 140, {"sql_execution": 1.0, "format": 0.2})
    assert g.num_generations == 4  # the rest of [grpo] is the search run's, but not its folder: the name says sql
    assert g.name == "smol_grpo_search_sql" and load("cpu_smol").grpo().name == "smol_grpo_search"
    assert load("cpu_smol").grpo().rewards == {"answer_f1": 1.0, "format": 0.2}
    old = tmp_path / "old.toml"
    old.write_text('[grpo]\nname = "g"\n\n[grpo_sql]\nenv = "sql"\n')
    with pytest.raises(DataError, match=r"old\.toml:4: \[grpo_sql\] tables are gone: the sql environment's "
                                        r"settings and rewards are \[grpo\.sql\]"):
        load(old)


def test_trl_fields_name_the_nearest_trl_field_or_what_agentrl_sets_instead():
    with pytest.raises(DataError, match=r"did you mean 'grpo.importance_sampling_level'"):
        load("demo", ["grpo.importance_sampling_levl=sequence"])
    with pytest.raises(DataError, match=r"grpo.reward_weights: agentrl sets TRL's reward_weights itself \(the "
                                        r"rewards of the environment's table"):
        load("demo", ["grpo.reward_weights=[1.0]"])
    with pytest.raises(DataError, match=r"sft.output_dir: agentrl sets TRL's output_dir itself"):
        load("demo", ["sft.output_dir=elsewhere"])
    with pytest.raises(DataError, match=r"grpo.loss_type: 'dapoo' is not one of .*did you mean 'dapo'"):
        load("demo", ["grpo.loss_type=dapoo"])
    s = load("demo", ["sft.neftune_noise_alpha=5", "sft.lr_scheduler_type=linear"]).sft()
    assert (s.neftune_noise_alpha, s.lr_scheduler_type, s.learning_rate) == (5, "linear", 2e-3)
    assert s.trl["neftune_noise_alpha"] == 5


def test_the_derived_trl_field_lists_match_what_the_trainers_args_set(tmp_path):
    """agentrl.train.configs.DERIVED lists the TRL fields agentrl sets itself (a preset setting one is refused):
    each phase's derived arguments set every one of them, and besides them only fields computed from the preset's
    own values (the upper clip as a number, checkpointing by backend, the trackers, SFT's evaluation strategy)."""
    from agentrl.train import dpo, grpo, sft
    from agentrl.train.configs import DERIVED

    from_preset = {"epsilon_high", "gradient_checkpointing", "report_to", "eval_strategy"}
    preset = load("demo", ["grpo.save_steps=5", "sft.save_steps=5"])
    derived = {"grpo": grpo.derived_args(preset.grpo(), "transformers", tmp_path),
               "sft": sft.derived_args(preset.sft(), "transformers", None, tmp_path),
               "dpo": dpo.derived_args(preset.dpo(), tmp_path)}
    for kind, args in derived.items():
        owned = set(DERIVED["common"]) | set(DERIVED[kind])
        assert owned <= set(args) <= owned | from_preset, kind


def test_grpo_trl_fields_land_in_trls_config(tmp_path):
    from agentrl.train import grpo, sft
    from agentrl.train.configs import trl_args

    g = load("demo", ["grpo.importance_sampling_level=sequence", "grpo.num_iterations=2",
                      "grpo.disable_dropout=true"]).grpo()
    args = trl_args(g, grpo.derived_args(g, "transformers", tmp_path))
    assert (args.importance_sampling_level, args.num_iterations, args.disable_dropout) == ("sequence", 2, True)
    assert args.reward_weights == [1.0, 0.2, 0.5] and args.agentrl is g  # [grpo.search] rewards, in order
    s = load("demo", ["sft.neftune_noise_alpha=5"]).sft()
    assert sft.build_args(s, None, tmp_path, "transformers").neftune_noise_alpha == 5


def test_a_lora_shape_on_top_of_an_adapter_is_refused():
    with pytest.raises(DataError, match=r"--set grpo.model.lora.r=8: grpo.model.lora.r: GRPO continues from the "
                                        r"adapter .* shape"):
        load("demo", ["grpo.model.lora.r=8"])
    assert load("demo", ["grpo.model.lora.r=8", 'grpo.adapter=""']).grpo().adapter is None  # fresh LoRA


def test_lora_dropout_on_top_of_an_adapter_is_applied_and_recorded(tiny_model, small_index, tmp_path):
    """One GRPO step on the tiny model from a saved adapter (dropout 0) with [grpo.model.lora] dropout 0.3 and GSPO
    (importance_sampling_level = "sequence"): the loaded adapter trains with the new dropout and the manifest
    records both."""
    import torch

    from agentrl.core.heldout import HeldOut
    from agentrl.train.configs import GRPOSettings
    from agentrl.train.grpo import run_grpo
    from agentrl.train.models import LoraSettings, ModelConfig, load_for_training
    from conftest import HOTPOT

    fresh = load_for_training(ModelConfig(name=str(tiny_model), lora=LoraSettings(r=8, alpha=16, dropout=0.0)))
    fresh.model.save_pretrained(str(tmp_path / "adapter"))
    settings = GRPOSettings.of(model={"name": str(tiny_model), "backend": "transformers", "lora": {"dropout": 0.3}},
                               adapter=str(tmp_path / "adapter"), num_generations=4, per_device_train_batch_size=4,
                               max_steps=1, max_completion_length=64, max_tool_calling_iterations=1,
                               optim="adamw_torch", gradient_checkpointing=False, eval_questions=0, report_to=[],
                               log_completions=False, importance_sampling_level="sequence",
                               search={"index": str(small_index), "qa": str(HOTPOT), "train": 8, "heldout": 140,
                                       "top_k": 2, "passage_chars": 80})
    result = run_grpo(settings, HeldOut(), runs=tmp_path / "runs")
    drops = [m for mod in result.model.modules() if isinstance(getattr(mod, "lora_dropout", None), torch.nn.ModuleDict)
             for m in mod.lora_dropout.values()]
    assert drops and all(isinstance(m, torch.nn.Dropout) and m.p == 0.3 for m in drops)
    manifest = json.loads((tmp_path / "runs" / "grpo" / "grpo" / "manifest.json").read_text())
    assert manifest["trl"]["importance_sampling_level"] == "sequence" and manifest["lora_dropout"] == [0.3]
    assert manifest["config"]["trl"]["importance_sampling_level"] == "sequence"
    saved = json.loads((tmp_path / "runs" / "grpo" / "grpo" / "adapter" / "adapter_config.json").read_text())
    assert saved["lora_dropout"] == 0.3 and saved["r"] == 8


def test_a_set_key_wins_over_the_cards_table(capsys):
    from agentrl.app.commands import preset_of
    from agentrl.cli import build_parser

    args = build_parser().parse_args(["grpo", "--config", "colab_qwen3_4b", "--gpu", "L4",
                                      "--set", "grpo.model.gpu_memory_utilization=0.4"])
    assert preset_of(args).grpo().model.gpu_memory_utilization == 0.4  # [gpu.L4.grpo.model] says 0.65
    args = build_parser().parse_args(["grpo", "--config", "colab_qwen3_4b", "--gpu", "L4", "--max-steps", "3"])
    preset = preset_of(args)
    assert preset.grpo().model.gpu_memory_utilization == 0.65 and preset.card == "L4"
    # the card's table, then the flag: layers of the one merge, as the manifest records them
    assert preset.grpo().max_steps == 3 and preset.describe()["layers"] == [preset.path, "--max-steps"]
