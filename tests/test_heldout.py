"""Held-out hygiene as an invariant: for every shipped preset, no evaluation or GRPO held-out item reaches SFT or
GRPO training data, whatever rows phase 01 synthesised trajectories on (here: every evaluation row of the preset's
environments, held-out ones included, as a teacher run over the whole QA file produces)."""

import json

import pytest

from agentrl.app.presets import load
from agentrl.core.config import REPO_ROOT
from agentrl.core.metrics import same_item_key

PRESETS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.toml"))


def synthesised_rows(preset: dict) -> list[dict]:
    """Every row phase 01 could have produced a trajectory for: the [eval] rows from 0 with no limit, the rows of
    a separate GRPO training file, and each GRPO environment's evaluation rows."""
    from agentrl.envs import registry
    from agentrl.rollout.evaluate import eval_config, load_rows
    from agentrl.train.grpo import grpo_config

    rows = load_rows(eval_config(preset, offset=0, limit=10**6), preset)  # the whole file, whatever [eval] limits
    if grpo_config(preset).qa and grpo_config(preset).env == registry.DEFAULT:  # a separate training file
        rows += load_rows(eval_config(preset, qa=grpo_config(preset).qa, offset=0, limit=10**6), preset)
    envs = {grpo_config(preset).env, *(k[5:] for k in preset if k.startswith("grpo_"))} - {registry.DEFAULT, "mixed"}
    for env in sorted(envs):
        rows += [{**r, "env": env} for r in registry.get(env).rows("eval", None, 40, preset)]
    return rows


def multihop_rag_sample(name: str, tmp_path) -> list[str]:
    """Return the ``--set`` overrides that point a preset reading ``runs/multihop_rag/`` at the small hub-layout
    sample converted into ``tmp_path`` (the bundled-sample stand-in for the hub download); [] for other presets."""
    from agentrl.data.multihop_rag import prepare
    from multihop_sample import write_hub_layout

    if "runs/multihop_rag/" not in (REPO_ROOT / "configs" / f"{name}.toml").read_text():
        return []
    d = tmp_path / "mhr"
    prepare(write_hub_layout(tmp_path / "hub"), d)
    return [f'eval.qa="{d}/validation.jsonl"', f'eval.heldout_qa="{d}/validation.jsonl"', f'grpo.qa="{d}/train.jsonl"',
            "grpo.eval_questions=5"]


def trajectory(row: dict) -> dict:
    """A successful trajectory of ``row`` in the trajectory format (what the oracle or a teacher writes)."""
    return {"id": row["id"], "question": row["question"], "env": row.get("env") or "search", "policy": "oracle",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": row["question"]},
                         {"role": "assistant", "content": "<answer>x</answer>"}],
            "metrics": {"f1": 1.0, "em": 1.0}, "finish": "answer", "prediction": "x"}


@pytest.mark.parametrize("name", PRESETS)
def test_no_held_out_item_of_a_preset_reaches_its_training_data(name, tmp_path, capsys):
    from agentrl.core.metrics import drop_heldout
    from agentrl.data.curate import curate, data_config
    from agentrl.train.grpo import grpo_config, split_rows
    from agentrl.train.heldout import heldout_keys

    preset = load(name, multihop_rag_sample(name, tmp_path))
    keys = heldout_keys(preset)
    assert keys, f"{name} holds nothing out: its evaluations would measure training items"
    rows = synthesised_rows(preset)
    leaked = [r for r in rows if same_item_key(r) in keys]
    assert leaked, "the synthesis covers held-out items (the path the invariant guards)"
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(trajectory(r)) + "\n" for r in rows))
    cfg = data_config(preset, min_grounded=None, balance_by=[], max_examples=None)
    report = curate([str(tmp_path / "t.jsonl")], cfg, tmp_path / "data", keys)
    heldout_step = next(s for s in report["steps"] if s["step"] == "heldout")
    assert heldout_step["removed"] == len(leaked)
    curated = [json.loads(line) for f in ("train.jsonl", "validation.jsonl") if (tmp_path / "data" / f).exists()
               for line in (tmp_path / "data" / f).read_text().splitlines()]
    assert curated and not {same_item_key(t) for t in curated} & keys
    for env in dict.fromkeys([grpo_config(preset).env, *(k[5:] for k in preset if k.startswith("grpo_"))]):
        train = drop_heldout(split_rows(grpo_config(preset, env=env), preset)[0], keys, "GRPO training rows")
        assert train and not {same_item_key(r) for r in train} & keys


def test_sft_drops_rows_of_held_out_items_and_says_how_many(tmp_path, capsys):
    from datasets import Dataset

    from agentrl.train.heldout import heldout_rows
    from agentrl.train.sft import SFTData, without_heldout

    preset = load("demo")
    held = heldout_rows(preset)[:3]
    rows = [{"id": r["id"], "messages": [{"role": "user", "content": r["question"]}], "tools": "[]"} for r in held]
    rows.append({"id": "dev_0", "messages": [{"role": "user", "content": "Were Scott Derrickson and Ed Wood of the "
                                                                          "same nationality?"}], "tools": "[]"})
    data = without_heldout(SFTData(Dataset.from_list(rows), None, {}, tmp_path / "train.jsonl", None, True), preset)
    assert data.train["id"] == ["dev_0"] and data.counts["heldout_dropped"] == 3
    assert "dropped 3 SFT rows" in capsys.readouterr().out


def test_humaneval_evaluation_items_are_never_code_training_items():
    from agentrl.envs import registry

    spec = registry.get("code")
    train = {r["id"] for r in spec.rows("train")}
    evaluated = {r["id"] for r in spec.rows("eval")}
    assert len(train) == 100 and len(evaluated) == 64 and not train & evaluated
    assert {r["id"] for r in spec.rows("eval", "train")} == train  # --qa train: the training pool on purpose
