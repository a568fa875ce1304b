"""Learning from the model's own attempts: sampling k attempts per training item, the difficulty filter, preference
pairs and successes exported from them, and a real DPO step (TRL's DPOTrainer) on top of the SFT'd tiny model."""

import json

import pytest

from agentrl.core.io import DataError, read_json, read_jsonl
from agentrl.data.pairs import export_pairs, export_successes, pair_row
from agentrl.train.sample import summary_line
from conftest import HOTPOT, ROOT, check_preset


def preference_preset(small_index, adapter, tiny_model) -> dict:
    """Search over the small index; GRPO's rows 0..23 train, 24..27 are held out."""
    preset = check_preset(small_index)
    preset["grpo"] = {"env": "search", "qa": str(HOTPOT), "train_questions": 24, "eval_questions": 4,
                      "adapter": str(adapter), "temperature": 1.0, "top_k": 2, "passage_chars": 120,
                      "model": {"name": str(tiny_model)}}
    preset["sample"] = {"name": "s", "k": 3, "items": 8, "max_new_tokens": 48, "batch": 24,
                        "success_key": "format", "success_min": 0.5}
    return preset


@pytest.fixture(scope="module")
def sft_adapter(tmp_path_factory, sft_data, tiny_model):
    """A briefly SFT'd tiny model's LoRA adapter: what DPO and rejection-sampling SFT continue (8 steps keep the
    tests fast; conftest's 300-step ``trained`` takes minutes)."""
    from agentrl.train.models import LoraSettings, ModelConfig
    from agentrl.train.sft import SFTSettings, run_sft

    settings = SFTSettings(name="q", data=str(sft_data), max_steps=8, learning_rate=2e-3, lr_scheduler="constant",
                           warmup=0.0, batch_size=4, grad_accum=1, max_length=2048, logging_steps=4, report_to=[],
                           check_questions=0, model=ModelConfig(name=str(tiny_model),
                                                                lora=LoraSettings(r=8, alpha=16, dropout=0.0)))
    return run_sft(settings, runs=tmp_path_factory.mktemp("qsft")).out / "adapter"


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, small_index, tiny_model):
    """k attempts of the base tiny model (random weights: varied text at temperature 1, never well-formed)."""
    from agentrl.train.sample import run_sample, sample_config

    preset = preference_preset(small_index, "none", tiny_model)
    runs = tmp_path_factory.mktemp("pref")
    result = run_sample(sample_config(preset), preset, runs=runs)
    return preset, runs, result


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, sampled):
    """A sample run whose attempts are, per item, the oracle's (real trajectories, f1 1) and the tiny model's:
    success = f1 >= 0.5, so every item the oracle answers has a success and a failure."""
    from agentrl.core.io import write_json, write_jsonl
    from agentrl.rollout.evaluate import eval_config, run_eval
    from agentrl.train.sample import succeeded, training_items

    preset, runs, _ = sampled
    src = runs / "sample" / "s"
    out = tmp_path_factory.mktemp("mixed") / "m"
    tiny = read_jsonl(src / "attempts" / "a0" / "trajectories.jsonl")
    rows = training_items(preset)[1][:8]
    cfg = eval_config(preset, policy="oracle", top_k=2, passage_chars=120)
    cfg.run.progress = False
    run_eval(cfg, preset, overwrite=True, out_dir=out / "attempts" / "a0", rows=rows)
    (out / "attempts" / "a1").mkdir(parents=True)
    write_jsonl(out / "attempts" / "a1" / "trajectories.jsonl", tiny)
    oracle = {t["id"]: t for t in read_jsonl(out / "attempts" / "a0" / "trajectories.jsonl")}
    outcomes = [{"id": t["id"], "question": t["question"],
                 "success": [succeeded(oracle[t["id"]], "f1", 0.5), succeeded(t, "f1", 0.5)]} for t in tiny]
    write_jsonl(out / "outcomes.jsonl", [{**o, "successes": sum(o["success"])} for o in outcomes])
    manifest = read_json(src / "manifest.json")
    write_json(out / "manifest.json", {**manifest, "config": {**manifest["config"], "k": 2}})
    return out


def test_sampling_writes_k_attempts_per_training_item_and_the_difficulty_filter(sampled):
    _, runs, result = sampled
    out = runs / "sample" / "s"
    outcomes = read_jsonl(out / "outcomes.jsonl")
    assert len(outcomes) == 8 and all(len(o["success"]) == 3 for o in outcomes)
    kept = read_json(out / "filtered.json")
    assert kept == [o["id"] for o in outcomes if 0 < o["successes"] < 3]
    manifest = read_json(out / "manifest.json")
    assert manifest["phase"] == "sample" and manifest["counts"]["kept"] == len(kept) == result["counts"]["kept"]
    assert manifest["counts"]["all_success"] + manifest["counts"]["all_failure"] + len(kept) == 8
    assert "difficulty filter: kept" in summary_line(result, 3)
    # at [grpo]'s temperature, not greedy: k greedy attempts would all be the same
    assert manifest["config"]["temperature"] == 1.0 and manifest["config"]["success_key"] == "format"
    assert len(list((out / "attempts").glob("a*/trajectories.jsonl"))) == 3


