"""The agentrl command line on bad input: a clear message naming the problem, exit 2, nothing half-written."""

import json
import subprocess
import sys

import pytest

from agentrl.cli import main
from conftest import HOTPOT


def test_corpus_with_a_malformed_line_exits_2_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "qa.jsonl"
    bad.write_text(json.dumps({"id": "1", "question": "Q?", "golden_answers": ["a"]}) + "\n{not json}\n")
    out = tmp_path / "corpus"
    assert main(["corpus", "--qa", str(bad), "--out", str(out)]) == 2
    assert f"{bad}:2: invalid JSON" in capsys.readouterr().err
    assert not out.exists()


def test_corpus_with_a_missing_field_names_it(tmp_path, capsys):
    bad = tmp_path / "qa.jsonl"
    bad.write_text(json.dumps({"id": "1", "golden_answers": ["a"]}) + "\n")
    assert main(["corpus", "--qa", str(bad), "--out", str(tmp_path / "c")]) == 2
    assert "qa.jsonl:1: missing field 'question'" in capsys.readouterr().err


def test_empty_corpus_file_is_an_error(tmp_path, capsys):
    empty = tmp_path / "corpus.jsonl"
    empty.write_text("")
    assert main(["corpus", "--corpus-file", str(empty), "--out", str(tmp_path / "c")]) == 2
    assert "empty corpus" in capsys.readouterr().err


def test_index_of_an_empty_corpus_directory_is_an_error(tmp_path, capsys):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "corpus.jsonl").write_text("")
    assert main(["index", "--corpus", str(tmp_path / "c")]) == 2
    assert "empty corpus" in capsys.readouterr().err
    assert not (tmp_path / "c" / "index").exists()


def test_search_rejects_empty_query_and_non_positive_top_k(small_index, capsys):
    assert main(["search", "--index", str(small_index), "   "]) == 2
    assert "non-empty" in capsys.readouterr().err
    assert main(["search", "--index", str(small_index), "-k", "0", "Ed Wood"]) == 2
    assert "top_k" in capsys.readouterr().err


def test_search_prints_ranked_passages(small_index, capsys):
    assert main(["search", "--index", str(small_index), "-k", "2", "--method", "bm25", "Ed Wood film"]) == 0
    out = capsys.readouterr().out
    assert "Ed Wood" in out and "rank" in out


def test_search_on_a_missing_index_directory_is_an_error(tmp_path, capsys):
    assert main(["search", "--index", str(tmp_path / "none"), "Ed Wood"]) == 2
    assert "index directory not found" in capsys.readouterr().err


def test_retrieval_eval_writes_json_and_prints_the_table(small_index, tmp_path, capsys):
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(line for i, line in enumerate(HOTPOT.open()) if i < 24))
    out = tmp_path / "eval"
    assert main(["retrieval-eval", "--index", str(small_index), "--qa", str(qa), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "hybrid" in printed and "recall@5" in printed and "absent from the corpus" in printed
    report = json.loads((out / "retrieval_eval.json").read_text())
    assert set(report["methods"]) == {"bm25", "dense", "hybrid"}
    assert (out / "retrieval_recall.png").stat().st_size > 1000


def test_unknown_preset_is_reported_with_the_known_ones(tmp_path, capsys):
    assert main(["corpus", "--config", "nope", "--out", str(tmp_path / "c")]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["search", "--index", "/nonexistent/index", "q"]])
def test_the_installed_command_exits_non_zero_on_bad_input(argv):
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ")


@pytest.mark.slow
def test_bundled_data_is_found_from_any_working_directory(tmp_path):
    """The default data of each environment (data/samples/...) and presets resolve from the repository, outputs go
    to the working directory's runs/ (before: FileNotFoundError outside the checkout)."""
    for env in ("math", "sql"):
        r = subprocess.run([sys.executable, "-m", "agentrl.cli", "eval", "--env", env, "--policy", "oracle",
                            "--limit", "2", "--name", env], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads((tmp_path / "runs" / "eval" / env / "metrics.json").read_text())["overall"]["em"] == 1.0
