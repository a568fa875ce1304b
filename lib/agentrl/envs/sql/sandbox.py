"""The SQLite sandbox of the SQL environment: the task table in an in-memory database, an authorizer, limits, one
statement at a time under a time limit, results as a compact text table (see agentrl.envs.sql.env for the whole)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass

from agentrl.core.io import DataError
from agentrl.envs.sql.dbbench import normalize_value
from agentrl.envs.sql.lex import MAX_CTE_EXPANSION, cte_expansion, first_keyword

_READ_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
                 "table_list", "database_list", "collation_list", "function_list", "compile_options"}
# printf/format: a width such as printf('%.*c', 500000000, 'x') runs for seconds inside one C call, where
# neither the progress handler nor the length limit stops it
_DENY_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "printf", "format"}
_TYPE_MAP = (("INT", "INTEGER"), ("FLOAT", "REAL"), ("DOUBLE", "REAL"), ("REAL", "REAL"), ("DECIMAL", "REAL"),
             ("NUMERIC", "REAL"))
TRANSACTION_WORDS = {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END"}


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


def column_types(table: dict) -> list[str]:
    """Return the SQLite types the episode database gives the task table's columns (see :func:`column_type`)."""
    columns = (table.get("table_info") or {}).get("columns") or []
    rows = (table.get("table_info") or {}).get("rows") or []
    return [column_type(c.get("type", "TEXT"), [r[i] for r in rows if i < len(r)]) for i, c in enumerate(columns)]


def _text(raw: bytes) -> str:
    """SQLite text as str; invalid UTF-8 (``CAST(x'ff' AS TEXT)``) is replaced instead of raising on read."""
    return raw.decode("utf-8", "replace")


def build_database(table: dict, limits: SQLLimits | None = None, *, all_text: bool = False,
                   types: list[str] | None = None) -> sqlite3.Connection:
    """Return an in-memory database holding the task's table (identifiers quoted), unsandboxed.

    Every column is ``COLLATE NOCASE`` (MySQL compares text case-insensitively). Types: ``types`` when given, else
    :func:`column_types`. ``all_text`` builds the table as AgentBench builds it in MySQL: every column TEXT and
    every value ``str(value)`` ('7.400' stays '7.400', a JSON null becomes 'None'), for AgentBench's table hash."""
    limits = limits or SQLLimits()
    info = table.get("table_info") or {}
    columns = info.get("columns") or []
    if not table.get("table_name") or not columns:
        raise DataError("SQL task table needs 'table_name' and 'table_info.columns'")
    declared = ["TEXT"] * len(columns) if all_text else (types or column_types(table))
    # no statement cache: the authorizer runs when a statement is prepared, and it must see every run of one (it
    # records what the statement reads and writes)
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False, cached_statements=0)
    conn.text_factory = _text
    name = quote(table["table_name"])
    cols = ", ".join(f"{quote(c['name'])} {t} COLLATE NOCASE" for c, t in zip(columns, declared, strict=True))
    conn.execute(f"CREATE TABLE {name} ({cols})")
    marks = ", ".join("?" for _ in columns)
    rows = [[str(v) if all_text else v for v in r] + [None] * (len(columns) - len(r)) for r in info.get("rows") or []]
    conn.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
    conn.execute(f"PRAGMA max_page_count = {limits.max_pages}")
    return conn


def sandbox(conn: sqlite3.Connection, table_name: str, limits: SQLLimits, reads: set | None = None,
            deny_functions: set[str] = _DENY_FUNCTIONS, writes: set | None = None) -> None:
    """Install the authorizer and limits on ``conn`` (see the module docstring); the names of tables a statement
    reads are added to ``reads`` when given (exec credit needs a result read from the task's table), those it may
    write to ``writes`` (AgentBench's hash replays every write, whatever it changed here)."""
    allowed_write = {table_name}

    def authorizer(action, arg1, arg2, dbname, source):
        if action == sqlite3.SQLITE_READ:
            if reads is not None:
                reads.add(arg1)
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if str(arg2).lower() in deny_functions else sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE):
            if arg1 in allowed_write and dbname == "main":
                if writes is not None:
                    writes.add(arg1)
                return sqlite3.SQLITE_OK
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:  # the allow-listed pragmas only read, whatever their argument
            return sqlite3.SQLITE_OK if str(arg1).lower() in _READ_PRAGMAS else sqlite3.SQLITE_DENY
        # ATTACH/DETACH, CREATE/DROP/ALTER anything, VACUUM, ANALYZE, REINDEX, and BEGIN/COMMIT/ROLLBACK/SAVEPOINT/
        # RELEASE: each statement commits on its own, so a write the episode rolled back can never be counted
        return sqlite3.SQLITE_DENY

    conn.set_authorizer(authorizer)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_length)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, limits.max_sql_length)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 50)


def _size(row: tuple) -> int:
    """Return the approximate size of a result row in characters/bytes (8 per number or NULL)."""
    return sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)


def check_statement(sql: str, limits: SQLLimits) -> None:
    """Raise ValueError for a statement refused before SQLite sees it: empty, a NUL character, longer than
    ``max_sql_length``, or common table expressions that would expand past ``MAX_CTE_EXPANSION`` tokens."""
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("query must be a non-empty SQL statement")
    if "\x00" in sql:
        raise ValueError("the statement contains a NUL character")
    if len(sql) > limits.max_sql_length:
        raise ValueError(f"statement longer than {limits.max_sql_length:,} characters")
    if cte_expansion(sql) > MAX_CTE_EXPANSION:
        raise ValueError(f"statement too complex: its common table expressions would expand to more than "
                         f"{MAX_CTE_EXPANSION:,} tokens (SQLite expands them before any time limit applies)")


def run_statement(conn: sqlite3.Connection, sql: str, limits: SQLLimits) -> tuple[list[str], list[tuple], bool]:
    """Execute one statement under the time limit; return ``(columns, rows, complete)``.

    ``rows`` holds up to ``max(max_rows, max_scored_rows)`` rows for scoring, more than the model is shown (past
    the first ``max_rows``, only while their text stays under ``max_scored_chars``); ``complete`` is False when
    the result had more rows than were kept (or the deadline came once ``max_rows`` were read: the fetch runs
    under the statement's deadline). Raises
    sqlite3.Error (including the time limit, as "interrupted") or ValueError for bad input.
    """
    check_statement(sql, limits)
    cap = max(limits.max_rows, limits.max_scored_rows)
    deadline = time.monotonic() + limits.time_limit
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    rows: list[tuple] = []
    complete = True
    cur = None
    try:
        try:
            cur = conn.execute(sql)
        except sqlite3.DatabaseError as exc:
            if "not authorized" in str(exc) and first_keyword(sql) in TRANSACTION_WORDS:
                raise ValueError("transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, END) is not "
                                 "allowed: each statement commits on its own") from None
            raise
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


def table_state(conn: sqlite3.Connection, table_name: str) -> Counter:
    """Return the table's rows as a multiset of normalised tuples."""
    rows = conn.execute(f"SELECT * FROM {quote(table_name)}").fetchall()
    return Counter(tuple(normalize_value(v) for v in r) for r in rows)
