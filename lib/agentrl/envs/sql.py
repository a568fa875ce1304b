"""SQL environment: one tool, ``execute_sql(query)``, over a per-episode SQLite database in a sandbox.

Sample task (AgentBench DB Bench, evaluation only)::

    {"id": "db_0", "question": "What is the Presentation of Credentials has a Termination of Mission listed as
     August 15, 2000? The name of this table is ..., and the headers of this table are ...",
     "golden_answers": ["March 19, 1998"],
     "metadata": {"kind": "select", "type": ["other"], "table": {"table_name": ..., "table_info": {...}},
                  "sql": "SELECT ...", "label": ["March 19, 1998"]}}

Metrics of an episode:

- ``answer_match`` (SELECT): the <answer> values equal the label on normalised values (AgentBench's rule).
- ``state_match`` (INSERT/UPDATE/DELETE): the final table equals what the gold statement makes of a fresh copy.
- ``result_match`` (SELECT): the last successful SELECT returned exactly the label values (up to
  ``SQLLimits.max_scored_rows`` rows are kept for this, not just the rows shown; a longer result never matches).
- ``exec``, execution match: 1 when the result set (SELECT: ``result_match``) or the final table
  (``state_match``) is right, whatever the <answer> says; otherwise ``partial_credit`` (default 0.1), or the
  Jaccard overlap of result rows / table rows with the expected ones when ``jaccard`` is on and that is larger,
  if at least one statement ran without error; 0 when every statement failed or none was run.
- ``em``/``f1``/``acc``/``precision``/``recall``: the headline 0/1 match, ``answer_match`` for SELECT and
  ``state_match`` for the others, so phase-02 statistics and curation work unchanged.

Sandbox (a security boundary: the model runs SQL it wrote): an in-memory database per episode; an
authorizer that allows reading, and writing rows of the task's own table only (no ATTACH, no DDL, no
load_extension, no PRAGMA but a read-only allow-list, no writes to sqlite_master); a progress-handler time
limit per statement; SQLite limits on string/blob length, statement length and page count; one statement per
call; results capped in rows and characters.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agentrl.io import DataError, iter_jsonl

SELECT_TYPES = {"other", "counting", "comparison", "ranking", "aggregation-SUM", "aggregation-MAX",
                "aggregation-MIN", "aggregation-AVG"}
_READ_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
                 "table_list", "database_list", "collation_list", "function_list", "compile_options"}
# printf/format: a width such as printf('%.*c', 500000000, 'x') runs for seconds inside one C call, where
# neither the progress handler nor the length limit stops it
_DENY_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "printf", "format"}
_TYPE_MAP = (("INT", "INTEGER"), ("FLOAT", "REAL"), ("DOUBLE", "REAL"), ("REAL", "REAL"), ("DECIMAL", "REAL"),
             ("NUMERIC", "REAL"))


@dataclass
class SQLLimits:
    """Resource limits of the sandbox."""

    time_limit: float = 1.0  # seconds per statement
    max_rows: int = 20  # rows shown to the model
    max_scored_rows: int = 10_000  # rows of a SELECT kept for scoring (result match, Jaccard)
    max_scored_chars: int = 1_000_000  # ... and their total text size: a wide result must not eat the memory
    max_cell_chars: int = 80
    max_output_chars: int = 2000
    max_length: int = 100_000  # longest string or blob SQLite may build
    max_sql_length: int = 10_000
    max_pages: int = 4096  # x 4 KB = 16 MB per episode database


def quote(identifier: str) -> str:
    """Return ``identifier`` quoted for SQLite (double quotes, inner quotes doubled)."""
    return '"' + str(identifier).replace('"', '""') + '"'


_NUMBER = re.compile(r"^\s*-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def column_type(declared: str, values: list | None = None) -> str:
    """Map a MySQL-ish column type to a SQLite one.

    Dates and years stay TEXT (NUMERIC affinity would mangle '1980-05-01'). A TEXT column whose every value is a
    number gets NUMERIC affinity: MySQL compares ``text_col < 107.7`` as numbers, SQLite compares TEXT with a
    number as text, and the DB Bench tables store numbers in TEXT columns.
    """
    up = (declared or "").upper()
    mapped = next((sqlite for key, sqlite in _TYPE_MAP if key in up), "TEXT")
    present = [v for v in values or [] if v is not None and str(v).strip() != ""]
    if mapped == "TEXT" and not any(k in up for k in ("DATE", "TIME")) and present \
            and all(_NUMBER.match(str(v)) for v in present):
        return "NUMERIC"
    return mapped


def mysql_to_sqlite(sql: str, table_name: str | None = None) -> str:
    """Return ``sql`` with the MySQL spellings SQLite rejects rewritten: backslash-escaped quotes inside string
    literals become doubled quotes, and the task's table name written bare where SQLite needs it quoted (MySQL
    accepts ``INSERT INTO 1952_British_Grand_Prix_0``; SQLite does not take an identifier that starts with a
    digit). Backticks and [brackets] SQLite accepts as identifier quotes."""
    sql = sql.replace("\\'", "''").replace('\\"', '"')
    if table_name and re.fullmatch(r"\w+", table_name) and table_name[0].isdigit():
        bare = re.compile(rf"(?<![`\"\w]){re.escape(table_name)}(?![`\"\w])")
        # outside string literals only: a value may spell the table's name too
        parts = re.split(r"('(?:[^']|'')*')", sql)
        sql = "".join(part if i % 2 else bare.sub(quote(table_name), part) for i, part in enumerate(parts))
    return sql


def _text(raw: bytes) -> str:
    """SQLite text as str; invalid UTF-8 (``CAST(x'ff' AS TEXT)``) is replaced instead of raising on read."""
    return raw.decode("utf-8", "replace")


def build_database(table: dict, limits: SQLLimits | None = None, *, mysql_types: bool = False) -> sqlite3.Connection:
    """Return an in-memory database holding the task's table (identifiers quoted, types mapped), unsandboxed.

    ``mysql_types`` keeps declared TEXT columns TEXT even when every value is a number (as MySQL stores them:
    '7.400' stays '7.400'), for AgentBench's table hash; the default gives such columns NUMERIC affinity so that
    comparisons with numbers behave as in MySQL."""
    limits = limits or SQLLimits()
    info = table.get("table_info") or {}
    columns = info.get("columns") or []
    if not table.get("table_name") or not columns:
        raise DataError("SQL task table needs 'table_name' and 'table_info.columns'")
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.text_factory = _text
    name = quote(table["table_name"])
    data = info.get("rows") or []
    def declared(i: int, c: dict) -> str:
        return column_type(c.get("type", "TEXT"), None if mysql_types else [r[i] for r in data if i < len(r)])

    cols = ", ".join(f"{quote(c['name'])} {declared(i, c)}" for i, c in enumerate(columns))
    conn.execute(f"CREATE TABLE {name} ({cols})")
    marks = ", ".join("?" for _ in columns)
    conn.executemany(f"INSERT INTO {name} VALUES ({marks})",
                     [list(r) + [None] * (len(columns) - len(r)) for r in info.get("rows") or []])
    conn.execute(f"PRAGMA max_page_count = {limits.max_pages}")
    return conn


def sandbox(conn: sqlite3.Connection, table_name: str, limits: SQLLimits, reads: set | None = None) -> None:
    """Install the authorizer and limits on ``conn`` (see the module docstring); the names of tables a statement
    reads are added to ``reads`` when given (exec credit needs a result read from the task's table)."""
    allowed_write = {table_name}

    def authorizer(action, arg1, arg2, dbname, source):
        if action == sqlite3.SQLITE_READ:
            if reads is not None:
                reads.add(arg1)
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_TRANSACTION,
                      sqlite3.SQLITE_SAVEPOINT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if str(arg2).lower() in _DENY_FUNCTIONS else sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE):
            return sqlite3.SQLITE_OK if arg1 in allowed_write and dbname == "main" else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:  # the allow-listed pragmas only read, whatever their argument
            return sqlite3.SQLITE_OK if str(arg1).lower() in _READ_PRAGMAS else sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_DENY  # ATTACH/DETACH, CREATE/DROP/ALTER anything, VACUUM, ANALYZE, REINDEX, ...

    conn.set_authorizer(authorizer)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_length)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, limits.max_sql_length)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 50)


