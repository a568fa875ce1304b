"""Held-out hygiene through every training data path's real entry point: held-out items of a preset are planted into
the input of `agentrl curate`, `agentrl sft` (with and without --config), notebook 03 run headless, `agentrl grpo`,
`agentrl sample`, `agentrl export --pairs --successes`, `agentrl dpo` and `agentrl rft` (under their own ids, under
new ids, with their ``question`` field edited to a training question), and what each run trained on (its
``train_items.jsonl``, its curated or exported files) holds none of them, while a training question under a held-out
id is trained on (an item is its content, not its id); each run says how many it dropped and records it."""

import json
import os
import re
import subprocess
import sys

import pytest

from agentrl.core.io import read_jsonl
from agentrl.core.metrics import normalize_answer
from conftest import DBBENCH, HOTPOT, ROOT

pytestmark = pytest.mark.slow

ROWS = read_jsonl(HOTPOT)
HELD = ROWS[180:]  # the preset asks for the last 20 ([eval.search] heldout = 20); search's own last 50 are held too
DB = read_jsonl(DBBENCH)  # AgentBench DB Bench dev: the SQL environment's held-out split


def planted_search() -> list[dict]:
    """Held-out search questions as a trajectory source would carry them: renamed (``seed_0``...), under their own id,
    and with the ``question`` field edited to a training question (the user message is the held-out one); then a
    training question under a held-out id (not held out: kept) and training questions."""
    renamed = [{**r, "id": f"seed_{i}"} for i, r in enumerate(HELD[:3])]
    own = [HELD[3]]
    edited = [{**HELD[4], "id": "edited", "field": ROWS[1]["question"]}]
    id_only = [{**ROWS[8], "id": HELD[5]["id"]}]
    return renamed + own + edited + id_only + ROWS[:8]


PLANTED_QUESTIONS = {normalize_answer(r["question"]) for r in planted_search()[:5]}


def is_planted(item: dict) -> bool:
    """Whether a row the run trained on (its train_items, a curated trajectory, a pair) is a planted held-out item:
    what its user message (or question) says."""
    shown = next((m["content"] for m in item.get("messages") or [] if m.get("role") == "user"), item.get("question"))
    return normalize_answer(shown or "") in PLANTED_QUESTIONS


def trajectory(row: dict, ok: bool = True, answer: str = "x") -> dict:
    """A trajectory of ``row`` in the trajectory format: a search call, its result, an answer."""
    call = {"id": "c0", "type": "function", "function": {"name": "search", "arguments": json.dumps({"query": "q"})}}
    return {"id": row["id"], "question": row.get("field", row["question"]), "env": "search", "policy": "oracle",
            "model": "oracle",
            "golden_answers": row.get("golden_answers") or [],
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": row["question"]},
                         {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c0", "name": "search", "content": "Doc 1 (Title: t) x"},
                         {"role": "assistant", "content": f"<answer>{answer}</answer>"}],
            "tools": [], "prediction": answer, "metrics": {"f1": float(ok), "em": float(ok), "format": float(ok)},
            "finish": "answer", "error": None, "usage": {"turns": 2, "tool_calls": 1}}


def sft_row(row: dict) -> dict:
    t = trajectory(row)
    return {"id": row["id"], "messages": [{k: v for k, v in m.items() if k != "tool_call_id"} for m in t["messages"]],
            "tools": "[]"}


