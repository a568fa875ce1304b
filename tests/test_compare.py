"""`agentrl compare`: two real evaluation runs of the same questions (the oracle and the untrained tiny model) side by
side per item, with the aggregate table and its paired interval, in the terminal and as an HTML page; the same
runs' metrics in TensorBoard, and report_to trackers that are not installed."""

import json
import subprocess
import sys

from agentrl.app.compare import compare, first_divergence, format_table, frame, write_html
from agentrl.core.io import DataError
from conftest import HOTPOT, ROOT, search_settings


def _runs(tmp_path, small_index, tiny_model):
    from agentrl.rollout.evaluate import EvalConfig, run_eval
    from agentrl.rollout.local import LocalConfig
    from agentrl.rollout.runner import RunConfig

    common = dict(qa=str(HOTPOT), offset=60, limit=4, run=RunConfig(progress=False, concurrency=4),
                  envs={"search": search_settings(small_index, top_k=2, passage_chars=120, max_turns=3)})
    run_eval(EvalConfig(name="oracle", policy="oracle", **common), runs=tmp_path)
    run_eval(EvalConfig(name="tiny", policy="local", local=LocalConfig(model=str(tiny_model), max_new_tokens=24),
                        **common), runs=tmp_path)
    return tmp_path / "eval" / "oracle", tmp_path / "eval" / "tiny"


def test_two_real_runs_line_up_item_by_item_with_a_paired_interval(tmp_path, small_index, tiny_model):
    oracle, tiny = _runs(tmp_path, small_index, tiny_model)
    c = compare([oracle, tiny], metric="f1")
    assert c.labels == ["oracle", "tiny"] and len(c.items) == 4 and c.dropped == 0
    assert all(it["runs"][0]["outcome"] == 1.0 for it in c.items)  # the oracle replays the gold answer
    assert all(it["runs"][0]["tool_calls"] and it["runs"][0]["tool_calls"][0].startswith("search(") for it in c.items)
    # the untrained model answers none: every item regressed, and they part at the first assistant turn
    assert c.counts() == {"improved": 0, "regressed": 4, "unchanged": 0}
    assert {it["diverges_at_turn"] for it in c.items} == {1}
    first, second = c.aggregate
    assert first["f1"] == 1.0 and first["ci95"] == (1.0, 1.0)
    assert second["vs first"] < 0 and second["vs first ci95"][1] < 0  # the paired interval excludes 0
    text = format_table(c, only="regressed")
    assert "f1 on 4 shared items" in text and text.count("regressed  diverge at turn 1") == 4
    assert frame(c, only="improved").height == 0 and frame(c).height == 4
    page = write_html(c, tmp_path / "cmp.html").read_text()
    assert page.count("<tr class='regressed'>") == 4 and "paired 95% CI" in page


def test_the_command_prints_the_table_writes_html_and_refuses_a_single_run(tmp_path, small_index, tiny_model):
    oracle, tiny = _runs(tmp_path, small_index, tiny_model)
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "compare", str(oracle), str(tiny), "--metric", "f1",
                          "--html", str(tmp_path / "c.html")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "regressed 4" in out.stdout and (tmp_path / "c.html").is_file()
    bad = subprocess.run([sys.executable, "-m", "agentrl.cli", "compare", str(oracle)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "at least two runs" in bad.stderr


def _write(path, records) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _rec(i: int, question: str, f1: float = 1.0) -> dict:
    return {"id": str(i), "question": question, "env": "search", "metrics": {"f1": f1, "em": f1}, "messages": []}


def test_runs_whose_ids_name_different_questions_are_refused(tmp_path):
    """Two runs numbering their items 0..9 over different questions: the same id is not the same item."""
    import pytest

    a = _write(tmp_path / "a", [_rec(i, f"question {i}") for i in range(10)])
    b = _write(tmp_path / "b", [_rec(i, f"another question {i}", 0.0) for i in range(10)])
    with pytest.raises(DataError, match=r"item '0' is not the same question in every run .*did not evaluate the same"):
        compare([a, b])
    same = _write(tmp_path / "c", [_rec(i, f"Question {i}.", 0.0) for i in range(10)])  # normalised: the same
    assert compare([a, same]).counts() == {"improved": 0, "regressed": 10, "unchanged": 0}


def test_a_run_with_an_id_twice_is_refused_naming_both_lines(tmp_path):
    import pytest

    a = _write(tmp_path / "a", [_rec(0, "q0"), _rec(1, "q1"), _rec(0, "q0")])
    b = _write(tmp_path / "b", [_rec(0, "q0"), _rec(1, "q1")])
    with pytest.raises(DataError, match=r"trajectories\.jsonl:3: item '0' again \(first at line 1\)"):
        compare([a, b])


def test_a_metric_no_run_reports_is_refused_naming_those_they_do(tmp_path):
    import pytest

    a = _write(tmp_path / "a", [_rec(0, "q0")])
    b = _write(tmp_path / "b", [_rec(0, "q0", 0.0)])
    with pytest.raises(DataError, match=r"--metric 'f_1': no trajectory of these runs reports it \(they report em, "
                                         r"f1\)"):
        compare([a, b], metric="f_1")


def test_an_html_page_that_cannot_be_written_exits_2(tmp_path):
    a = _write(tmp_path / "a", [_rec(0, "q0")])
    b = _write(tmp_path / "b", [_rec(0, "q0", 0.0)])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "compare", a, b, "--html", str(blocker / "c.html")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--html" in out.stderr and "cannot write it" in out.stderr, out.stderr


def test_trajectories_that_agree_do_not_diverge():
    same = {"messages": [{"role": "assistant", "content": "x", "tool_calls": [
        {"function": {"name": "search", "arguments": '{"query": "a"}'}}]}]}
    other = {"messages": [{"role": "assistant", "content": "x", "tool_calls": [
        {"function": {"name": "search", "arguments": {"query": "b"}}}]}]}
    assert first_divergence([same, same]) is None and first_divergence([same, other]) == 1


def test_a_phase_01_run_logs_its_metrics_to_tensorboard(tmp_path, small_index, tiny_model):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    oracle, _ = _runs(tmp_path, small_index, tiny_model)
    acc = EventAccumulator(str(oracle / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("eval/f1")] == [(4, 1.0)]
    assert "tools/mean_calls" in acc.Tags()["scalars"]


def test_a_tracker_asked_for_but_not_installed_is_dropped_with_one_line(capsys):
    import importlib.util

    import pytest

    from agentrl.core.tracking import trackers

    missing = next((n for n in ("wandb", "trackio") if importlib.util.find_spec(n) is None), None)
    if missing is None:
        pytest.skip("wandb and trackio are both installed here")
    assert trackers(["tensorboard", missing]) == ["tensorboard"]
    assert capsys.readouterr().out.strip() == (f"report_to: {missing} is not installed (pip install {missing}); "
                                               "the run logs without it")
    assert trackers("none") == [] and trackers(None) == []