def test_held_out_items_never_enter_the_sampled_items_or_the_exports(sampled, tmp_path):
    preset, runs, _ = sampled
    out = runs / "sample" / "s"
    manifest = read_json(out / "manifest.json")
    held = set(manifest["heldout_ids"])
    assert len(held) == 4
    sampled_ids = {o["id"] for o in read_jsonl(out / "outcomes.jsonl")}
    assert not held & sampled_ids
    # a sample run whose items include a held-out one (tampered with) is refused, nothing written
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("outcomes.jsonl",):
        (bad / name).write_text((out / name).read_text())
    (bad / "attempts").symlink_to(out / "attempts")
    first = read_jsonl(out / "outcomes.jsonl")[0]["id"]
    (bad / "manifest.json").write_text(json.dumps({**manifest, "heldout_ids": [first]}))
    with pytest.raises(DataError, match="held-out"):
        export_pairs(bad)
    with pytest.raises(DataError, match="held-out"):
        export_successes(bad)
    assert not (bad / "pairs").exists() and not (bad / "successes").exists()


def test_pairs_are_a_success_and_a_failure_of_one_item_with_assistant_turns_as_completions(mixed):
    out = mixed
    counts = export_pairs(out)
    rows = read_jsonl(out / "pairs" / "train.jsonl")
    assert counts["pairs"] == len(rows) > 0
    outcomes = {o["id"]: o for o in read_jsonl(out / "outcomes.jsonl")}
    for r in rows:
        assert outcomes[r["id"]]["successes"] == 1
        assert [m["role"] for m in r["chosen"]] == ["assistant"] == [m["role"] for m in r["rejected"]]
        assert r["chosen"] != r["rejected"]
        assert r["prompt"][0]["role"] == "system" and r["prompt"][1]["role"] == "user"
        assert json.loads(r["tools"])[0]["function"]["name"] == "search"


def test_a_pair_shares_its_common_turns_with_tool_results_as_prompt():
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "q"}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}]}
    result = {"role": "tool", "name": "search", "content": "Doc 1 ..."}
    good = {"messages": [system, user, call, result, {"role": "assistant", "content": "<answer>A</answer>"}]}
    bad = {"messages": [system, user, call, result, {"role": "assistant", "content": "<answer>B</answer>"}]}
    row = pair_row("1", good, bad)
    assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "tool"]
    assert row["prompt"][2]["tool_calls"][0]["function"]["arguments"] == {"query": "x"}
    assert row["chosen"] == [{"role": "assistant", "content": "<answer>A</answer>"}]
    assert row["rejected"] == [{"role": "assistant", "content": "<answer>B</answer>"}]
    assert pair_row("1", good, good) is None  # identical conversations make no pair


def test_successes_export_as_sft_data(mixed):
    from agentrl.data.export import load_trl_dataset

    out = mixed
    counts = export_successes(out)
    assert counts["rows"] >= counts["items_with_success"] > 0
    rows = load_trl_dataset(out / "successes" / "trl" / "train.jsonl")
    ids = {o["id"] for o in read_jsonl(out / "outcomes.jsonl") if o["successes"]}
    assert set(rows["id"]) <= ids


def test_dpo_trains_the_sft_adapter_a_real_step_against_its_frozen_copy(mixed, sft_adapter, tiny_model, tmp_path):
    from safetensors.torch import load_file

    from agentrl.train.dpo import dpo_config, run_dpo

    if not (mixed / "pairs").exists():
        export_pairs(mixed)
    cfg = dpo_config({"sft": {"model": {"name": str(tiny_model)}},
                      "dpo": {"name": "d", "data": str(mixed), "adapter": str(sft_adapter), "max_steps": 2,
                              "batch_size": 2, "learning_rate": 1e-3, "beta": 0.1}})
    m = run_dpo(cfg, runs=tmp_path)
    assert m["steps"] == 2 and len(m["history"]) == 2
    # step 1 starts at the reference (the adapter equals its frozen copy): loss log 2, zero margin
    assert m["history"][0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert m["history"][0]["rewards/margins"] == pytest.approx(0.0, abs=1e-4)
    adapter = tmp_path / "dpo" / "d" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "ref").exists()
    assert read_json(tmp_path / "dpo" / "d" / "manifest.json")["phase"] == "dpo"
    before = load_file(sft_adapter / "adapter_model.safetensors")
    after = load_file(adapter / "adapter_model.safetensors")
    assert before.keys() == after.keys()
    assert any(not (before[k] == after[k]).all() for k in before)


