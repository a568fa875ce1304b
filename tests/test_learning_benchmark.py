"""benchmarks/learning.py: bad input stops before any model loads (exit 2, nothing written), and its table pairs every
method with SFT on the same held-out items."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "learning.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "lib")})


@pytest.mark.parametrize("line, why", [
    ('{"description": "How many rows?"\n', "invalid JSON"),
    ('{"description": "How many rows?", "label": ["1"]}\n', "missing field 'table'"),
])
def test_a_bad_sql_heldout_file_stops_with_its_file_and_line_before_any_model_loads(tmp_path, line, why):
    good = (ROOT / "data" / "samples" / "dbbench_dev.jsonl").read_text().splitlines(keepends=True)[:2]
    bad = tmp_path / "mine.jsonl"
    bad.write_text("".join(good) + line)
    out = tmp_path / "out"
    r = run("--envs", "sql", "--sql-heldout", str(bad), "--out", str(out), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"{bad}:3" in r.stderr and why in r.stderr
    assert "Loading" not in r.stderr + r.stdout and not out.exists()  # nothing loaded, nothing half-written


@pytest.mark.parametrize("args, said", [
    (["--envs", "search,sqll"], "unknown environment(s) ['sqll']"),
    (["--envs", "textgame", "--methods", "grpo,dpo"], "dpo is built for search, sql only, not textgame"),
    (["--envs", "sql,math", "--methods", "grpo"], "grpo is built for search, sql, textgame only, not math"),
    (["--methods", "grpo,ppo"], "unknown method(s) ['ppo']"),
    (["--sql-heldout", "no/such/file.jsonl"], "--sql-heldout: no/such/file.jsonl is not a file"),
])
def test_an_unknown_environment_or_method_or_a_missing_file_exits_2(tmp_path, args, said):
    r = run(*args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 2 and said in r.stderr


def test_the_report_pairs_each_method_with_sft_on_the_same_items_and_marks_the_targets(tmp_path):
    ids = [str(i) for i in range(40)]
    sft = {i: float(int(i) % 4 == 0) for i in ids}  # 10 of 40
    grpo = {i: 1.0 if int(i) % 4 == 0 or int(i) < 12 else 0.0 for i in ids}  # SFT's 10 + 9 more, none lost
    dpo = {i: 0.0 for i in ids}
    row = {"n": 40, "wellformed_call_share": 0.9, "f1": 0.3, "exec": 0.25}
    result = {"command": "x", "total_minutes": 1.0, "load": 0.5, "success_keys": {"sql": "em"},
              "table": {"sql": {"base": dict(row), "sft": dict(row), "grpo": dict(row),
                                "dpo": {**row, "wellformed_call_share": 0.6}}},
              "per_item": {"sql": {"base": dpo, "sft": sft, "grpo": grpo, "dpo": dpo}},
              "methods": {"sql": {"grpo": {"history": [{"step": s, "reward": 0.1 * s, "kl": 0.001} for s in
                                                       range(1, 9)]}}},
              "phases": {"prepare model": {"seconds": 5.0, "env": None}, "sft sql": {"seconds": 600.0, "env": "sql"},
                         "grpo sql": {"seconds": 3060.0, "env": "sql"}}}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from learning_report import compare, markdown, targets
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    compare(result["table"], result["per_item"])
    table = result["table"]["sql"]
    assert table["sft"]["success"] == 0.25 and table["grpo"]["diff_vs_sft"] == pytest.approx(0.225)
    assert table["grpo"]["diff_ci"][0] > 0 and table["dpo"]["diff_ci"][1] < 0
    met = {t["target"]: t["met"] for t in targets(result)}
    assert met["sql: a method beats SFT by >= 0.05, interval above 0"]
    assert not met["sql: DPO keeps the well-formed call share within 0.02 of SFT's"]
    assert met["sql: GRPO mean reward, last quarter > first (2 of 8 steps)"]
    assert not met["sql: <= 60 min on this machine"]  # 61 min of phases
    assert "| sql (em) | grpo | 40 | 0.475 [" in markdown(result)
    (tmp_path / "learning.json").write_text(json.dumps(result))
    r = run("--report", "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 0 and "| sql (em) | grpo | 40 | 0.475 [" in r.stdout and (tmp_path / "curves.html").exists()


@pytest.mark.parametrize("make, said", [
    (lambda run: None, "learning.json not found"),
    (lambda run: (run / "learning.json").write_text(json.dumps(
        {"methods": {"sql": {"dpo": {"adapter": None, "why_not": "no pair"}}}, "sft": {}})), "has no SQL DPO adapter"),
])
def test_the_dpo_sweep_needs_a_learning_run_with_an_sql_dpo_and_writes_nothing_without_one(tmp_path, make, said):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    make(run_dir)
    before = sorted(run_dir.iterdir())
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dpo_sweep.py"), "--run", "run"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "lib")})
    assert r.returncode == 2 and said in r.stderr
    assert sorted(run_dir.iterdir()) == before  # no dpo_sweep/ half-written
