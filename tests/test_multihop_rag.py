"""MultiHop-RAG from its published layout: the seed's conversion and split, fact-based retrieval gold, null queries,
the gpu_multihop_rag preset's held-out validation-200 and its GPU plans."""

import json
import random

import pytest

from agentrl.core.io import DataError
from agentrl.data.multihop_rag import fact_metrics, prepare, read_records, task_rows
from multihop_sample import write_hub_layout


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    return write_hub_layout(tmp_path_factory.mktemp("hub") / "MultiHopRAG")


def test_the_split_is_the_seeds_random_seed_42_shuffle_with_validation_200(hub, tmp_path):
    counts = prepare(hub, tmp_path / "mhr")
    assert counts == {"documents": 6, "validation": 200, "train": 30, "null_queries": 46}
    items = json.loads((hub / "MultiHopRAG.json").read_text())
    seed_order = [str(i) for i in range(len(items))]  # the seed's convert_dataset.py: ids in file order, then
    random.seed(42)                                   # random.seed(42) at start and random.shuffle(data)
    random.shuffle(seed_order)
    val = [json.loads(line) for line in (tmp_path / "mhr" / "validation.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (tmp_path / "mhr" / "train.jsonl").read_text().splitlines()]
    assert [r["id"] for r in val] == seed_order[:200] and [r["id"] for r in train] == seed_order[200:]
    first = items[int(val[0]["id"])]
    assert val[0]["question"] == first["query"] and val[0]["golden_answers"] == [first["answer"]]
    assert val[0]["metadata"]["evidence_list"] == first["evidence_list"]
    doc = json.loads((tmp_path / "mhr" / "corpus.jsonl").read_text().splitlines()[0])
    article = json.loads((hub / "corpus.json").read_text())[0]
    assert doc["contents"] == f"{article['title']}\n{article['body']}"
    assert doc["metadata"]["author"] == article["author"]
    assert "body" not in doc["metadata"] and "title" not in doc["metadata"]


def test_json_lines_files_in_the_hub_layout_give_the_same_rows(hub, tmp_path):
    for name in ("MultiHopRAG.json", "corpus.json"):
        records = json.loads((hub / name).read_text())
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert task_rows(read_records(tmp_path, "MultiHopRAG")) == task_rows(read_records(hub, "MultiHopRAG"))
    assert read_records(tmp_path / "corpus.json", "corpus") == read_records(hub, "corpus")


def test_a_record_without_the_hub_fields_is_refused_naming_it(tmp_path):
    (tmp_path / "MultiHopRAG.json").write_text(json.dumps([{"query": "q", "answer": "a"}]))
    with pytest.raises(DataError, match=r"MultiHopRAG.json: record 1 lacks 'question_type'"):
        read_records(tmp_path, "MultiHopRAG")
    with pytest.raises(DataError, match="corpus.json: not found"):
        read_records(tmp_path, "corpus")


def test_the_hub_source_without_network_or_cache_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_cache"))
    with pytest.raises(DataError, match=r"hf:yixuantt/MultiHopRAG \(corpus\): cannot load the dataset"):
        read_records("hf:yixuantt/MultiHopRAG", "corpus")


def test_facts_are_found_whitespace_insensitively_as_multihop_rags_own_evaluation_does():
    chunks = ["Harbor City council voted 7 to\n2 on Tuesday", "unrelated", "Construction is  expected to begin"]
    facts = ["The Harbor City council voted 7 to 2 on Tuesday.", "Construction is expected to begin"]
    m = fact_metrics(chunks, facts, (1, 3))
    assert m["fact_hits@1"] == 0.0  # "The ... Tuesday." is not inside the first chunk
    assert m["fact_hits@3"] == 1.0 and m["fact_recall@3"] == 0.5


def test_null_queries_are_kept_and_scored_against_insufficient_information(hub, tmp_path):
    from agentrl.core.metrics import answer_metrics

    prepare(hub, tmp_path / "mhr")
    rows = [json.loads(line) for line in (tmp_path / "mhr" / "validation.jsonl").read_text().splitlines()]
    null = [r for r in rows if r["metadata"]["question_type"] == "null_query"]
    assert null and all(r["golden_answers"] == ["Insufficient information"] for r in null)
    assert answer_metrics("Insufficient Information", null[0]["golden_answers"])["em"] == 1.0


def test_corpus_index_and_retrieval_evaluation_from_the_converted_files(hub, tmp_path):
    from agentrl.data.corpus import build_corpus, load_qa, read_corpus
    from agentrl.retrieval import Retriever, build_index
    from agentrl.retrieval.evaluate import evaluate_retrieval

    prepare(hub, tmp_path / "mhr")
    counts = build_corpus(tmp_path / "corpus", corpus_file=tmp_path / "mhr" / "corpus.jsonl", embedder="minilm",
                          chunk_size=24, chunk_overlap=0, progress=False)
    assert counts["documents"] == 6 and counts["passages"] > 6  # 24-token chunks split every article
    passages = read_corpus(tmp_path / "corpus")
    assert passages[0]["title"] == "Harbor City council approves tram extension"
    build_index(passages, tmp_path / "index", progress=False)
    rows = load_qa(tmp_path / "mhr" / "validation.jsonl")
    report = evaluate_retrieval(Retriever.load(tmp_path / "index"), rows, methods=("bm25", "hybrid"), ks=(1, 3, 10))
    assert report["summary"]["questions"] == sum(r["metadata"]["question_type"] != "null_query" for r in rows)
    hybrid = report["methods"]["hybrid"]
    assert hybrid["recall@10"] > 0.5 and 0 < hybrid["fact_hits@3"] <= hybrid["fact_hits@10"] <= 1
    from agentrl.retrieval.evaluate import results_table

    assert "fact_hits@10" in results_table(report).columns  # printed by `agentrl retrieval-eval`


def test_the_cli_converts_and_names_a_missing_source(hub, tmp_path, capsys):
    from agentrl.cli import main

    assert main(["multihop-rag", "--source", str(hub), "--out", str(tmp_path / "mhr")]) == 0
    assert "validation.jsonl (200), train.jsonl (30); 46 null queries kept" in capsys.readouterr().out
    assert main(["multihop-rag", "--source", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_the_preset_holds_validation_200_out_of_every_training_path(tmp_path, capsys):
    from agentrl.app.presets import load
    from agentrl.data.corpus import load_qa
    from agentrl.train.grpo import heldout_rows, train_rows

    prepare(write_hub_layout(tmp_path / "hub" / "MultiHopRAG", questions=300), tmp_path / "mhr")  # 100 train
    d = tmp_path / "mhr"
    preset = load("gpu_multihop_rag", [f'eval.search.qa="{d}/validation.jsonl"',
                                       f'eval.heldout_qa="{d}/validation.jsonl"',
                                       f'grpo.search.qa="{d}/train.jsonl"', "grpo.search.heldout=5"])
    gate, grpo = preset.heldout, preset.grpo()
    validation = load_qa(d / "validation.jsonl")
    held = heldout_rows(grpo, preset.data)
    assert len(validation) == 200 and len(held) == 5  # GRPO evaluates the 5 it was asked for ...
    assert all(gate.matches(r) for r in [*validation, *held])
    # ... but the training file's own held-out split (search's last 50) stays held: a setting never removes items
    assert "holds out 5 items, fewer than search's own 50" in capsys.readouterr().out
    train = train_rows(grpo, gate, preset.data)
    assert len(train) == 50 and not any(gate.matches(r) for r in train)
    assert not {r["id"] for r in train} & {r["id"] for r in held}
    assert (grpo.importance_sampling_level, grpo.steps_per_generation) == ("sequence", 4)  # GSPO


@pytest.mark.parametrize("card", ["T4", "L4", "A100-40", "A100-80", "H100"])
def test_gpu_plan_sizes_the_preset_on_every_card(card):
    from agentrl.app.presets import load
    from agentrl.train.gpu_plan import plans

    preset = load("gpu_multihop_rag", card=card)
    results = plans(preset.sft(), preset.grpo(), card)
    assert [p.phase for p in results] == ["sft", "grpo"] and all(p.fits for p in results)  # 10% free: test_gpu_plan


def test_the_seed_table_puts_runs_next_to_the_seeds_figures(tmp_path, capsys):
    from agentrl.cli import main

    run = tmp_path / "mhr-sft"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"n": 200, "overall": {"f1": 0.7123, "em": 0.64, "acc": 0.7}}))
    (run / "manifest.json").write_text(json.dumps({"config": {"policy": {"kind": "endpoint", "model": "mhr-sft"},
                                                               "task": {"top_k": 3}}}))
    assert main(["seed-table", str(run), "--config", "gpu_multihop_rag"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| mhr-sft: mhr-sft (n=200) | 3 | 200 | 0.712 | 0.640 | 0.700 |"
    assert out[-1] == "| seed: + LoRA SFT + GSPO | 3 | 200 | 0.863 |  |  |"
    assert main(["seed-table", str(tmp_path / "none")]) == 2