def test_agentrl_dpo_runs_the_demo_presets_dpo_table(mixed, sft_adapter, tiny_model, tmp_path):
    import subprocess
    import sys
    import tomllib

    demo = tomllib.loads((ROOT / "configs" / "demo.toml").read_text())
    if not (mixed / "pairs").exists():
        export_pairs(mixed)
    lines = [f"[dpo]\ndata = '{mixed}'\nadapter = '{sft_adapter}'"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in demo["dpo"].items() if k not in ("data", "adapter")]
    lines += ["[dpo.model]", f"name = '{tiny_model}'", "backend = 'transformers'"]
    (tmp_path / "p.toml").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", "dpo", "--config", str(tmp_path / "p.toml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{demo['dpo']['max_steps']} DPO steps on transformers" in proc.stdout, proc.stdout
    assert "loss 0.6931 (step 1)" in proc.stdout, proc.stdout
    assert "{'loss'" not in proc.stdout and f"DPO {demo['dpo']['name']}: step" in proc.stdout, proc.stdout
    run = tmp_path / "runs" / "dpo" / demo["dpo"]["name"]
    assert (run / "adapter" / "adapter_config.json").is_file()
    assert [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()
            if "loss" in line][:1] == [1]  # every logged step kept, as SFT and GRPO keep theirs


def test_unknown_dpo_key_is_named_and_missing_pairs_say_how_to_make_them(tmp_path):
    from agentrl.train.dpo import dpo_config, run_dpo

    with pytest.raises(DataError, match="dpo: unknown field 'betta'"):
        dpo_config({"dpo": {"betta": 0.1}})
    with pytest.raises(DataError, match="agentrl export --pairs"):
        run_dpo(dpo_config({"dpo": {"data": str(tmp_path)}}), runs=tmp_path)


def test_equal_reward_groups_are_found_and_grpo_trains_only_on_the_kept_items(tmp_path):
    import torch

    from agentrl.train.group_filter import equal_groups, kept_items

    adv = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.7, -0.7, 0.7, -0.7, 0.0, 0.0, 0.0, 1e-9])
    assert equal_groups(adv, 4).tolist() == [True, False, True]
    rows = [{"id": str(i), "question": f"q{i}"} for i in range(6)]
    (tmp_path / "filtered.json").write_text(json.dumps(["1", "4", "99"]))
    assert [r["id"] for r in kept_items(rows, tmp_path)] == ["1", "4"]
    (tmp_path / "filtered.json").write_text(json.dumps(["99"]))
    with pytest.raises(DataError, match="none of its 1 kept items"):
        kept_items(rows, tmp_path / "filtered.json")


def test_rejection_sampling_sft_continues_the_sft_adapter_on_the_successes(mixed, sft_adapter, tiny_model, tmp_path):
    from safetensors.torch import load_file

    from agentrl.train.rft import rft_config
    from agentrl.train.sft import run_sft

    if not (mixed / "successes").exists():
        export_successes(mixed)
    preset = {"sft": {"name": "sft", "model": {"name": str(tiny_model)}, "report_to": [], "check_questions": 0,
                      "max_length": 2048, "learning_rate": 1e-3},
              "rft": {"name": "r", "data": str(mixed / "successes"), "adapter": str(sft_adapter), "max_steps": 2,
                      "batch_size": 2, "grad_accum": 1, "logging_steps": 1}}
    cfg = rft_config(preset)
    assert (cfg.name, cfg.adapter, cfg.learning_rate, cfg.max_steps) == ("r", str(sft_adapter), 1e-3, 2)
    result = run_sft(cfg, preset, runs=tmp_path)
    assert result.metrics["steps"] == 2
    before = load_file(sft_adapter / "adapter_model.safetensors")
    after = load_file(result.out / "adapter" / "adapter_model.safetensors")
    assert before.keys() == after.keys() and any(not (before[k] == after[k]).all() for k in before)
    with pytest.raises(DataError, match=r"no \[rft\] table"):
        rft_config({"sft": {}})


def test_the_commands_refuse_bad_input_with_exit_2_and_a_named_cause(tmp_path, capsys):
    from agentrl.cli import main

    (tmp_path / "p.toml").write_text("[sample]\nk = 1\n")
    assert main(["sample", "--config", str(tmp_path / "p.toml")]) == 2
    assert "sample.k must be at least 2" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text("[sample]\nkk = 4\n")
    assert main(["sample", "--config", str(tmp_path / "p.toml")]) == 2
    assert "p.toml:2: unknown key 'sample.kk' (did you mean 'sample.k'?)" in capsys.readouterr().err
    assert main(["export", "--pairs", str(tmp_path)]) == 2
    assert "not a sample run" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text("[dpo]\nbeta = 0.1\n")
    assert main(["rft", "--config", str(tmp_path / "p.toml")]) == 2
    assert "no [rft] table" in capsys.readouterr().err
