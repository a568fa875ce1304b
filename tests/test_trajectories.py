"""Phase 02: loading, statistics, curation, export (with the chat-template round trip) and seed import."""

import json
import warnings

import pytest

from agentrl.cli import main
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, read_jsonl
from agentrl.data.curate import CurateConfig, curate, select
from agentrl.data.export import export, load_trl_dataset, to_sharegpt, to_swift, to_trl
from agentrl.data.stats import analyze, compute_stats
from agentrl.data.trajectories import _careful_frame, _fast_frame, trajectory_frame


def traj(i, *, question=None, f1=1.0, em=1.0, calls=1, finish="answer", error=None, env="search", usage=True,
         qtype="bridge", reasoning=None):
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": question or f"question {i}?"}]
    for c in range(calls):
        fn = {"name": "search", "arguments": json.dumps({"query": f"q{c}"})}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{c}", "type": "function",
                                                                          "function": fn}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{c}", "name": "search", "content": f"Doc 1 (Title: T{c}) text"})
    final = {"role": "assistant", "content": f"<answer>a{i}</answer>"}
    if reasoning:
        final["reasoning"] = reasoning
    msgs.append(final)
    rec = {"id": f"t{i}", "env": env, "model": "m", "policy": "endpoint", "question": question or f"question {i}?",
           "golden_answers": [f"a{i}"], "messages": msgs, "tools": [], "prediction": f"a{i}",
           "metrics": {"em": em, "f1": f1, "precision": f1, "recall": f1, "acc": em},
           "usage": {"turns": calls + 1, "tool_calls": calls, "tool_errors": 0, "prompt_tokens": 100 * (calls + 1),
                     "completion_tokens": 10 * (calls + 1), "total_tokens": 110 * (calls + 1),
                     "last_turn": {"prompt_tokens": 100, "completion_tokens": 10}} if usage else None,
           "finish": finish, "error": error, "timing": {}, "metadata": {"type": qtype}}
    return rec


def write(path, recs, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + tail)
    return path


def test_fast_and_careful_loaders_give_the_same_frame(tmp_path):
    path = write(tmp_path / "t.jsonl", [traj(i, calls=i % 3, f1=i / 10, reasoning="hmm" if i % 2 else None)
                                        for i in range(10)] + [traj(10, usage=False)])
    fast, careful = _fast_frame(path), _careful_frame(path)
    cols = [c for c in careful.columns]
    assert fast.select(cols).cast(careful.schema).equals(careful)
    assert careful.filter(careful["id"] == "t10")["usage_missing"].item() is True
    assert careful.filter(careful["id"] == "t10")["turns"].item() == 2  # derived from the messages


def test_a_torn_final_line_is_skipped_with_a_warning(tmp_path):
    path = write(tmp_path / "t.jsonl", [traj(0), traj(1)], tail='{"id": "t2", "question": "q", "mess')
    with pytest.warns(UserWarning, match="torn final line"):
        df = trajectory_frame([path])
    assert df["id"].to_list() == ["t0", "t1"]


def test_a_malformed_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(traj(0)) + "\n{broken\n" + json.dumps(traj(2)) + "\n")
    with pytest.raises(DataError, match=r"t\.jsonl:2: invalid JSON"):
        trajectory_frame([path])


def test_missing_fields_and_empty_files_are_named(tmp_path):
    rec = traj(0)
    del rec["metrics"]
    with pytest.raises(DataError, match=r"t\.jsonl:2: missing field 'metrics'"):
        trajectory_frame([write(tmp_path / "t.jsonl", [traj(1), rec])])
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(DataError, match="empty file"):
        trajectory_frame([tmp_path / "e.jsonl"])
    with pytest.raises(DataError, match="not found"):
        trajectory_frame([tmp_path / "nope"])


def test_null_usage_does_not_crash_statistics(tmp_path):
    path = write(tmp_path / "t.jsonl", [traj(0, usage=False), traj(1)])
    stats = compute_stats(trajectory_frame([path]))
    assert stats["usage_missing"] == 1 and stats["tokens_cumulative"]["total"]["all"]["n"] == 1


def test_mixed_environments_are_reported_not_rejected(tmp_path):
    path = write(tmp_path / "t.jsonl", [traj(0, env="search"), traj(1, env="sql")])
    with pytest.warns(UserWarning, match="several environments"):
        stats = compute_stats(trajectory_frame([path]))
    assert stats["envs"] == {"search": 1, "sql": 1} and set(stats["by_env"]) == {"search", "sql"}