_CTE_NAME = re.compile(r'(\w+|"[^"]+"|`[^`]+`)\s*(?:\([^()]*\))?\s*\bAS\s*(?:NOT\s+)?(?:MATERIALIZED\s+)?\(', re.I)


def _too_complex(sql: str) -> bool:
    """Return True for a statement whose CTEs refer to each other so often that SQLite's prepare step, where
    neither the progress handler nor an interrupt runs, would expand it exponentially (``c1`` reading ``c0``
    twice, ``c2`` reading ``c1`` twice, ...: 2**depth copies). Ordinary queries have a handful of CTEs."""
    if not re.search(r"\bWITH\b", sql, re.I):
        return False
    names = {m.group(1).strip('"`').lower() for m in _CTE_NAME.finditer(sql)}
    if len(names) < 6:
        return False
    words = re.findall(r'\w+|"[^"]+"|`[^`]+`', sql.lower())
    refs = sum(1 for w in words if w.strip('"`') in names) - len(names)
    return refs > 1.5 * len(names)  # a chain read once per step has about len(names); a doubling one twice that


def _size(row: tuple) -> int:
    """Return the approximate size of a result row in characters/bytes (8 per number or NULL)."""
    return sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)


def run_statement(conn: sqlite3.Connection, sql: str, limits: SQLLimits) -> tuple[list[str], list[tuple], bool]:
    """Execute one statement under the time limit; return ``(columns, rows, complete)``.

    ``rows`` holds up to ``max(max_rows, max_scored_rows)`` rows for scoring, more than the model is shown (past
    the first ``max_rows``, only while their text stays under ``max_scored_chars``); ``complete`` is False when
    the result had more rows than were kept (or the deadline came once ``max_rows`` were read: the fetch runs
    under the statement's deadline). Raises
    sqlite3.Error (including the time limit, as "interrupted") or ValueError for bad input.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("query must be a non-empty SQL statement")
    if "\x00" in sql:
        raise ValueError("the statement contains a NUL character")
    if _too_complex(sql):
        raise ValueError("statement too complex: many common table expressions referring to each other "
                         "(SQLite would expand them before any time limit applies)")
    cap = max(limits.max_rows, limits.max_scored_rows)
    deadline = time.monotonic() + limits.time_limit
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    rows: list[tuple] = []
    complete = True
    cur = None
    try:
        cur = conn.execute(sql)
        columns = [d[0] for d in cur.description or []]
        changes, size = conn.total_changes, 0
        try:
            for row in cur if columns else ():  # row by row: a batch of wide rows could overshoot the budget
                size += _size(row)
                # a row past the cap (or past the text budget, once the rows to show are in) exists: stop here
                if len(rows) == cap or (size > limits.max_scored_chars and len(rows) >= limits.max_rows):
                    complete = False
                    break
                rows.append(row)
        except sqlite3.OperationalError as exc:
            # a slow read that already produced the rows to show keeps them (as a cut result), like when only
            # those were fetched; a write (RETURNING) was rolled back, so its rows must not be shown
            if str(exc) != "interrupted" or len(rows) < limits.max_rows or conn.total_changes != changes:
                raise
            complete = False
    finally:
        conn.set_progress_handler(None, 0)
        if cur is not None:
            cur.close()  # release an unfinished statement: its remaining rows are never read
    return columns, rows, complete


def format_result(columns: list[str], rows: list[tuple], truncated: bool, limits: SQLLimits, changes: int) -> str:
    """Return a compact text table of a result: the first ``max_rows`` rows (a note when ``truncated`` or there
    were more), cells and total size cut, with a note."""
    if not columns:
        return f"OK ({changes} row{'s' if changes != 1 else ''} affected)"
    if not rows:
        return "(no rows) columns: " + " | ".join(columns)
    truncated = truncated or len(rows) > limits.max_rows
    rows = rows[:limits.max_rows]

    def cell(v) -> str:
        s = "NULL" if v is None else str(v)
        return s if len(s) <= limits.max_cell_chars else s[:limits.max_cell_chars] + "…"

    lines = [" | ".join(columns)] + [" | ".join(cell(v) for v in r) for r in rows]
    text = "\n".join(lines)
    if len(text) > limits.max_output_chars:
        text = text[:limits.max_output_chars] + "\n… (output cut)"
    if truncated:
        text += f"\n… (more rows: only the first {limits.max_rows} are shown; aggregate or add LIMIT)"
    return text


def normalize_value(v) -> str:
    """Return a comparable form of a value: lower-case text, numbers canonical (1.0 == 1), NULL/empty as "none".

    Text that parses to an infinite or NaN float ("1e999") stays text: ``int(inf)`` would raise inside a
    reward call."""
    if v is None:
        return "none"
    s = str(v).strip().strip("'\"").strip()
    if not s or s.lower() in ("none", "null"):
        return "none"
    try:
        f = float(s.replace(",", "")) if re.fullmatch(r"-?[\d,]*\.?\d+(e-?\d+)?", s, re.I) else None
    except ValueError:
        f = None
    if f is not None and math.isfinite(f):
        return repr(round(f, 6)).rstrip("0").rstrip(".") if f != int(f) else str(int(f))
    return " ".join(s.lower().split())


def values_match(got: list, label: list) -> bool:
    """Return True when two value lists are equal as multisets of normalised values ("none" = nothing)."""
    a = Counter(normalize_value(v) for v in got) - Counter({"none": 10**9})
    b = Counter(normalize_value(v) for v in label) - Counter({"none": 10**9})
    return a == b


def answer_matches(answer: str | None, label: list) -> bool:
    """Return True when an ``<answer>`` text gives the label values (a JSON/Python list, split on ", ", or as one
    joined string)."""
    if answer is None:
        return False
    text = answer.strip()
    if text.startswith("[") and text.endswith("]"):  # several values as a list, as the prompt asks
        import ast

        try:
            values = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            values = None
        if isinstance(values, list) and values_match([v[0] if isinstance(v, tuple) and v else v for v in values],
                                                     label):
            return True
    parts = [p for p in (x.strip() for x in answer.split(", ")) if p] or [""]
    if values_match(parts, label):
        return True
    return normalize_value(answer) == normalize_value(", ".join(str(x) for x in label))


def table_state(conn: sqlite3.Connection, table_name: str) -> Counter:
    """Return the table's rows as a multiset of normalised tuples."""
    rows = conn.execute(f"SELECT * FROM {quote(table_name)}").fetchall()
    return Counter(tuple(normalize_value(v) for v in r) for r in rows)