def write_jsonl(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model):
    """A working directory with the preset and every path's planted input."""
    d = tmp_path_factory.mktemp("heldout")
    write_jsonl(d / "eval" / "trajectories.jsonl", [trajectory(r) for r in planted_search()])
    sft = [sft_row(r) for r in planted_search()]
    write_jsonl(d / "sftdata" / "trl" / "train.jsonl", sft)
    write_jsonl(d / "sftdata" / "trl" / "validation.jsonl", sft[:2] + sft[-1:])
    # SQL training tasks (DB Bench layout): three held-out DB Bench dev tasks in a file of its own (new ids), and
    # three that are not held out (the same tables, another question: a task is its table and its question)
    tasks = [DB[2], DB[3], DB[4]] + [{**rec, "description": f"How many rows does this table hold? (planted test {i})"}
                                      for i, rec in enumerate(DB[5:8])]
    write_jsonl(d / "sql_tasks.jsonl", tasks)
    (d / "p.toml").write_text(f"""
[corpus]
qa = "{HOTPOT}"

[eval]
name = "e"
policy = "oracle"
[eval.search]
qa = "{HOTPOT}"
heldout = 20
[eval.sql]
max_new_tokens = 8

[data]
name = "cur"
min_f1 = 0.0
val_fraction = 0.0
balance_by = []

[sft]
name = "s"
data = "{d / 'sftdata'}"
max_steps = 1
per_device_train_batch_size = 2
gradient_checkpointing = false
optim = "adamw_torch"
report_to = []
check_questions = 0
[sft.model]
name = "{tiny_model}"
backend = "transformers"

[grpo]
name = "g"
env = "sql"
adapter = ""
num_generations = 2
per_device_train_batch_size = 2
max_steps = 1
max_completion_length = 48
max_tool_calling_iterations = 1
gradient_checkpointing = false
optim = "adamw_torch"
report_to = []
log_completions = false
eval_questions = 0
[grpo.sql]
train_qa = "{d / 'sql_tasks.jsonl'}"
[grpo.model]
name = "{tiny_model}"
backend = "transformers"

[sample]
name = "smp"
k = 2
batch = 6

[dpo]
name = "d"
data = "{d / 'pairs.jsonl'}"
adapter = "none"
max_steps = 1
per_device_train_batch_size = 2
gradient_checkpointing = false
report_to = []
max_length = 512
[dpo.model]
name = "{tiny_model}"
backend = "transformers"

[rft]
name = "r"
data = "{d / 'succ'}"
max_steps = 1
per_device_train_batch_size = 2
gradient_checkpointing = false
report_to = []
check_questions = 0
[rft.model]
name = "{tiny_model}"
backend = "transformers"
""")
    return d


def cli(work, *args, check=True) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def test_curation_drops_held_out_trajectories_under_any_id(work):
    out = cli(work, "curate", "eval", "--config", "p.toml")
    curated = read_jsonl(work / "runs" / "data" / "cur" / "train.jsonl")
    assert curated and not any(is_planted(t) for t in curated)
    assert re.search(r"heldout: -5\s", out), out
    assert any(t["id"] == HELD[5]["id"] for t in curated)  # a training question under a held-out id is trained on
    assert manifest(work / "runs" / "data" / "cur")["heldout"]["dropped"]["trajectories"] == 5


@pytest.mark.slow
def test_sft_trains_on_no_held_out_row_from_the_command_line(work):
    out = cli(work, "sft", "--config", "p.toml")
    items = read_jsonl(work / "runs" / "sft" / "s" / "train_items.jsonl")
    assert len(items) == 9 and not any(is_planted(i) for i in items)
    assert "held-out hygiene: dropped 5 of 14 SFT rows" in out
    assert manifest(work / "runs" / "sft" / "s")["counts"]["heldout_dropped"] == 5


@pytest.mark.slow
def test_sft_without_a_preset_still_drops_the_environments_held_out_items(work, tiny_model):
    """No --config: the held-out set is the environments' defaults (DB Bench dev among them); a DB Bench dev task in
    the SFT data is dropped; search's own held-out split is known too (its default QA file)."""
    rows = [{"id": "db_3_renamed", "messages": [{"role": "user", "content": _db_question(3)},
                                                {"role": "assistant", "content": "<answer>x</answer>"}],
             "tools": "[]"}] + [sft_row(r) for r in ROWS[:4]]
    write_jsonl(work / "noconfig" / "trl" / "train.jsonl", rows)
    out = cli(work, "sft", "--data", "noconfig", "--model", str(tiny_model), "--backend", "transformers",
              "--max-steps", "1", "--check-questions", "0", "--name", "nc")
    items = read_jsonl(work / "runs" / "sft" / "nc" / "train_items.jsonl")
    assert [i["id"] for i in items] == [r["id"] for r in ROWS[:4]]
    assert "no default held-out items for search" not in out and "dropped 1 of 5 SFT rows" in out


def _db_question(i: int) -> str:
    from agentrl.envs.sql.dbbench import load_dbbench

    return load_dbbench(DBBENCH)[i]["question"]


