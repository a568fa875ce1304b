"""Held-out items are known by their content in every environment: hypothesis draws held-out items of the demo
preset (search, SQL, math, code, the text game), disguises them as a trajectory source would (a new id, an edited
``question`` field, a prefix, other case and spacing, no final punctuation) and plants them into the real entry
points (``agentrl curate``, ``agentrl export`` in every format, ``agentrl sft``, ``agentrl dpo`` with the item inside
a completion only, ``agentrl grpo``'s training file); none of them is trained on or written, and every clean row
is. A user's environment is held out without a preset naming it, a table cannot shrink an environment's own
held-out split, the MCP environment holds out a fifth of its tasks, and near copies are counted and refused."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.cli import main
from agentrl.core.io import read_jsonl
from agentrl.envs import registry

ROOT_QA = Path(__file__).resolve().parents[1] / "data" / "samples" / "hotpotqa_dev_200.jsonl"

ENVS = ["search", "sql", "math", "code"] + (["textgame"] if shutil.which("java") else [])
NO_MODEL = "\"/nonexistent/model\""
CURATE = ["--set", "data.min_f1=0.0", "--set", "data.balance_by=[]", "--set", "data.val_fraction=0.0",
          "--set", "data.dedup_questions=false"]


def split(env: str, name: str, n: int) -> list[dict]:
    spec = registry.get(env)
    return registry.split_rows(spec, name, spec.settings(), {})[:n]


HELD = {env: split(env, "heldout", 12) for env in ENVS}  # each environment's own held-out items (the demo holds them)
TRAIN = {env: split(env, "train", 6) for env in ENVS}  # and training items, which must all pass


def text(env: str, row: dict) -> str:
    """The text of an item as a user message: its question (code: another instruction before the problem)."""
    if env == "code":
        return "Write this function, tested:\n" + row["metadata"]["prompt"]
    return row["question"]


DISGUISES = {
    "prefix": lambda t: "Question: " + t,
    "upper": str.upper,
    "lower": str.lower,
    "spacing": lambda t: "  ".join(t.split()) + " \n",
    "no final punctuation": lambda t: t.rstrip(" ?.\n"),
    "as it is": lambda t: t,
}


def trajectory(env: str, row: dict, marker: str, user: str, question: str) -> dict:
    """A trajectory in the format every phase reads, whose final answer carries ``marker``."""
    call = {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})}}
    return {"id": marker.lower(), "env": env, "model": "m", "policy": "oracle", "question": question,
            "golden_answers": ["a"], "prediction": marker, "tools": [], "finish": "answer", "error": None,
            "messages": [{"role": "system", "content": "Solve the task."}, {"role": "user", "content": user},
                         {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c0", "name": "lookup", "content": "a result"},
                         {"role": "assistant", "content": f"<answer>{marker}</answer>"}],
            "metrics": {"f1": 1.0, "em": 1.0, "acc": 1.0, "precision": 1.0, "recall": 1.0},
            "usage": {"turns": 2, "tool_calls": 1, "tool_errors": 0}, "timing": {}, "metadata": {}}


planted_item = st.tuples(st.sampled_from(ENVS), st.integers(0, 11), st.sampled_from(sorted(DISGUISES)),
                         st.booleans())


def plant(items) -> tuple[list[dict], set[str], set[str]]:
    """Return trajectories of the drawn held-out ``items`` (each disguised; its ``question`` field edited to a
    training item's when the flag is set) and of every environment's training items, with their markers."""
    rows, planted, clean = [], set(), set()
    for k, (env, i, disguise, edit_field) in enumerate(items):
        row = HELD[env][i]
        other = TRAIN[env][k % len(TRAIN[env])]["question"]
        rows.append(trajectory(env, row, f"PLANTED-{k}", DISGUISES[disguise](text(env, row)),
                               other if edit_field else row["question"]))
        planted.add(f"PLANTED-{k}")
    for env in ENVS:
        for j, row in enumerate(TRAIN[env]):
            rows.append(trajectory(env, row, f"CLEAN-{env}-{j}", text(env, row), row["question"]))
            clean.add(f"CLEAN-{env}-{j}")
    return rows, planted, clean


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def markers(path: Path) -> set[str]:
    """Return the markers of the rows written to ``path`` (the final answers this module's trajectories carry)."""
    return set(re.findall(r"<answer>((?:PLANTED|CLEAN|NEAR)-[\w-]+)</answer>", path.read_text()))


FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=12, deadline=None, suppress_health_check=FIXTURES)
@given(items=st.lists(planted_item, min_size=1, max_size=4))
def test_disguised_held_out_items_never_pass_curation_or_export_in_any_format(items, tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp("curate")
    rows, planted, clean = plant(items)
    source = write_jsonl(root / "runs" / "eval" / "mixed" / "trajectories.jsonl", rows)
    out = root / "data"
    assert main(["curate", str(source), "--config", "demo", "--out", str(out), *CURATE]) == 0
    assert markers(out / "train.jsonl") == clean  # every clean row, no planted one
    assert f"dropped {len(planted)} of {len(rows)} trajectories" in capsys.readouterr().out
    # export reads the curated files again through the gate: plant the items into the curated data as well
    write_jsonl(out / "train.jsonl", rows)
    assert main(["export", str(out), "--config", "demo", "--formats", "trl,swift,sharegpt"]) == 0
    for fmt in ("trl", "swift", "sharegpt"):
        assert markers(out / fmt / "train.jsonl") == clean, fmt


@settings(max_examples=8, deadline=None, suppress_health_check=FIXTURES)
@given(items=st.lists(planted_item, min_size=1, max_size=4))
def test_disguised_held_out_items_are_dropped_from_sft_data_before_any_model_loads(items, tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp("sft")
    rows, planted, _ = plant(items)
    trl = [{"id": r["id"], "messages": [{k: v for k, v in m.items() if k != "tool_call_id"} for m in r["messages"]],
            "tools": "[]"} for r in rows]
    write_jsonl(root / "d" / "trl" / "train.jsonl", trl)
    code = main(["sft", "--config", "demo", "--set", f"sft.data=\"{root / 'd'}\"",
                 "--set", f"sft.model.name={NO_MODEL}"])
    captured = capsys.readouterr()
    assert code == 2 and "nonexistent/model: no such directory" in captured.err  # the gate ran first
    assert f"dropped {len(planted)} of {len(rows)} SFT rows" in captured.out


@settings(max_examples=8, deadline=None, suppress_health_check=FIXTURES)
@given(items=st.lists(planted_item, min_size=1, max_size=3), where=st.sampled_from(["chosen", "rejected", "prompt"]))
def test_a_preference_pair_holding_a_held_out_item_in_any_part_is_dropped(items, where, tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp("dpo")
    pairs = []
    for k, (env, i, disguise, _) in enumerate(items):  # the item only in ``where``: a clean training prompt elsewhere
        held = DISGUISES[disguise](text(env, HELD[env][i]))
        prompt = [{"role": "user", "content": held if where == "prompt" else TRAIN[env][0]["question"]}]
        chosen = [{"role": "assistant", "content": (f"Restating: {held}" if where == "chosen" else "") + " A"}]
        rejected = [{"role": "assistant", "content": (f"Restating: {held}" if where == "rejected" else "") + " B"}]
        pairs.append({"id": f"p{k}", "prompt": prompt, "chosen": chosen, "rejected": rejected, "tools": "[]"})
    clean = [{"id": f"c{j}", "prompt": [{"role": "user", "content": r["question"]}],
              "chosen": [{"role": "assistant", "content": "A"}], "rejected": [{"role": "assistant", "content": "B"}],
              "tools": "[]"} for j, r in enumerate(TRAIN["math"])]
    data = write_jsonl(root / "pairs.jsonl", pairs + clean)
    code = main(["dpo", "--config", "demo", "--set", f"dpo.data=\"{data}\"", "--set", "dpo.adapter=\"none\"",
                 "--set", f"dpo.model.name={NO_MODEL}"])
    captured = capsys.readouterr()
    assert code == 2 and "nonexistent/model: no such directory" in captured.err
    assert f"dropped {len(pairs)} of {len(pairs) + len(clean)} preference pairs" in captured.out


def test_grpo_drops_held_out_items_planted_into_its_training_file_before_loading_anything(tmp_path, capsys):
    """Math's training file with held-out problems renamed among its training problems: GRPO's rows pass the gate
    (the same one sampling uses) before the model loads."""
    held = [{**r, "id": f"mine_{i}"} for i, r in enumerate(split("math", "heldout", 200)[40:45])]
    train = split("math", "train", 20)
    def answer(r):
        return f"{r['metadata']['solution']}\n#### {r['golden_answers'][0]}"

    lines = [{"question": DISGUISES["prefix"](r["question"]), "answer": answer(r)} for r in held]
    lines += [{"question": r["question"], "answer": answer(r)} for r in train]
    data = write_jsonl(tmp_path / "my_math.jsonl", lines)
    code = main(["grpo", "--config", "demo", "--env", "math", "--set", f"grpo.math.train_qa=\"{data}\"",
                 "--set", f"grpo.model.name={NO_MODEL}", "--set", "grpo.adapter=\"\""])
    captured = capsys.readouterr()
    assert code == 2 and "nonexistent/model: no such directory" in captured.err, captured.err
    assert "dropped 5 of 25 GRPO training rows" in captured.out


def test_sft_without_a_preset_holds_out_every_environments_own_split(tmp_path, capsys):
    """No --config: the search environment's own held-out split (the last 50 questions of its default QA file) is
    held, as every environment's is; nothing says "no default held-out items for search" any more."""
    rows, planted, _ = plant([("search", 3, "prefix", True), ("math", 5, "upper", False)])
    trl = [{"id": r["id"], "messages": [{k: v for k, v in m.items() if k != "tool_call_id"} for m in r["messages"]],
            "tools": "[]"} for r in rows]
    write_jsonl(tmp_path / "d" / "trl" / "train.jsonl", trl)
    monkey_model = tmp_path / "nomodel"
    code = main(["sft", "--data", str(tmp_path / "d"), "--model", str(monkey_model)])
    captured = capsys.readouterr()
    assert code == 2 and f"dropped 2 of {len(rows)} SFT rows" in captured.out
    assert "no default held-out items for search" not in captured.out


def test_a_table_asking_for_fewer_held_out_items_cannot_release_the_environments_own(tmp_path, capsys):
    held = split("math", "heldout", 200)
    rows = [trajectory("math", r, f"PLANTED-{i}", r["question"], r["question"]) for i, r in enumerate(held[100:103])]
    rows += [trajectory("math", r, f"CLEAN-{i}", r["question"], r["question"]) for i, r in enumerate(TRAIN["math"])]
    source = write_jsonl(tmp_path / "t" / "trajectories.jsonl", rows)
    assert main(["curate", str(source), "--config", "demo", "--out", str(tmp_path / "d"), *CURATE,
                 "--set", "grpo.math.heldout=32"]) == 0
    out = capsys.readouterr().out
    assert ("held-out set: --set grpo.math.heldout=32: [grpo.math] holds out 32 items, fewer than math's own 200: "
            "those 168 stay held out too (a setting may add held-out items, never remove them)") in out
    assert markers(tmp_path / "d" / "train.jsonl") == {f"CLEAN-{i}" for i in range(len(TRAIN["math"]))}


def test_a_users_environment_is_held_out_without_a_preset_naming_it(tmp_path, capsys, monkeypatch):
    """The docs' example environment, evaluated on all its rows; curating that run under a preset that does not
    name it drops its held-out split: the evaluation's manifest recorded where the environment came from."""
    from test_environments import example_environment

    monkeypatch.chdir(tmp_path)
    env_file = example_environment(tmp_path)
    assert main(["eval", "--env", str(env_file), "--split", "all", "--policy", "oracle", "--name", "kv_all"]) == 0
    spec = registry.get(str(env_file))
    held = registry.split_rows(spec, "heldout", spec.settings())
    n = len(read_jsonl(tmp_path / "runs" / "eval" / "kv_all" / "trajectories.jsonl"))
    capsys.readouterr()
    registry._LOADED.pop("kv", None)  # a fresh process: only the run's manifest knows the environment
    assert main(["curate", "runs/eval/kv_all", "--config", "demo", "--out", "d", *CURATE]) == 0
    assert f"dropped {len(held)} of {n} trajectories" in capsys.readouterr().out and held
    kept = {t["id"] for t in read_jsonl(tmp_path / "d" / "train.jsonl")}
    assert not kept & {r["id"] for r in held} and len(kept) == n - len(held)
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["env_sources"] == [str(env_file.resolve())]


def test_the_mcp_environment_holds_out_a_fifth_of_its_tasks_by_default(tmp_path):
    spec = registry.get("mcp")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{"id": f"t{i}", "question": f"What is item number {i} here?",
                                                     "golden_answers": [str(i)]} for i in range(10)])
    s = spec.settings(tasks=str(tasks))
    held, train = (registry.split_rows(spec, name, s) for name in ("heldout", "train"))
    assert [r["id"] for r in held] == ["t8", "t9"] and len(train) == 8 and spec.eval_split == "heldout"


def test_near_copies_of_held_out_items_are_dropped_counted_and_refused_when_many(tmp_path, capsys):
    """A held-out GSM8K problem whose last quarter is rewritten keeps most of its 13-grams (it is not contained any
    more): one among a hundred rows is dropped and counted in the curated dataset's manifest; one among five is
    refused, nothing written."""
    held = max(split("math", "heldout", 200), key=lambda r: len(r["question"].split()))
    words = held["question"].split()
    near = " ".join(words[:len(words) * 3 // 4] + ["so", "then", "how", "many", "are", "left", "in", "all?"])
    rows = [trajectory("math", held, "NEAR-0", near, "a question")]
    rows += [trajectory("math", r, f"CLEAN-{i}", r["question"], r["question"])
             for i, r in enumerate(split("math", "train", 100))]
    source = write_jsonl(tmp_path / "t" / "trajectories.jsonl", rows)
    assert main(["curate", str(source), "--config", "demo", "--out", str(tmp_path / "d"), *CURATE]) == 0
    assert "dropped 0 of 101 trajectories (held-out items of preset demo) and 1 near copies" in capsys.readouterr().out
    recorded = json.loads((tmp_path / "d" / "manifest.json").read_text())["heldout"]
    assert recorded["near_copies"] == {"trajectories": 1} and recorded["dropped"] == {"trajectories": 0}
    assert recorded["items"] > 400 and recorded["source"] == "preset demo"
    assert markers(tmp_path / "d" / "train.jsonl") == {f"CLEAN-{i}" for i in range(100)}
    write_jsonl(source, rows[:5])
    assert main(["curate", str(source), "--config", "demo", "--out", str(tmp_path / "e"), *CURATE]) == 2
    assert "1 of the 5 trajectories are near copies of held-out items" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_search_holds_out_the_end_of_whatever_qa_file_a_table_or_the_corpus_names(tmp_path, capsys):
    """The search environment's own split is the last 50 questions of its QA file: the preset's [corpus] qa when no
    table names one, a mixture member's table's when it does."""
    rows = read_jsonl(ROOT_QA)
    mine = rows[:60][::-1]  # another file: its last 50 are questions the bundled file trains on
    qa = write_jsonl(tmp_path / "my_qa.jsonl", mine)
    held, clean = mine[-1], mine[0]
    traj = [trajectory("search", held, "PLANTED-0", held["question"], held["question"]),
            trajectory("search", clean, "CLEAN-0", clean["question"], clean["question"])]
    source = write_jsonl(tmp_path / "t" / "trajectories.jsonl", traj)
    for n, sets in enumerate((["--set", f"corpus.qa=\"{qa}\""],
                              ["--set", f"grpo.mixed.search.qa=\"{qa}\"", "--set", "grpo.mixed.heldout=0"])):
        out = tmp_path / f"d{n}"
        config = "demo" if n == 0 else "envs_demo"
        assert main(["curate", str(source), "--config", config, "--out", str(out), *CURATE, *sets]) == 0, sets
        assert markers(out / "train.jsonl") == {"CLEAN-0"}, sets


def test_the_gate_reads_content_parts_and_tool_call_arguments(tmp_path):
    held = HELD["math"][2]
    parts = trajectory("math", held, "PLANTED-0", "", "q")
    parts["messages"][1]["content"] = [{"type": "text", "text": "Solve: "}, {"type": "text", "text": held["question"]}]
    in_call = trajectory("math", held, "PLANTED-1", "Use the tool.", "q")
    in_call["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"q": held["question"]}
    clean = trajectory("math", TRAIN["math"][0], "CLEAN-0", TRAIN["math"][0]["question"], "q")
    source = write_jsonl(tmp_path / "t" / "trajectories.jsonl", [parts, in_call, clean])
    assert main(["curate", str(source), "--config", "demo", "--out", str(tmp_path / "d"), *CURATE]) == 0
    assert markers(tmp_path / "d" / "train.jsonl") == {"CLEAN-0"}


def test_an_environment_whose_held_out_items_cannot_be_known_says_so(tmp_path, capsys, monkeypatch):
    """An environment whose rows need a setting it was not given, and a run recorded with an environment file that is
    gone, each say in one line that their held-out items are not known to the gate."""
    monkeypatch.chdir(tmp_path)
    env = tmp_path / "needy_env.py"
    env.write_text(NEEDY)
    run = tmp_path / "runs" / "eval" / "gone"
    write_jsonl(run / "trajectories.jsonl", [trajectory("math", TRAIN["math"][0], "CLEAN-0", "a", "q")])
    (run / "manifest.json").write_text(json.dumps({"config": {"env_source": str(tmp_path / "moved_env.py")}}))
    assert main(["curate", str(run), "--config", "demo", "--out", "d", *CURATE,
                 "--set", f"eval.env=\"{env}\""]) == 0
    out = capsys.readouterr().out
    assert "held-out set: no default held-out items for needy (needy needs its file)" in out
    assert f"the environment {tmp_path / 'moved_env.py'} recorded by {run / 'manifest.json'} cannot be loaded" in out


NEEDY = '''
from agentrl.core.io import DataError
from agentrl.envs.registry import Environment


def rows(split, settings, preset=None, source=None):
    if source is None:
        raise DataError("needy needs its file; pass --qa")
    return []


ENVIRONMENT = Environment(name="needy", summary="rows from a file it must be given", build=lambda s, p: None,
                          rows=rows, score=lambda prediction, row, env: {"em": 0.0}, prompts={"needy": "Answer."})
'''


def test_a_short_held_out_task_is_held_as_a_whole_message_or_line_never_inside_a_longer_one(tmp_path):
    """An MCP task file's held-out tasks (its last fifth) include a three-word one: a message or a line that is that
    task is held out; a longer question that merely contains it is another task."""
    tasks = [{"id": f"t{i}", "question": f"How many notes are stored under key number {i}?", "golden_answers": ["1"]}
             for i in range(8)] + [{"id": "t8", "question": "What is stored?", "golden_answers": ["x"]},
                                   {"id": "t9", "question": "List the files.", "golden_answers": ["a"]}]
    file = write_jsonl(tmp_path / "tasks.jsonl", tasks)
    rows = [trajectory("mcp", {}, "PLANTED-0", "list  the FILES", "q"),
            trajectory("mcp", {}, "PLANTED-1", "Here is your task:\nList the files.", "q"),
            trajectory("mcp", {}, "CLEAN-0", "List the files in the folder you were given.", "q"),
            trajectory("mcp", {}, "CLEAN-1", tasks[0]["question"], "q")]
    source = write_jsonl(tmp_path / "t" / "trajectories.jsonl", rows)
    assert main(["curate", str(source), "--config", "demo", "--out", str(tmp_path / "d"), *CURATE,
                 "--set", f"eval.mcp.tasks=\"{file}\""]) == 0
    assert markers(tmp_path / "d" / "train.jsonl") == {"CLEAN-0", "CLEAN-1"}