# A nested-CTE bomb grows SQLite's heap before any time limit can act; capping the process-wide SQLite heap
# turns it into a MemoryError after ~0.5 s instead of gigabytes (it caps every SQLite connection of the process)
SQLITE_HEAP_LIMIT = 512 * 1024 * 1024
SCORING = ("agentbench", "lenient")


def _cap_sqlite_heap() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if not current or current > SQLITE_HEAP_LIMIT:
            conn.execute(f"PRAGMA hard_heap_limit = {SQLITE_HEAP_LIMIT}")
    finally:
        conn.close()


class SQLEnv:
    """A SQLite database per episode with one tool; reset with a task row (see the module docstring)."""

    def __init__(self, limits: SQLLimits | None = None, max_calls: int | None = None, partial_credit: float = 0.1,
                 jaccard: bool = False, scoring: str = "agentbench"):
        if scoring not in SCORING:
            raise DataError(f"unknown SQL scoring '{scoring}' (choose from {', '.join(SCORING)})")
        self._limits = limits or SQLLimits()
        self._max_calls, self._partial, self._jaccard, self._scoring = max_calls, partial_credit, jaccard, scoring
        self._conn: sqlite3.Connection | None = None
        _cap_sqlite_heap()
        self.reset()

    def reset(self, **row) -> None:
        """Start an episode: build the task's database, remember the label and gold statement."""
        self._close()
        meta = row.get("metadata") or (json.loads(row["task"]) if isinstance(row.get("task"), str) else row.get("task"))
        self._meta = meta or {}
        self.calls = self.errors = self.ok = 0
        self._selects: list[tuple[list, bool]] = []  # (values, complete) of SELECTs that read the task's table
        self._writes: list[str] = []  # statements that changed rows, replayed for AgentBench's table hash
        self._reads: set[str] = set()
        self._conn = None
        self._initial: Counter | None = None
        table = self._meta.get("table")
        if table:
            self._open(table)

    def _open(self, table: dict) -> None:
        """Build the episode's database (the backend's part of ``reset``)."""
        self._conn = build_database(table, self._limits)
        self._initial = table_state(self._conn, table["table_name"])
        sandbox(self._conn, table["table_name"], self._limits, self._reads)

    def _close(self) -> None:
        """End the episode: release its database (the agent loop calls this once the episode is scored)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _interrupt(self) -> None:
        """Stop the statement running now, from another thread (the item was cancelled or timed out)."""
        if self._conn is not None:
            self._conn.interrupt()

    def execute_sql(self, query: str) -> str:
        """Run one SQL statement on the database and return the result as a small text table.

        Args:
            query: A single SQLite statement. Quote table and column names that contain spaces with double quotes.
        """
        return self._execute(query)

    def _execute(self, query: str) -> str:
        """The tool's body, shared by the backends: call limit, run, error text, bookkeeping for scoring."""
        if self._conn is None:
            raise RuntimeError("no database: reset the environment with a SQL task row first")
        if self._max_calls is not None and self.calls >= self._max_calls:
            return f"Call limit reached ({self._max_calls} statements). Give your answer now."
        self.calls += 1
        try:
            columns, rows, complete, changed, read_task = self._run(query)
        except MemoryError:
            self.errors += 1
            return "Error: the statement needs too much memory (statement too complex)"
        except Exception as exc:  # noqa: BLE001 - the model reads the error; nothing escapes the tool
            self.errors += 1
            return f"Error: {self._error_text(exc)}"
        self.ok += 1
        if changed:
            self._writes.append(query)
        if columns and read_task:
            self._selects.append(([v for r in rows for v in r], complete))
        return format_result(columns, rows, not complete, self._limits, changed)

    def _run(self, query: str) -> tuple[list[str], list[tuple], bool, int, bool]:
        """Run one statement; return ``(columns, rows, complete, rows changed, whether it read the task's table)``."""
        self._reads.clear()
        before = self._conn.total_changes
        columns, rows, complete = run_statement(self._conn, query, self._limits)
        return columns, rows, complete, self._conn.total_changes - before, \
            self._meta.get("table", {}).get("table_name") in self._reads

    def _error_text(self, exc: Exception) -> str:
        """The model's view of a failed statement."""
        msg = str(exc) if isinstance(exc, sqlite3.Error | ValueError | OverflowError) else \
            f"{type(exc).__name__}: {exc}"
        if msg == "interrupted":
            msg = f"statement stopped after the {self._limits.time_limit:g} s time limit"
        if "not authorized" in msg or "prohibited" in msg:
            msg += " (only SELECT, and INSERT/UPDATE/DELETE on the task's table, are allowed)"
        return msg

    def _final_state(self) -> Counter | None:
        """The task table now, as a multiset of normalised rows (None without a database)."""
        return table_state(self._conn, self._meta["table"]["table_name"]) if self._conn is not None else None

    def _expected_state(self) -> Counter | None:
        """The table after the gold statement on a fresh copy; None when there is none or it fails in SQLite."""
        gold = self._meta.get("sql")
        if not gold:
            return None
        table = self._meta["table"]
        fresh = build_database(table, self._limits)
        try:
            fresh.execute(mysql_to_sqlite(gold, table["table_name"]))
            return table_state(fresh, table["table_name"])
        except sqlite3.Error:
            return None  # reported as unscorable, never an exception out of scoring or a reward
        finally:
            fresh.close()

    def _agentbench_hash(self) -> str | None:
        """AgentBench's hash of the task table after the episode's writes, replayed on a copy whose TEXT columns
        keep the text as MySQL does ('7.400' stays '7.400')."""
        from agentrl.envs.agentbench import table_hash

        table = self._meta["table"]
        copy = build_database(table, self._limits, mysql_types=True)
        try:
            sandbox(copy, table["table_name"], self._limits)
            for statement in self._writes:
                try:
                    run_statement(copy, statement, self._limits)
                except Exception:  # noqa: BLE001 - it ran on the episode's database; a copy may still refuse it
                    continue
            cols = ", ".join(quote(c["name"]) for c in table["table_info"]["columns"])
            copy.set_authorizer(None)
            return table_hash(copy.execute(f"SELECT {cols} FROM {quote(table['table_name'])}").fetchall())
        finally:
            copy.close()

    def _score(self, answer: str | None) -> dict[str, float]:
        """Return the episode's metrics (see the module docstring) for the final ``answer`` text."""
        from agentrl.envs.agentbench import compare_results, expected_hash

        label = self._meta.get("label") or []
        overlap = 0.0
        unscorable = 0.0
        select = self._meta.get("kind") == "select"
        if select:
            answered = answer_matches(answer, label)
            agentbench = answer is not None and compare_results(answer, label)
            # execution match: any SELECT that read the task's table returned exactly the label (a later sanity
            # query does not take the credit back; a literal SELECT 'x' never earns it)
            executed = any(complete and values_match(vals, label) for vals, complete in self._selects)
            if self._jaccard and self._selects:
                want = Counter(map(normalize_value, label))
                overlap = max(_jaccard(Counter(map(normalize_value, vals)), want) for vals, _ in self._selects)
            result, state = executed, 0.0
            headline = agentbench if self._scoring == "agentbench" else answered
        else:
            expected = self._expected_state()
            final = self._final_state()
            executed = expected is not None and final == expected
            want_hash = expected_hash(self._meta.get("answer_md5"))
            agentbench = want_hash is not None and self._conn is not None and self._agentbench_hash() == want_hash
            unscorable = float(expected is None and want_hash is None)
            if self._jaccard and expected is not None and final is not None and self._initial is not None:
                # progress from the initial table toward the gold one: doing nothing earns 0, not 0.93
                start = _jaccard(self._initial, expected)
                overlap = max(0.0, (_jaccard(final, expected) - start) / (1 - start)) if start < 1 else 0.0
            answered, result, state = False, False, float(executed)
            headline = agentbench if self._scoring == "agentbench" and want_hash is not None else executed
        if select:
            partial = self._partial if self._selects else 0.0
        else:  # a write task earns partial credit only for having changed the table
            partial = self._partial if self._writes and final != self._initial else 0.0
        exec_score = 1.0 if executed else max(partial, overlap)
        m = float(headline)
        return {"exec": exec_score, "answer_match": float(answered), "state_match": state,
                "result_match": float(result), "agentbench": float(agentbench), "unscorable": unscorable,
                "em": m, "f1": m, "acc": m, "precision": m, "recall": m}