@pytest.mark.slow
def test_notebook_03_run_headless_trains_on_no_held_out_row(work):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AGENTRL_WORKDIR": str(work)}
    proc = subprocess.run([sys.executable, str(ROOT / "notebooks" / "03_sft.py"), "--", "--config",
                           str(work / "p.toml"), "--name", "nb"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    items = read_jsonl(work / "runs" / "sft" / "nb" / "train_items.jsonl")
    assert len(items) == 9 and not any(is_planted(i) for i in items)
    assert "dropped 5 of 14 SFT rows" in proc.stdout


@pytest.mark.slow
def test_grpo_and_sampling_take_no_held_out_sql_task_from_a_training_file(work):
    out = cli(work, "grpo", "--config", "p.toml")
    held = {normalize_answer(_db_question(i)) for i in (2, 3, 4)}
    items = read_jsonl(work / "runs" / "grpo" / "g" / "train_items.jsonl")
    assert len(items) == 3 and not {normalize_answer(i["question"]) for i in items} & held
    assert "dropped 3 of 6 GRPO training rows" in out
    assert manifest(work / "runs" / "grpo" / "g")["heldout"]["dropped"] == {"GRPO training rows": 3}
    out = cli(work, "sample", "--config", "p.toml")
    outcomes = read_jsonl(work / "runs" / "sample" / "smp" / "outcomes.jsonl")
    assert len(outcomes) == 3 and not {normalize_answer(o["question"]) for o in outcomes} & held
    assert "dropped 3 of 6 GRPO training rows" in out


def test_pair_and_success_export_drops_held_out_items_of_a_sample_run(work):
    """A sample run made elsewhere (here: by hand) with held-out items among its attempts."""
    run = work / "runs" / "sample" / "planted"
    items = planted_search()
    for j, ok in enumerate((True, False)):
        write_jsonl(run / "attempts" / f"a{j}" / "trajectories.jsonl",
                    [trajectory(r, ok, answer="yes" if ok else "no") for r in items])
    write_jsonl(run / "outcomes.jsonl", [{"id": r["id"], "question": r["question"], "success": [True, False],
                                          "successes": 1} for r in items])
    (run / "manifest.json").write_text(json.dumps({"config": {"k": 2}}))
    out = cli(work, "export", str(run), "--pairs", "--successes", "--config", "p.toml")
    pairs = read_jsonl(run / "pairs" / "train.jsonl")
    successes = read_jsonl(run / "successes" / "train.jsonl")
    assert len(pairs) == 9 and not any(is_planted({"question": p["prompt"][1]["content"]}) for p in pairs)
    assert len(successes) == 9 and not any(is_planted(t) for t in successes)
    assert out.count("dropped 10 of 28 sampled attempts") == 2  # both attempts of each of the 5 planted items


@pytest.mark.slow
def test_dpo_and_rejection_sampling_train_on_no_held_out_item(work):
    run = work / "runs" / "sample" / "planted"
    pairs = read_jsonl(run / "pairs" / "train.jsonl")
    planted = [{**pairs[0], "id": f"seed_{i}", "prompt": [pairs[0]["prompt"][0],
                                                          {"role": "user", "content": r["question"]}]}
               for i, r in enumerate(HELD[:4])]
    write_jsonl(work / "pairs.jsonl", planted + pairs)
    out = cli(work, "dpo", "--config", "p.toml")
    items = read_jsonl(work / "runs" / "dpo" / "d" / "train_items.jsonl")
    assert len(items) == 9 and not any(is_planted(i) or i["question"] in {r["question"] for r in HELD}
                                       for i in items)
    assert "dropped 4 of 13 preference pairs" in out
    write_jsonl(work / "succ" / "trl" / "train.jsonl", [sft_row(r) for r in planted_search()])
    out = cli(work, "rft", "--config", "p.toml")
    items = read_jsonl(work / "runs" / "sft" / "r" / "train_items.jsonl")
    assert len(items) == 9 and not any(is_planted(i) for i in items)
    assert "dropped 5 of 14 SFT rows" in out


@pytest.mark.slow
def test_a_run_whose_every_row_is_held_out_stops_with_an_error_and_writes_nothing(work):
    write_jsonl(work / "allheld" / "trl" / "train.jsonl", [sft_row(r) for r in HELD[:3]])
    out = cli(work, "sft", "--config", "p.toml", "--data", "allheld", "--name", "allheld", check=False)
    assert "every one of the 3 SFT rows" in out and "is a held-out item of preset p" in out
    assert not (work / "runs" / "sft" / "allheld").exists()
