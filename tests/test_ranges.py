"""Every setting carries its range where it is declared, and every command reaches the one check: a value outside a
declared range, drawn by hypothesis for any numeric key of any table and written as ``--set`` on any command, exits 2
naming where it came from before anything loads; the flags are the same keys written another way; a layer that sets a
table-valued setting replaces the table with one line; the evaluation budget is the environment's, one table for
every path that evaluates; a run of another environment is named after it."""

from __future__ import annotations

import dataclasses
import math
import typing

import annotated_types as at
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.app.commands import preset_of
from agentrl.app.presets import SCHEMA, load
from agentrl.cli import build_parser, main
from agentrl.core.validate import bare
from agentrl.envs import BUILTIN, registry
from agentrl.train import trl_fields
from agentrl.train.configs import DERIVED

NO_MODEL = ["--set", "grpo.model.name=\"/nonexistent/model\"", "--set", "sft.model.name=\"/nonexistent/model\""]
COMMANDS = [["gpu-plan", "--gpu", "T4"], ["eval"], ["curate", "runs/nothing"], ["sft"], ["grpo"], ["dpo"], ["sample"],
            ["corpus"], ["index", "--corpus", "runs/nothing"]]


def _numeric(tp) -> tuple[type, list] | None:
    """Return ``(int or float, its constraints)`` of a numeric field type (optional or not), None for another kind."""
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, type(int | None)) else (tp,)
    for a in args:
        if bare(a) in (int, float) and bare(a) is not bool:
            metadata = typing.get_args(a)[1:] if typing.get_origin(a) is typing.Annotated else ()
            return bare(a), [m for info in metadata for m in getattr(info, "metadata", [info])]
    return None


def _keys(cls, path: str, out: dict) -> dict:
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        if not f.init or "extra" in f.metadata or "moved" in f.metadata:
            continue
        tp = hints[f.name]
        found = _numeric(tp)
        if found is not None:
            out[f"{path}.{f.name}"] = found
            continue
        inner = [bare(a) for a in (typing.get_args(tp) or (tp,))]
        for a in inner:
            if isinstance(a, type) and dataclasses.is_dataclass(a):
                _keys(a, f"{path}.{f.name}", out)
    return out


def numeric_keys() -> dict[str, tuple[type, list]]:
    """Return every numeric key a preset (or ``--set``) can write: each table's fields, nested tables, each
    environment's table in ``[eval]`` and ``[grpo]``, TRL's fields of the trainer tables."""
    out: dict = {}
    for table, cls in SCHEMA.items():
        _keys(cls, table, out)
    for env in BUILTIN:
        for run in ("eval", "grpo"):
            found = _keys(registry.get(env).settings, f"{run}.{env}", {})
            if run == "grpo":  # the evaluation budget is [eval.<env>]'s only (test below)
                found = {k: v for k, v in found.items() if not k.endswith((".max_turns", ".max_new_tokens"))}
            out.update(found)
    for kind, tables in (("sft", ("sft", "rft")), ("grpo", ("grpo",)), ("dpo", ("dpo",))):
        owned = {**DERIVED["common"], **DERIVED[kind]}
        for name in trl_fields.fields(kind):
            found = None if name in owned else _numeric(trl_fields.field_type(kind, name))
            if found is not None:
                for table in tables:
                    out[f"{table}.{name}"] = found
    return out


KEYS = numeric_keys()


def violations(kind: type, constraints: list) -> list[str]:
    """Return TOML values of type ``kind`` outside ``constraints`` (each one bound crossed, and nan for a float)."""
    out = []
    for c in constraints:
        if isinstance(c, at.Ge):
            out.append(c.ge - 1 if kind is int else c.ge - 0.5)
        elif isinstance(c, at.Gt):
            out.append(c.gt)
        elif isinstance(c, at.Le):
            out.append(c.le + 1)
        elif isinstance(c, at.Lt):
            out.append(c.lt)
    values = [repr(int(v)) if kind is int else repr(float(v)) for v in out]
    return values + (["nan"] if kind is float else [])


def test_every_numeric_setting_declares_its_range_where_it_is_defined():
    """Every number a preset, a ``--set`` or a flag can set (agentrl's fields, every environment's, TRL's) carries its
    range on its type: none is a bare int or float."""
    assert len(KEYS) > 250
    bare_numbers = sorted(k for k, (kind, constraints) in KEYS.items() if not violations(kind, constraints))
    assert not bare_numbers, bare_numbers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(KEYS)), data=st.data(), command=st.sampled_from(COMMANDS))
