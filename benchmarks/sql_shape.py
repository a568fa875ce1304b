"""The shape gap between the SQL tasks GRPO trains on and DB Bench: one table, one ratio per feature.

The synthetic training tasks (agentrl.envs.sql.synthetic, the SQL environment's ``train_qa = "synthetic"``, seed 0)
and AgentBench's DB Bench dev (data/samples/dbbench_dev.jsonl, evaluation only) side by side, on what a small model
meets: table width and headers (spaces, punctuation, digits, length), rows, cell values (numeric share, length), the
task mix (writes: DB Bench dev has 40 INSERT/UPDATE of 60), the gold statement's length in tokens, values per INSERT
and conditions per WHERE. The ratio is synthetic / DB Bench; a feature is "within" when the ratio is in 0.8-1.25
(issue 44's 20%).

    uv run python benchmarks/sql_shape.py                      # -> runs/bench/sql_shape.json
    uv run python benchmarks/sql_shape.py --seed 1 --tables 40

Tokens are the SmolLM2 tokenizer's (runs/models/smollm2-135m-instruct, `agentrl models prepare smollm2`); without
it, words and punctuation marks, with a line saying so.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DBBENCH = ROOT / "data" / "samples" / "dbbench_dev.jsonl"
SMOL = ROOT / "runs" / "models" / "smollm2-135m-instruct"


def _number(value: str) -> bool:
    try:
        float(str(value).replace(",", ""))
    except ValueError:
        return False
    return True


def gold_statement(meta: dict) -> str | None:
    """Return a task's gold statement (agentrl.envs.sql.dbbench.dbbench_row keeps it in ``sql``: a SELECT's
    query, a write's statement)."""
    return meta.get("sql") or None


def conditions(statement: str) -> int | None:
    """Return the number of conditions in a statement's WHERE clause (None without one)."""
    where = re.split(r"\bWHERE\b", statement, maxsplit=1, flags=re.IGNORECASE)
    if len(where) < 2:
        return None
    clause = re.split(r"\b(ORDER|GROUP|LIMIT)\b", where[1], flags=re.IGNORECASE)[0]
    return 1 + len(re.findall(r"\b(AND|OR)\b", clause, flags=re.IGNORECASE))


def insert_values(statement: str) -> int | None:
    """Return how many values an INSERT gives (None for another statement)."""
    found = re.search(r"\bVALUES\s*\((.*)\)", statement, flags=re.IGNORECASE | re.DOTALL)
    if not statement.lstrip().upper().startswith("INSERT") or not found:
        return None
    return len(re.findall(r"'(?:[^']|'')*'|[^,\s][^,]*", found.group(1)))


def features(rows: list[dict], count_tokens) -> dict[str, float]:
    """Return the shape features of task rows (their metadata: table, kind/type, sql, label)."""
    tables = {}
    for r in rows:
        table = r["metadata"]["table"]
        tables[(table["table_name"], tuple(c["name"] for c in table["table_info"]["columns"]))] = table
    headers = [c["name"] for t in tables.values() for c in t["table_info"]["columns"]]
    cells = [str(v) for t in tables.values() for row in t["table_info"]["rows"] for v in row]
    kinds = [str((r["metadata"].get("types") or [r["metadata"].get("type")])[0]).upper() for r in rows]
    statements = [s for s in (gold_statement(r["metadata"]) for r in rows) if s]
    inserts = [n for n in map(insert_values, statements) if n is not None]
    wheres = [n for n in map(conditions, statements) if n is not None]
    return {
        "columns per table": statistics.mean(len(t["table_info"]["columns"]) for t in tables.values()),
        "headers with a space": sum(" " in h for h in headers) / len(headers),
        "headers with punctuation": sum(bool(re.search(r"[^\w\s]", h)) for h in headers) / len(headers),
        "headers with a digit": sum(any(ch.isdigit() for ch in h) for h in headers) / len(headers),
        "header length (chars)": statistics.mean(len(h) for h in headers),
        "rows per table": statistics.mean(len(t["table_info"]["rows"]) for t in tables.values()),
        "numeric cells": sum(map(_number, cells)) / len(cells),
        "cell length (chars)": statistics.mean(len(c) for c in cells),
        "INSERT / UPDATE tasks": sum(k in ("INSERT", "UPDATE") for k in kinds) / len(kinds),
        "DELETE tasks": sum(k == "DELETE" for k in kinds) / len(kinds),
        "gold statement (tokens)": statistics.mean(count_tokens(s) for s in statements),
        "values per INSERT": statistics.mean(inserts) if inserts else 0.0,
        "conditions per WHERE": statistics.mean(wheres) if wheres else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the shape table with ratios, write it as JSON; return 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="the synthetic generator's seed")
    p.add_argument("--tables", type=int, default=20, help="synthetic tables (seven tasks each)")
    p.add_argument("--dbbench", default=str(DBBENCH), help="a DB Bench-layout file")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench" / "sql_shape.json"))
    args = p.parse_args(argv)
    from agentrl.core.io import write_json
    from agentrl.envs.sql.dbbench import load_dbbench
    from agentrl.envs.sql.synthetic import synthetic_sql_tasks

    if SMOL.is_dir():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(SMOL))
        count, unit = (lambda s: len(tok(s)["input_ids"])), "SmolLM2 tokens"
    else:
        print(f"{SMOL}: not prepared (`agentrl models prepare smollm2`): counting words and punctuation marks instead")
        count, unit = (lambda s: len(re.findall(r"\w+|[^\w\s]", s))), "words and marks"
    synthetic = features(synthetic_sql_tasks(args.tables, seed=args.seed), count)
    dbbench = features(load_dbbench(args.dbbench), count)
    print(f"synthetic ({args.tables} tables, seed {args.seed}) vs {Path(args.dbbench).name}; statements in {unit}")
    print("| feature | synthetic | DB Bench | ratio | within 20% |\n|---|---|---|---|---|")
    table = {}
    for name, ours in synthetic.items():
        theirs = dbbench[name]
        ratio = ours / theirs if theirs else float("inf") if ours else 1.0
        table[name] = {"synthetic": round(ours, 3), "dbbench": round(theirs, 3), "ratio": round(ratio, 3)}
        print(f"| {name} | {ours:.3f} | {theirs:.3f} | {ratio:.2f} | {'yes' if 0.8 <= ratio <= 1.25 else 'no'} |")
    within = sum(0.8 <= v["ratio"] <= 1.25 for v in table.values())
    print(f"{within} of {len(table)} features within 20%")
    write_json(args.out, {"seed": args.seed, "tables": args.tables, "dbbench": args.dbbench, "tokens": unit,
                          "features": table})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