def test_statistics_split_by_outcome_on_hand_made_trajectories(tmp_path):
    recs = [traj(0, calls=1, f1=1.0), traj(1, calls=3, f1=0.9, em=0.0), traj(2, calls=2, f1=0.2, em=0.0,
                                                                             qtype="comparison"),
            traj(3, calls=0, f1=0.0, em=0.0, finish="no_answer", reasoning="x" * 40)]
    stats = compute_stats(trajectory_frame([write(tmp_path / "t.jsonl", recs)]), threshold=0.8)
    assert (stats["total"], stats["success_f1"], stats["success_em"], stats["failure"]) == (4, 2, 1, 2)
    assert stats["tool_calls"]["success"]["mean"] == 2.0 and stats["tool_calls"]["failure"]["mean"] == 1.0
    assert stats["tool_calls"]["distribution"]["all"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert stats["tokens_cumulative"]["total"]["all"]["mean"] == pytest.approx(110 * (2 + 4 + 3 + 1) / 4)
    assert stats["finish"] == {"answer": 3, "no_answer": 1}
    assert stats["reasoning_chars"] == {"mean": 40.0, "std": 0.0, "n": 1, "trajectories": 1}
    assert stats["by_type"]["comparison"]["n"] == 1 and stats["metrics"]["f1"]["mean"] == pytest.approx(0.525)


def test_analyze_writes_json_markdown_and_png_charts(tmp_path):
    path = write(tmp_path / "t.jsonl", [traj(i, calls=i % 3, f1=(i % 4) / 3) for i in range(12)])
    analyze([path], tmp_path / "out")
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["total"] == 12
    assert "| Tool calls | all | success | failure |" in (tmp_path / "out" / "stats.md").read_text()
    for name in ("tool_calls_by_outcome", "f1_histogram", "tokens_by_outcome"):
        assert (tmp_path / "out" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_each_curation_step_reports_what_it_removed(tmp_path):
    recs = [traj(0), traj(1, error="timeout"), traj(2, finish="no_answer"), traj(3, f1=0.5, em=0.0),
            traj(4, calls=6), traj(5, question="question 0?", f1=0.9, em=0.0), traj(6)]
    path = write(tmp_path / "t.jsonl", recs)
    train, val, report = select(trajectory_frame([path]), CurateConfig(max_turns=5, val_fraction=0.0),
                                HeldOut(["Question 6?"]))
    removed = {s["step"]: s["removed"] for s in report["steps"]}
    assert removed == {"input": 0, "heldout": 1, "errors": 1, "finish": 1, "min_f1": 1, "max_turns": 1, "dedup": 1}
    assert sorted(train["id"].to_list()) == ["t0"] and val.height == 0  # t5 lost to t0 on F1


def test_balancing_caps_over_represented_tool_call_buckets(tmp_path):
    recs = [traj(i, calls=1) for i in range(30)] + [traj(100 + i, calls=2) for i in range(6)] + \
           [traj(200 + i, calls=5) for i in range(4)]
    df = trajectory_frame([write(tmp_path / "t.jsonl", recs)])
    _, _, report = select(df, CurateConfig(balance_by=["tool_calls"], val_fraction=0.0, balance_cap=4), HeldOut())
    bal = report["balance"]
    assert bal["before"] == {"1": 30, "2": 6, "4+": 4}
    assert bal["after"] == {"1": 14, "2": 6, "4+": 4}  # cap = ceil(40 / 3)
    train, _, report = select(df, CurateConfig(balance_by=["tool_calls"], balance_mode="exact", val_fraction=0.0),
                              HeldOut())
    assert report["balance"]["after"] == {"1": 4, "2": 4, "4+": 4} and train.height == 12
    again, _, _ = select(df, CurateConfig(balance_by=["tool_calls"], balance_mode="exact", val_fraction=0.0),
                          HeldOut())
    assert again["id"].to_list() == train["id"].to_list()  # seeded


def test_train_validation_split_never_shares_a_question_across_runs(tmp_path):
    a = write(tmp_path / "a.jsonl", [traj(i) for i in range(60)])
    b = write(tmp_path / "b.jsonl", [{**traj(i), "id": f"other-{i}"} for i in range(60)])
    train, val, report = select(trajectory_frame([a, b]), CurateConfig(dedup_questions=False, val_fraction=0.2),
                                 HeldOut())
    assert report["split"]["shared_questions"] == 0 and 0 < val.height < train.height
    assert set(train["qkey"].to_list()).isdisjoint(val["qkey"].to_list())
    assert train.height + val.height == 120


def test_curate_writes_full_trajectories_and_a_report(tmp_path):
    path = write(tmp_path / "t.jsonl", [traj(i) for i in range(20)] + [traj(99, f1=0.1, em=0.0)])
    report = curate([path], CurateConfig(name="x", val_fraction=0.2), tmp_path / "data" / "x", HeldOut())
    train = read_jsonl(tmp_path / "data" / "x" / "train.jsonl")
    val = read_jsonl(tmp_path / "data" / "x" / "validation.jsonl")
    assert len(train) + len(val) == 20 and train[0]["messages"][1]["role"] == "user"
    assert json.loads((tmp_path / "data" / "x" / "curation.json").read_text())["written"] == report["written"]
    with pytest.raises(DataError, match="kept no trajectories"):
        curate([path], CurateConfig(min_f1=2.0), tmp_path / "data" / "y", HeldOut())
    assert not (tmp_path / "data" / "y").exists()


def test_export_formats_carry_tool_calls_their_own_way():
    t = traj(0, calls=1)
    trl = to_trl(t)
    assert trl["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"query": "q0"}
    assert json.loads(trl["tools"]) == []
    swift = to_swift(t)
    assert [m["role"] for m in swift["messages"]] == ["system", "user", "tool_call", "tool_response", "assistant"]
    assert json.loads(swift["messages"][2]["content"]) == {"name": "search", "arguments": {"query": "q0"}}
    share = to_sharegpt(t)
    assert share["system"] == "sys"
    assert [c["from"] for c in share["conversations"]] == ["human", "function_call", "observation", "gpt"]


def test_trl_dataset_keeps_different_tools_apart():
    """Arrow would merge {"query"} and {"sql", "limit"} argument structs across rows into nulls."""
    a = traj(0)
    b = traj(1)
    b["messages"][2]["tool_calls"][0]["function"] = {"name": "execute_sql",
                                                     "arguments": json.dumps({"sql": "SELECT 1", "limit": 5})}
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "train.jsonl"
        path.write_text(json.dumps(to_trl(a)) + "\n" + json.dumps(to_trl(b)) + "\n")
        ds = load_trl_dataset(path)
        assert ds[0]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"query": "q0"}
        assert ds[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"sql": "SELECT 1", "limit": 5}


def test_exported_rows_reproduce_what_the_policy_saw_and_mask_exactly_the_assistant_turns(tiny_model, tmp_path):
    from trl.chat_template_utils import get_training_chat_template

    from agentrl.core.chat import render
    from agentrl.rollout.local import load_tokenizer

    tok = load_tokenizer(tiny_model)
    t = traj(0, calls=2)
    t["tools"] = [{"type": "function", "function": {"name": "search", "description": "Search.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "description": "q"}}, "required": ["query"]}}}]
    t["messages"][-1]["content"] = "Both were American. <answer>yes</answer>"
    path = write(tmp_path / "t.jsonl", [t])
    curate([path], CurateConfig(min_f1=None, val_fraction=0.0), tmp_path / "d", HeldOut())
    export(tmp_path / "d", ["trl"], HeldOut())
    row = load_trl_dataset(tmp_path / "d" / "trl" / "train.jsonl")[0]
    tools = json.loads(row["tools"])
    full = tok.apply_chat_template(row["messages"], tools=tools, tokenize=False)
    completions = []
    for k, m in enumerate(t["messages"]):
        if m["role"] != "assistant":
            continue
        prompt = render(tok, t["messages"][:k], t["tools"], generation_prompt=True)  # exactly the policy's input
        assert full.startswith(prompt)
        nxt = render(tok, t["messages"][:k + 1], t["tools"])
        completions.append(nxt[len(prompt):])
    assert completions[0].startswith('<tool_call>\n{"name": "search", "arguments": {"query": "q0"}}\n</tool_call>')
    assert completions[-1] == "Both were American. <answer>yes</answer><|im_end|>\n"
    enc = tok.apply_chat_template(row["messages"], tools=tools, chat_template=get_training_chat_template(tok),
                                  return_assistant_tokens_mask=True, return_dict=True)
    ids, mask = enc["input_ids"], enc["assistant_masks"]
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == "".join(completions)
    assert tok.decode(ids) == full
    unmasked = tok.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "Doc 1 (Title: T0) text" in unmasked and "<tool_response>" in unmasked


@pytest.mark.parametrize("layout", ["results.jsonl", "intermediate_data.json"])
def test_seed_runs_with_null_usage_and_reasoning_import_cleanly(tmp_path, layout):
    from importlib.resources import files

    import jsonschema

    from agentrl.data.seed_import import import_seed

    seed = tmp_path / "seed"
    seed.mkdir()
    q = "Who directed Ed Wood?"
    items = [{"id": "s0", "question": q, "golden_answers": ["Tim Burton"],
              "output": {"pred": "Tim Burton", "metric_score": {"em": 1.0, "f1": 1.0, "acc": 1.0}}},
             {"id": "s1", "question": "Unmatched?", "golden_answers": ["x"], "output": {"pred": ""}}]
    if layout == "results.jsonl":
        (seed / "results.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    else:  # FlashRAG's evaluated items: one JSON list
        (seed / "intermediate_data.json").write_text(json.dumps(items, indent=1))
    sys_msg, user = {"role": "system", "content": "sys"}, {"role": "user", "content": q}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "Ed Wood"}'}}]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "Doc 1 (Title: Ed Wood (film)) by Tim Burton"}
    trace = [
        {"endpoint": "chat.completions.create", "input": {"model": "qwen", "messages": [sys_msg, user], "tools": []},
         "output": {"choices": [{"message": {**call, "reasoning_content": "I should search."}}], "usage": None}},
        {"endpoint": "chat.completions.create", "input": {"model": "qwen", "messages": [sys_msg, user, call, tool],
                                                          "tools": []},
         "output": {"choices": [{"message": {"role": "assistant", "content": "<answer>Tim Burton</answer>",
                                             "reasoning_content": "Found it."}}],
                    "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58}}},
        {"endpoint": "embeddings.create", "input": {}, "output": {}},
    ]
    (seed / "openai_trace.log").write_text("".join(json.dumps(e) + "\n" for e in trace))
    with warnings.catch_warnings(record=True):
        counts = import_seed(seed, tmp_path / "runs" / "eval" / "seed", env="search")
    assert counts == {"items": 2, "imported": 1, "without_trace": 1, "trace_entries": 2}
    [rec] = read_jsonl(tmp_path / "runs" / "eval" / "seed" / "trajectories.jsonl")
    jsonschema.validate(rec, json.loads(files("agentrl.data").joinpath("trajectory.schema.json").read_text()))
    assert [m["role"] for m in rec["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert rec["messages"][2]["reasoning"] == "I should search." and rec["messages"][4]["reasoning"] == "Found it."
    assert rec["usage"]["prompt_tokens"] == 50 and rec["metrics"]["f1"] == 1.0 and rec["policy"] == "imported"
    stats = compute_stats(trajectory_frame([tmp_path / "runs" / "eval" / "seed"]))
    assert stats["total"] == 1 and stats["reasoning_chars"]["mean"] == len("I should search.Found it.")


def test_cli_curate_and_export_on_bad_input_exit_2(tmp_path, capsys):
    from agentrl.cli import main

    bad = tmp_path / "t.jsonl"
    bad.write_text(json.dumps(traj(0)) + "\nnot json\n" + json.dumps(traj(1)) + "\n")
    assert main(["curate", str(bad), "--out", str(tmp_path / "d")]) == 2
    assert f"{bad}:2: invalid JSON" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "run `agentrl curate` first" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "missing_run")]) == 2


def test_filters_that_remove_every_row_say_so_even_with_balancing(tmp_path, capsys):
    path = write(tmp_path / "t.jsonl", [traj(i, f1=0.2, em=0.0) for i in range(8)])
    cfg = CurateConfig(min_f1=0.5, balance_by=["tool_calls"])
    with pytest.raises(DataError, match=r"the filters left nothing \(min_f1 .* removed 8\)") as err:
        curate([path], cfg, tmp_path / "data" / "none", HeldOut())
    assert "bucket" not in str(err.value)
    assert not (tmp_path / "data" / "none").exists()


def test_export_of_a_dataset_with_nothing_to_train_on_exits_non_zero_without_files(tmp_path, capsys):
    data = tmp_path / "d"
    data.mkdir()
    no_assistant = {**traj(0), "messages": [{"role": "user", "content": "q"}]}
    write(data / "train.jsonl", [no_assistant])
    write(data / "validation.jsonl", [])
    assert main(["export", str(data)]) == 2
    assert "nothing to export" in capsys.readouterr().err
    assert sorted(p.name for p in data.iterdir()) == ["train.jsonl", "validation.jsonl"]


def test_an_empty_validation_split_writes_no_empty_file(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    write(data / "train.jsonl", [traj(0)])
    write(data / "validation.jsonl", [])
    counts = export(data, ["trl"], HeldOut())
    assert counts["train"]["rows"] == 1 and counts["validation"]["rows"] == 0
    assert [p.name for p in (data / "trl").iterdir()] == ["train.jsonl"]


def _questions_in(split, n, val_fraction, seed=0):
    from agentrl.data.curate import split_of

    found = (f"question {i}?" for i in range(10_000))
    return [q for q in found if split_of(q, seed, val_fraction) == split][:n]


def test_a_lone_question_hashed_into_validation_trains_and_no_empty_validation_file_is_written(tmp_path, capsys):
    (question,) = _questions_in("validation", 1, 0.1)
    path = write(tmp_path / "t.jsonl", [traj(0, question=question), traj(1, question=question, f1=0.9)])
    data = tmp_path / "d"
    assert main(["curate", str(path), "--out", str(data), "--val-fraction", "0.1", "--min-f1", "0.5"]) == 0
    assert "train 1, validation 0" in capsys.readouterr().out  # one question, its best trajectory
    assert sorted(p.name for p in data.iterdir()) == ["curation.json", "manifest.json", "train.jsonl"]
    report = json.loads((data / "curation.json").read_text())
    assert report["split"]["moved_to_train"] == question.rstrip("?")
    assert report["split"]["train"] == 1 and report["split"]["validation"] == 0
    assert [t["id"] for t in read_jsonl(data / "train.jsonl")] == ["t0"]
    export(data, ["trl"], HeldOut())
    assert [p.name for p in (data / "trl").iterdir()] == ["train.jsonl"]


def test_when_every_question_hashes_into_validation_one_goes_back_to_train(tmp_path):
    questions = _questions_in("validation", 4, 0.9)
    path = write(tmp_path / "t.jsonl", [traj(i, question=q) for i, q in enumerate(questions)])
    report = curate([path], CurateConfig(val_fraction=0.9), tmp_path / "d", HeldOut())
    train, val = read_jsonl(tmp_path / "d" / "train.jsonl"), read_jsonl(tmp_path / "d" / "validation.jsonl")
    assert (len(train), len(val)) == (1, 3) and report["split"]["shared_questions"] == 0
    assert train[0]["question"].rstrip("?") == report["split"]["moved_to_train"]
    assert {t["question"] for t in train} | {t["question"] for t in val} == set(questions)


def test_a_validation_fraction_that_leaves_nothing_to_train_is_refused_without_files(tmp_path, capsys):
    path = write(tmp_path / "t.jsonl", [traj(i) for i in range(5)])
    for fraction in ("1.0", "-0.1"):
        assert main(["curate", str(path), "--out", str(tmp_path / "d"), "--val-fraction", fraction]) == 2
        err = capsys.readouterr().err
        assert "--val-fraction: data.val_fraction: must be" in err and f"got {float(fraction)}" in err
        assert not (tmp_path / "d").exists()


def test_an_export_of_a_dataset_without_validation_removes_a_stale_validation_export(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    write(data / "train.jsonl", [traj(0)])
    write(data / "validation.jsonl", [traj(1)])
    export(data, ["trl"], HeldOut())
    (data / "validation.jsonl").unlink()
    counts = export(data, ["trl"], HeldOut())
    assert "validation" not in counts and [p.name for p in (data / "trl").iterdir()] == ["train.jsonl"]


def test_min_grounded_keeps_answers_the_episode_could_read_and_passes_other_envs(tmp_path):
    recs = [traj(0), traj(1), traj(2, env="sql"), traj(3)]
    recs[0]["metrics"]["grounded"] = 1.0
    recs[1]["metrics"]["grounded"] = 0.0  # answered from gold it never retrieved
    recs[3]["metrics"]["grounded"] = 1.0
    df = trajectory_frame([write(tmp_path / "t.jsonl", recs)])
    train, _, report = select(df, CurateConfig(min_grounded=1.0, val_fraction=0.0), HeldOut())
    assert sorted(train["id"].to_list()) == ["t0", "t2", "t3"]  # the SQL trajectory has no such metric
    assert {s["step"]: s["removed"] for s in report["steps"]}["min_grounded"] == 1
    assert select(df, CurateConfig(val_fraction=0.0), HeldOut())[0].height == 4  # off by default