def test_a_value_outside_a_declared_range_exits_2_naming_where_it_came_from_on_every_command(key, data, command,
                                                                                            capsys, tmp_path):
    kind, constraints = KEYS[key]
    value = data.draw(st.sampled_from(violations(kind, constraints)))
    capsys.readouterr()
    code = main([*command, "--config", "demo", *NO_MODEL, "--set", f"{key}={value}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--set {key}={value}: {key}: must be" in err, err  # the origin, the key, the range
    assert "nonexistent" not in err  # stopped before anything was loaded


@pytest.mark.parametrize(("args", "message"), [
    # flags are settings written another way: the same check, named by the flag
    (["eval", "--limit", "-1"], "--limit: eval.limit: must be at least 1, got -1"),
    (["eval", "--offset", "-5"], "--offset: eval.offset: must be at least 0, got -5"),
    (["eval", "--max-turns", "0"], "--max-turns: eval.search.max_turns: must be at least 1, got 0"),
    (["eval", "--max-new-tokens", "0"], "--max-new-tokens: eval.search.max_new_tokens: must be at least 1, got 0"),
    (["eval", "--set", "eval.search.heldout=-5", "--split", "heldout"],
     "--set eval.search.heldout=-5: eval.search.heldout: must be at least 0, got -5"),
    (["corpus", "--limit", "-1"], "--limit: corpus.limit: must be at least 1, got -1"),
    (["curate", "x", "--max-examples", "-1"], "--max-examples: data.max_examples: must be at least 1, got -1"),
    (["curate", "x", "--seed", "-1"], "--seed: data.seed: must be at least 0, got -1"),
    (["curate", "x", "--val-fraction", "1.5"], "--val-fraction: data.val_fraction: must be below 1, got 1.5"),
    (["dpo", "--beta", "-1"], "--beta: dpo.beta: must be greater than 0, got -1.0"),
    (["sample", "--k", "1"], "--k: sample.k: must be at least 2, got 1"),
    (["sft", "--epochs", "0"], "--epochs: sft.num_train_epochs: must be greater than 0, got 0.0"),
    (["grpo", "--set", "grpo.num_generations=0"], "--set grpo.num_generations=0: grpo.num_generations: must be at "
                                                  "least 2, got 0"),
    (["grpo", "--set", "grpo.temperature=-1"], "grpo.temperature: must be greater than 0, got -1.0"),
    (["grpo", "--set", "grpo.max_completion_length=-5"], "grpo.max_completion_length: must be at least 1, got -5"),
    (["sft", "--set", "sft.max_length=-1"], "--set sft.max_length=-1: sft.max_length: must be at least 1, got -1"),
    (["gpu-plan", "--gpu", "T4", "--set", "grpo.num_generations=0"], "grpo.num_generations: must be at least 2"),
    (["gpu-plan", "--gpu", "T4", "--set", "grpo.per_device_train_batch_size=-2"],
     "grpo.per_device_train_batch_size: must be at least 1, got -2"),
    # a name or a file is a range too: one of a set, an existing file
    (["grpo", "--env", "nosuch"], "--env: grpo.env: unknown environment 'nosuch'"),
    (["eval", "--env", "nosuch"], "--env: eval.env: unknown environment 'nosuch'"),
    (["grpo", "--set", "grpo.search.qa=\"/nonexistent.jsonl\""],
     "--set grpo.search.qa=\"/nonexistent.jsonl\": grpo.search.qa: no such file '/nonexistent.jsonl'"),
    (["sample", "--set", "sample.success_key=nosuch"],
     "--set sample.success_key=nosuch: sample.success_key: 'nosuch' is neither a metric of search episodes"),
    (["eval", "--set", "eval.heldout_qa=\"missing.jsonl\""], "eval.heldout_qa: no such file 'missing.jsonl'"),
    (["grpo", "--set", "grpo.sql.qa=\"nope.jsonl\"", "--env", "sql"], "grpo.sql.qa: no such file 'nope.jsonl' or "
                                                                       "one of 'synthetic'"),
])
def test_every_flag_and_key_reaches_the_one_check_and_names_its_origin(args, message, capsys):
    code = main([*args[:1], "--config", "demo", *NO_MODEL, *args[1:]])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "nonexistent/model" not in err


def test_a_preset_without_tables_never_names_a_flag_the_command_lacks(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.toml").write_text("")
    assert main(["grpo", "--config", "empty.toml"]) == 2
    err = capsys.readouterr().err
    assert "--qa" not in err and "search index not found" in err  # search's default QA file; the index is missing


def test_a_layer_that_sets_a_table_replaces_it_whole_and_says_so(capsys):
    def grpo(*args):
        return preset_of(build_parser().parse_args(["grpo", *args])).grpo()

    assert load("demo").grpo().rewards == {"answer_f1": 1.0, "format": 0.2, "tool_use": 0.5}
    capsys.readouterr()
    g = grpo("--config", "demo", "--set", "grpo.search.rewards={answer_f1 = 1.0}")
    assert g.rewards == {"answer_f1": 1.0}  # not merged key by key into the file's three
    err = capsys.readouterr().err
    assert "--set grpo.search.rewards={answer_f1 = 1.0}: grpo.search.rewards = {answer_f1 = 1.0} replaces " in err
    assert "demo.toml:" in err and err.count("replaces") == 1
    mixture = grpo("--config", "envs_demo", "--env", "mixed", "--set", "grpo.mixed.mixture={math = 1.0}").env_settings
    assert mixture.mixture == {"math": 1.0}
    # a key inside the table, written as its own key, is that key only
    assert grpo("--config", "demo", "--set", "grpo.search.rewards.answer_em=1.0").rewards == {
        "answer_f1": 1.0, "format": 0.2, "tool_use": 0.5, "answer_em": 1.0}
    # sections still merge key by key: the file's top_k stays beside the layer's passage_chars
    s = grpo("--config", "demo", "--set", "grpo.search.passage_chars=99").env_settings
    assert (s.top_k, s.passage_chars) == (2, 99)


def test_the_evaluation_budget_is_the_environments_one_table_read_by_every_evaluating_path(capsys, tiny_model):
    """``[eval.<env>] max_turns / max_new_tokens`` is the budget of agentrl eval, GRPO's held-out evaluations and
    sampling; training tables and the old per-path keys are refused naming it."""
    p = preset_of(build_parser().parse_args(["grpo", "--config", "demo", "--set", "eval.search.max_new_tokens=77",
                                             "--set", "eval.search.max_turns=3"]))
    assert p.grpo().budget == registry.Budget(max_turns=3, max_new_tokens=77)  # GRPO's evaluations and sampling
    from agentrl.rollout.evaluate import build_policy, build_task

    p = preset_of(build_parser().parse_args(["eval", "--config", "demo", "--env", "sql", "--max-new-tokens", "77",
                                             "--max-turns", "3"]))
    cfg = p.eval()
    task = build_task(cfg, p.data)  # agentrl eval's task, with every policy's tokens a turn
    assert (task.max_turns, task.max_new_tokens) == (3, 77)
    local = dataclasses.replace(cfg, policy="local", local=dataclasses.replace(cfg.local, model=str(tiny_model)))
    assert build_policy(local, task).cfg.max_new_tokens == 77
    endpoint = dataclasses.replace(cfg, policy="endpoint", endpoint=dataclasses.replace(
        cfg.endpoint, base_url="http://127.0.0.1:9/v1", model="m", api_key="k"))
    assert build_policy(endpoint, task).cfg.max_tokens == 77
    for key, place in (("grpo.search.max_turns=3", "the evaluation budget of search is its [eval.search] table's"),
                       ("eval.local.max_new_tokens=9", "use [eval.<env>] max_new_tokens"),
                       ("eval.endpoint.max_tokens=9", "use [eval.<env>] max_new_tokens"),
                       ("grpo.eval_max_new_tokens=9", "use [eval.<env>] max_new_tokens"),
                       ("sft.check_max_new_tokens=9", "use [eval.<env>] max_new_tokens"),
                       ("sample.max_new_tokens=9", "use [eval.<env>] max_new_tokens"),
                       ("demo_envs.textgame_max_turns=9", "use [eval.textgame] max_turns")):
        assert main(["grpo", "--config", "demo", *NO_MODEL, "--set", key]) == 2
        assert f"--set {key}: " in (err := capsys.readouterr().err) and place in err, err


def test_a_run_of_another_environment_than_the_presets_is_named_after_it():
    def settings(command, *args):
        p = preset_of(build_parser().parse_args([command, *args]))
        return p.grpo() if command == "grpo" else p.eval()

    assert settings("grpo", "--config", "cpu_smol").name == "smol_grpo_search"
    assert settings("grpo", "--config", "cpu_smol", "--env", "sql").name == "smol_grpo_search_sql"
    assert settings("grpo", "--config", "cpu_smol", "--env", "sql", "--name", "mine").name == "mine"
    assert settings("eval", "--config", "demo", "--env", "sql").name == "oracle_sql"
    assert settings("eval", "--config", "demo").name == "oracle"


def test_the_range_check_is_pydantics_on_the_declared_type():
    """The constraint objects are pydantic's (``Field(ge=...)``): the validator is the library's, the words ours."""
    from agentrl.core.validate import AtLeast1, check_range

    assert check_range(AtLeast1, 3, "x") == 3
    with pytest.raises(Exception, match="must be at least 1, got 0"):
        check_range(AtLeast1, 0, "x")
    assert not math.isnan(float(violations(float, [at.Ge(0)])[0]))


@pytest.mark.parametrize(("setting", "message"), [
    # a setting of several kinds (a table of weights or "uniform") says what is wrong with the kind it was given
    ("data.balance_target={a = -1.0}", "data.balance_target.a: must be at least 0, got -1.0"),
    ("data.balance_target=\"unifrom\"", "data.balance_target: 'unifrom' is not one of 'uniform' (did you mean "
                                        "'uniform'?)"),
    ("data.balance_target=[1]", "data.balance_target: expected a table or Literal, got [1]"),
    ("grpo.search.max_query_chars=\"long\"", "grpo.search.max_query_chars: expected int, got 'long'"),
    ("grpo.model.lora.r=[8]", "grpo.model.lora.r: expected int, got [8]"),
    # an unknown key with no near name lists the valid ones (all of them here) ...
    ("data.zzzzzz=1", "unknown key 'data.zzzzzz' (valid here: balance_by, balance_cap, balance_mode, "
                      "balance_target, dedup_questions, envs, max_examples, max_tool_calls, max_turns, min_em, "
                      "min_f1, min_grounded, min_judge, name, no_tool_errors, policies, require_answer, seed, "
                      "val_fraction)\n"),
])
def test_a_value_of_the_wrong_kind_or_an_unknown_key_says_what_is_expected_where(setting, message, capsys):
    assert main(["gpu-plan", "--config", "demo", "--gpu", "T4", "--set", setting]) == 2
    err = capsys.readouterr().err
    assert f"--set {setting}: " in err and message in err, err


def test_an_unknown_key_among_many_lists_the_first_25_and_how_many_there_are(capsys):
    assert main(["gpu-plan", "--config", "demo", "--gpu", "T4", "--set", "grpo.zzzzzzzzzz=1"]) == 2
    listed = capsys.readouterr().err.split("(valid here: ", 1)[1]
    names, _, rest = listed.partition(", ... (")
    assert len(names.split(", ")) == 25 and rest.rstrip().endswith(" keys))") and int(rest.split()[0]) > 100


def test_settings_built_in_code_get_the_same_check_without_an_origin():
    from agentrl.core.io import DataError
    from agentrl.train.configs import GRPOSettings

    for table, message in (({"num_generations": 0}, "grpo.num_generations: must be at least 2, got 0"),
                           ({"eval_every": -1}, "grpo.eval_every: must be at least 0, got -1")):
        with pytest.raises(DataError) as exc:
            GRPOSettings.of(**table)
        assert str(exc.value) == message  # no "where" to name: a table built in code


def test_a_layer_replaces_a_table_valued_setting_of_several_kinds_whole(tmp_path, capsys):
    preset = tmp_path / "p.toml"
    preset.write_text('[data]\nbalance_by = ["tool_calls"]\nbalance_target = {"1" = 1.0, "2" = 1.0}\n')
    p = preset_of(build_parser().parse_args(["curate", "x", "--config", str(preset),
                                             "--set", "data.balance_target={\"3\" = 2.0}"]))
    assert p.curate().balance_target == {"3": 2.0}
    assert "data.balance_target = {3 = 2.0} replaces {1 = 1.0, 2 = 1.0} (" in capsys.readouterr().err
