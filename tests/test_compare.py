"""`agentrl compare`: two real evaluation runs of the same questions (the oracle and the untrained tiny model) side by
side per item, with the aggregate table and its paired interval, in the terminal and as an HTML page; the same
runs' metrics in TensorBoard, and report_to trackers that are not installed."""

import subprocess
import sys

from agentrl.app.compare import compare, first_divergence, format_table, frame, write_html
from conftest import HOTPOT, ROOT


def _runs(tmp_path, small_index, tiny_model):
    from agentrl.rollout.evaluate import EvalConfig, run_eval
    from agentrl.rollout.local import LocalConfig
    from agentrl.rollout.runner import RunConfig

    common = dict(qa=str(HOTPOT), offset=60, limit=4, index=str(small_index), top_k=2, passage_chars=120,
                  run=RunConfig(progress=False, max_turns=3, concurrency=4))
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