def _jaccard(a: Counter, b: Counter) -> float:
    """Return the multiset Jaccard overlap |a & b| / |a | b| (0 when both are empty)."""
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 0.0


def sql_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the SQL metrics of the episode ``env`` just ran (zeros when it never started); the task's scoring
    hook and what the SQL rewards read. (A function, not a method: TRL exposes public methods as tools.)"""
    if env is None:
        keys = ("exec", "answer_match", "state_match", "result_match", "agentbench", "unscorable", "em", "f1", "acc",
                "precision", "recall")
        return dict.fromkeys(keys, 0.0)
    return env._score(prediction)


def dbbench_row(rec: dict, task_id: str, where: str = "") -> dict:
    """Return one DB Bench record as a task row (question = description + table note, kind select/modify)."""
    for field in ("description", "label", "table", "type"):
        if field not in rec:
            raise DataError(f"{where}: missing field '{field}'")
    kind = "select" if set(rec["type"]) <= SELECT_TYPES else "modify"
    gold = (rec.get("sql") or {}).get("query") if kind == "select" else (rec["label"] or [None])[0]
    question = f"{rec['description'].strip()}\n{rec.get('add_description', '').strip()}".strip()
    return {"id": task_id, "question": question,
            "golden_answers": [str(x) for x in rec["label"]] if kind == "select" else ["done"],
            "metadata": {"kind": kind, "type": rec["type"][0], "types": rec["type"], "table": rec["table"],
                         "sql": gold, "label": rec["label"] if kind == "select" else [], "source": rec.get("source"),
                         "answer_md5": rec.get("answer_md5")}}


def load_dbbench(path: str | Path) -> list[dict]:
    """Return the tasks of a DB Bench-format JSONL file as task rows (ids db_0, db_1, ... by line)."""
    rows = [dbbench_row(rec, f"db_{lineno - 1}", f"{path}:{lineno}") for lineno, rec in iter_jsonl(path)]
    if not rows:
        raise DataError(f"{path}: no tasks")
    return rows


def oracle_plan(row: dict) -> list:
    """The oracle's turns for a SQL task: run the gold statement (for a SELECT whose gold query does not run in
    SQLite, look at the table instead), then answer with the label values (SELECT) or "done"."""
    meta = row.get("metadata") or {}
    table = meta["table"]["table_name"]
    query = mysql_to_sqlite(meta["sql"], table) if meta.get("sql") else None
    if meta.get("kind") == "select" and query:
        probe = build_database(meta["table"])
        try:
            probe.execute(query)
        except sqlite3.Error:
            query = None
        finally:
            probe.close()
    return oracle_turns(meta, query or f"SELECT * FROM {quote(table)} LIMIT 5")


def oracle_turns(meta: dict, query: str) -> list:
    """Return the oracle's two turns: ``query`` through ``execute_sql``, then the answer (the label values for a
    SELECT task, "done" otherwise)."""
    from agentrl.policies.base import Turn

    label = [str(x) for x in meta.get("label") or []]
    # several values as a list: AgentBench reads "a, b" as the single value "a b" (commas are thousands marks)
    answer = (label[0] if len(label) == 1 else json.dumps(label, ensure_ascii=False)) \
        if meta.get("kind") == "select" else "done"
    call = {"id": "call_0", "name": "execute_sql", "arguments": json.dumps({"query": query})}
    return [Turn(tool_calls=[call]), Turn(content=f"<answer>{answer}</answer>", finish_reason="stop")]
