"""The SQL oracle: demonstrations from a task's gold statement (``policy: "oracle"`` wherever they appear)."""

from __future__ import annotations

import json
import sqlite3

from agentrl.core.chat import Turn
from agentrl.envs.sql.lex import mysql_to_sqlite
from agentrl.envs.sql.sandbox import build_database, quote


def oracle_plan(row: dict) -> list:
    """The oracle's turns for a SQL task: run the gold statement (for a SELECT whose gold query does not run in
    SQLite, look at the table instead), then answer with the label values (SELECT) or "done"."""
    meta = row.get("metadata") or {}
    table = meta["table"]["table_name"]
    query = meta.get("sql")  # as written (MySQL): execute_sql rewrites it as it rewrites the model's statements
    if meta.get("kind") == "select" and query:
        probe = build_database(meta["table"])
        try:
            probe.execute(mysql_to_sqlite(query, table))
        except sqlite3.Error:
            query = None
        finally:
            probe.close()
    return oracle_turns(meta, query or f"SELECT * FROM {quote(table)} LIMIT 5")


def oracle_turns(meta: dict, query: str) -> list:
    """Return the oracle's two turns: ``query`` through ``execute_sql``, then the answer (the label values for a
    SELECT task, "done" otherwise)."""
    label = [str(x) for x in meta.get("label") or []]
    # several values as a list: AgentBench reads "a, b" as the single value "a b" (commas are thousands marks)
    answer = (label[0] if len(label) == 1 else json.dumps(label, ensure_ascii=False)) \
        if meta.get("kind") == "select" else "done"
    call = {"id": "call_0", "name": "execute_sql", "arguments": json.dumps({"query": query})}
    return [Turn(tool_calls=[call]), Turn(content=f"<answer>{answer}</answer>", finish_reason="stop")]
