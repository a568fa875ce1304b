"""SQL environment: one tool, ``execute_sql(query)``, over a per-episode SQLite database in a sandbox.

Sample task (AgentBench DB Bench, evaluation only)::

    {"id": "db_0", "question": "What is the Presentation of Credentials has a Termination of Mission listed as
     August 15, 2000? The name of this table is ..., and the headers of this table are ...",
     "golden_answers": ["March 19, 1998"],
     "metadata": {"kind": "select", "type": ["other"], "table": {"table_name": ..., "table_info": {...}},
                  "sql": "SELECT ...", "label": ["March 19, 1998"]}}

Metrics of an episode:

- ``agentbench``: AgentBench's verdict (agentrl.envs.sql.agentbench): SELECT, the <answer> against the label by
  ``compare_results``; INSERT/UPDATE/DELETE, AgentBench's hash of the final table against ``answer_md5`` (or, when
  the task has none, the hash of what the gold statement makes of a fresh copy).
- ``answer_match`` (SELECT): the <answer> values equal the label on leniently normalised values.
- ``state_match`` (INSERT/UPDATE/DELETE): the final table equals what the gold statement makes of a fresh copy.
- ``result_match`` (SELECT): a SELECT returned exactly the label values from the task's table, and its result
  depends on that table's data (agentrl.envs.sql.credit: re-run on perturbed copies of the initial table).
  Up to ``SQLLimits.max_scored_rows`` rows are kept for this; a longer result never matches.
- ``exec``, execution match: 1 when ``result_match`` (SELECT) or ``state_match`` holds, whatever the <answer>
  says; otherwise the partial credit (default 0.1; the Jaccard overlap with the expected rows when ``jaccard`` is
  on and that is larger): on a SELECT task for having read the task's table, on a write task only for moving the
  table toward the gold one; 0 otherwise.
- ``overlap``, the dense credit the ``sql_overlap`` reward pays: 1 when ``exec`` is; otherwise, on a SELECT task,
  the best data-dependent SELECT's grade against the gold statement's result (agentrl.envs.sql.credit.overlap_credit:
  the gold columns it selected x its rows' overlap with the gold rows; an extra column earns 0), on a write task
  how far the table moved toward the gold one (credit.progress); 0 when the gold statement does not run.
- ``unscorable``: 1 when the headline cannot be computed (the gold statement fails and there is no
  ``answer_md5``); the reason goes to the trajectory's metadata (``unscorable_reason``).
- ``em``/``f1``/``acc``/``precision``/``recall``: the headline 0/1 match: ``agentbench`` under the default
  scoring, ``answer_match``/``state_match`` under ``scoring="lenient"``.

Sandbox (a security boundary: the model runs SQL it wrote): an in-memory database per episode; an authorizer that
allows reading, and writing rows of the task's own table only (no ATTACH, no DDL, no load_extension, no
transaction control, no PRAGMA but a read-only allow-list, no writes to sqlite_master); a progress-handler time
limit per statement; a bound on how far common table expressions expand (agentrl.envs.sql.lex); SQLite limits on
string/blob length, statement length and page count; one statement per call; results capped in rows and
characters. Statements are read as SQLite, except that string literals take MySQL's backslash escapes (DB Bench
is MySQL's). Every text column compares case-insensitively (``COLLATE NOCASE``), as MySQL's default collation does.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass

from agentrl.core.io import DataError
from agentrl.envs.base import ToolError, row_metadata
from agentrl.envs.sql.agentbench import compare_results, has_answer_md5, hash_answer, modify_correct, table_hash
from agentrl.envs.sql.credit import (
    VARIANTS,
    closer_to_gold,
    jaccard,
    overlap_credit,
    perturbed_tables,
    progress,
    result_key,
)
from agentrl.envs.sql.dbbench import answer_matches, normalize_value, values_match
from agentrl.envs.sql.lex import fold_map, hash_dialect, match_accents, mysql_to_sqlite
from agentrl.envs.sql.sandbox import (
    _DENY_FUNCTIONS,
    SQLLimits,
    build_database,
    column_types,
    format_result,
    quote,
    run_statement,
    sandbox,
    table_state,
)

# re-runs that decide exec credit must be reproducible: a result that changes by chance proves nothing
_RERUN_DENY = _DENY_FUNCTIONS | {"random", "randomblob"}


class ScoringInterrupted(Exception):
    """The episode was interrupted (item timeout or cancellation) while it was being scored."""


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


@dataclass
class GoldResult:
    """What the gold statement makes of a fresh copy of the task table."""

    state: Counter | None  # the table as a multiset of normalised rows; None when the statement fails
    digest: str | None  # AgentBench's hash of it (None for an empty table, or when not asked for)
    error: str | None  # why the gold statement failed; None when it ran


@dataclass
class Select:
    """A statement of the episode that returned rows read from the task's table."""

    query: str  # as the backend ran it
    values: list  # the result's values, row after row (up to max_scored_rows rows)
    complete: bool  # False when the result had more rows than were kept
    clean: bool  # no write had changed the table when it ran


class SQLEnv:
    """A SQLite database per episode with one tool; reset with a task row (see the module docstring)."""

    BACKEND = "SQLite"

    def __init__(self, limits: SQLLimits | None = None, max_calls: int | None = None, partial_credit: float = 0.1,
                 jaccard: bool = False, scoring: str = "agentbench"):
        if scoring not in SCORING:
            raise DataError(f"unknown SQL scoring '{scoring}' (choose from {', '.join(SCORING)})")
        self._limits = limits or SQLLimits()
        self._max_calls, self._partial, self._jaccard, self._scoring = max_calls, partial_credit, jaccard, scoring
        self._conn = None
        self._copies: dict[str, sqlite3.Connection] = {}
        self._scratch: set = set()  # scoring's own connections, which an interrupt must stop too
        self._scratch_lock = threading.Lock()
        self._cancel = threading.Event()
        _cap_sqlite_heap()
        self.reset()

    def reset(self, **row) -> None:
        """Start an episode: build the task's database, remember the label and gold statement."""
        self._close()
        meta = row_metadata(row)
        self._meta = meta or {}
        self.calls = self.errors = self.ok = 0
        self._selects: list[Select] = []  # statements that returned rows read from the task's table
        self._writes: list[str] = []  # write statements that ran, replayed for AgentBench's table hash
        self._changed = 0  # rows they changed here
        self._reads: set[str] = set()
        self._wrote: set[str] = set()
        self._initial: Counter | None = None
        self._cache: dict = {}
        self._reruns: dict = {}  # (query, variant) -> _rerun_table's result: the copies do not change in an episode
        self._gold_result: GoldResult | None = None
        self._stored_values: dict | None = None
        self._notes: dict = {}
        self._cancel.clear()
        table = self._meta.get("table")
        if table:
            self._open(table)

    def _open(self, table: dict) -> None:
        """Build the episode's database (the backend's part of ``reset``)."""
        self._conn = build_database(table, self._limits)
        self._initial = table_state(self._conn, table["table_name"])
        sandbox(self._conn, table["table_name"], self._limits, self._reads, writes=self._wrote)

    def _close(self) -> None:
        """End the episode: release its database (the agent loop calls this once the episode is scored)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        for variant in list(self._copies):
            self._drop_copy(variant)

    def _interrupt(self) -> None:
        """Stop the statement running now, from another thread (the item was cancelled or timed out), whether the
        model's or one that scoring runs; scoring then stops with ScoringInterrupted."""
        self._cancel.set()
        with self._scratch_lock:
            targets = [self._conn, *self._scratch]
        for conn in targets:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.interrupt()

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise ScoringInterrupted("the episode was interrupted while it was being scored")

    @contextlib.contextmanager
    def _scratch_db(self, table: dict, **kw):
        """A scratch copy of ``table`` for scoring (``build_database`` arguments), registered for interrupts and
        closed on exit."""
        self._check_cancel()
        conn = build_database(table, self._limits, **kw)
        with self._scratch_lock:
            self._scratch.add(conn)
        try:
            self._check_cancel()  # an interrupt that came while it was built found nothing to stop
            yield conn
        finally:
            with self._scratch_lock:
                self._scratch.discard(conn)
            conn.close()

    def execute_sql(self, query: str) -> str:
        """Run one SQL statement on the database and return the result as a small text table.

        Args:
            query: A single SQLite statement. Quote table and column names that contain spaces with double quotes.
        """
        return self._execute(query)

    def _execute(self, query: str) -> str:
        """The tool's body, shared by the backends: call limit, run, bookkeeping for scoring. A failed statement
        raises ToolError with the text the model reads (``Error: ...``)."""
        if self._conn is None:
            raise RuntimeError("no database: reset the environment with a SQL task row first")
        if self._max_calls is not None and self.calls >= self._max_calls:
            raise ToolError(f"Call limit reached ({self._max_calls} statements). Give your answer now.")
        self.calls += 1
        try:
            statement = self._prepare(query)
            columns, rows, complete, changed, read_task, write = self._run(statement)
        except MemoryError:
            self.errors += 1
            raise ToolError("Error: the statement needs too much memory (statement too complex)") from None
        except Exception as exc:  # noqa: BLE001 - the model reads the error as a refusal of its statement
            self.errors += 1
            raise ToolError(f"Error: {self._error_text(exc)}") from None
        self.ok += 1
        clean = not self._changed
        self._changed += changed
        if write:
            self._writes.append(statement)
        if columns and read_task:
            self._selects.append(Select(statement, [v for r in rows for v in r], complete, clean))
        return format_result(columns, rows, not complete, self._limits, changed)

    def _prepare(self, query):
        """The statement as this backend runs it: MySQL string escapes and a bare digit-leading task table name
        rewritten for SQLite, strings compared with a value of the table matched without accents, as MySQL's
        collation matches them (agentrl.envs.sql.lex: mysql_to_sqlite, match_accents)."""
        if not isinstance(query, str):
            return query
        return match_accents(mysql_to_sqlite(query, self._meta["table"]["table_name"]), self._stored())

    def _run(self, query: str) -> tuple[list[str], list[tuple], bool, int, bool, bool]:
        """Run one statement; return ``(columns, rows, complete, rows changed, whether it read the task's table,
        whether it is a write)``."""
        self._reads.clear()
        self._wrote.clear()
        before = self._conn.total_changes
        columns, rows, complete = run_statement(self._conn, query, self._limits)
        name = self._meta.get("table", {}).get("table_name")
        return columns, rows, complete, self._conn.total_changes - before, name in self._reads, name in self._wrote

    def _error_text(self, exc: Exception) -> str:
        """The model's view of a failed statement."""
        msg = str(exc) if isinstance(exc, sqlite3.Error | ValueError | OverflowError) else \
            f"{type(exc).__name__}: {exc}"
        if msg == "interrupted":
            msg = f"statement stopped after the {self._limits.time_limit:g} s time limit"
        if "not authorized" in msg or "prohibited" in msg:
            msg += " (only SELECT, and INSERT/UPDATE/DELETE on the task's table, are allowed)"
        return msg

    # ------------------------------------------------------------------ scoring (backend hooks first)

    def _final_state(self) -> Counter | None:
        """The task table now, as a multiset of normalised rows (None without a database)."""
        return table_state(self._conn, self._meta["table"]["table_name"]) if self._conn is not None else None

    def _run_gold(self, want_digest: bool) -> GoldResult:
        """Run the gold statement (MySQL, rewritten for SQLite) on a fresh copy; with ``want_digest`` also on a copy
        built as AgentBench builds it, for the expected table hash."""
        gold = self._meta.get("sql")
        if not gold:
            return GoldResult(None, None, "the task has no gold statement")
        table = self._meta["table"]
        name = table["table_name"]
        statement = match_accents(mysql_to_sqlite(gold, name, double_quoted_strings=True), self._stored())
        try:
            with self._scratch_db(table) as fresh:
                sandbox(fresh, name, self._limits)
                run_statement(fresh, statement, self._limits)
                fresh.set_authorizer(None)
                state = table_state(fresh, name)
            digest = None
            if want_digest:
                with self._scratch_db(table, all_text=True) as copy:
                    sandbox(copy, name, self._limits)
                    run_statement(copy, hash_dialect(statement, self._stored()), self._limits)
                    digest = table_hash(_table_rows(copy, table))
            return GoldResult(state, digest, None)
        except ScoringInterrupted:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the reason the task is unscorable
            self._check_cancel()  # an interrupt is no verdict on the statement
            return GoldResult(None, None, self._error_text(exc))

    def _agentbench_hash(self) -> str | None:
        """AgentBench's hash of the task table after the episode's writes, replayed on a copy built as AgentBench
        builds the table (every column TEXT, as MySQL stores it: '7.400' stays '7.400') in the MySQL-like dialect
        of agentrl.envs.sql.lex.hash_dialect."""
        table = self._meta["table"]
        with self._scratch_db(table, all_text=True) as copy:
            sandbox(copy, table["table_name"], self._limits)
            for statement in self._writes:
                self._check_cancel()
                with contextlib.suppress(Exception):  # it ran on the episode's database; a copy may refuse it
                    run_statement(copy, hash_dialect(statement, self._stored()), self._limits)
            self._check_cancel()
            return table_hash(_table_rows(copy, table))

    def _stored(self) -> dict[str, tuple[str, ...]]:
        """The initial table's values by accent- and case-folded text (agentrl.envs.sql.lex.hash_dialect)."""
        if self._stored_values is None:
            rows = self._meta["table"]["table_info"].get("rows") or []
            self._stored_values = fold_map(v for r in rows for v in r)
        return self._stored_values

    def _rerun(self, query: str, variant: str) -> tuple[list, bool] | None:
        """Run a query of the episode on a copy of the initial table (``base`` or a perturbation of
        agentrl.envs.sql.credit); return ``(values, complete)``, or None when it fails, writes or returns no
        columns."""
        result = self._rerun_once(query, variant)
        return None if result is None else ([v for r in result[1] for v in r], result[2])

    def _rerun_once(self, query: str, variant: str) -> tuple[list[str], list[tuple], bool] | None:
        """:meth:`_rerun_table`'s result, each query run once per copy in an episode (the credit checks and the dense
        credit re-read the same SELECTs; a copy a write spoilt is rebuilt, so the result stays the same)."""
        if (query, variant) not in self._reruns:
            self._reruns[query, variant] = self._rerun_table(query, variant)
        return self._reruns[query, variant]

    def _gold_query(self) -> str | None:
        """The task's gold statement as this backend runs it (None without one)."""
        gold = self._meta.get("sql")
        if not gold:
            return None
        return match_accents(mysql_to_sqlite(gold, self._meta["table"]["table_name"], double_quoted_strings=True),
                             self._stored())

    def _overlap_credit(self) -> float:
        """Return the best dense credit (agentrl.envs.sql.credit.overlap_credit) of the episode's data-dependent SELECTs
        against the gold statement's result on the initial table; 0 when the gold statement does not run."""
        gold_query = self._gold_query()
        gold = self._rerun_once(gold_query, "base") if gold_query else None
        if gold is None:
            return 0.0
        best, seen = 0.0, set()
        for sel in self._selects:
            if sel.query in seen or best >= 1.0:
                continue
            seen.add(sel.query)
            if self._dependent_result(sel) is None:
                continue
            mine = self._rerun_once(sel.query, "base")
            if mine is not None:
                best = max(best, overlap_credit(mine[0], mine[1], gold[0], gold[1]))
        return best

    def _rerun_table(self, query: str, variant: str) -> tuple[list[str], list[tuple], bool] | None:
        """Run a query on a copy of the initial table (``base`` or a perturbation); return ``(columns, rows,
        complete)``, or None when it fails, writes or returns no columns."""
        self._check_cancel()
        conn = self._copy(variant)
        before = conn.total_changes
        try:
            columns, rows, complete = run_statement(conn, query, self._limits)
        except Exception:  # noqa: BLE001 - a failing re-run is no evidence
            self._check_cancel()
            return None
        if conn.total_changes != before:  # a write is no read of the data (and the copy is spoilt)
            self._drop_copy(variant)
            return None
        return (list(columns), list(rows), complete) if columns else None

    def _copy(self, variant: str) -> sqlite3.Connection:
        if variant not in self._copies:
            table = self._meta["table"]
            conn = build_database(perturbed_tables(table)[variant], self._limits, types=column_types(table))
            sandbox(conn, table["table_name"], self._limits, deny_functions=_RERUN_DENY)
            with self._scratch_lock:
                self._scratch.add(conn)
            self._copies[variant] = conn
        return self._copies[variant]

    def _drop_copy(self, variant: str) -> None:
        conn = self._copies.pop(variant, None)
        if conn is not None:
            with self._scratch_lock:
                self._scratch.discard(conn)
            conn.close()

    def _gold(self) -> GoldResult:
        """The gold statement's effect, once per episode (the expected hash only when the task has no answer_md5)."""
        if self._gold_result is None:
            self._gold_result = self._run_gold(not has_answer_md5(self._meta.get("answer_md5")))
        return self._gold_result

    def _cached(self, key: str, compute):
        """``compute()`` once per state of the episode (a reward function and the trajectory score the same one)."""
        if self._cache.get("_calls") != self.calls:
            self._cache = {"_calls": self.calls}
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def _dependent_result(self, sel: Select) -> tuple[list, bool] | None:
        """The result ``sel``'s query gives on the initial table, when it depends on the table's data (it changes
        on at least one perturbed copy, and it is reproducible); None otherwise (agentrl.envs.sql.credit)."""
        base = self._rerun(sel.query, "base")
        if base is None or (sel.clean and result_key(base[0]) != result_key(sel.values)):
            return None
        for variant in VARIANTS:
            other = self._rerun(sel.query, variant)
            if other is not None and result_key(other[0]) != result_key(base[0]):
                return base
        return None

    def _select_credit(self, label: list) -> tuple[bool, float]:
        """Return ``(result_match, Jaccard overlap)`` over the episode's SELECTs whose results depend on the task
        table's data; the best one counts (a later sanity query does not take the credit back)."""
        want = Counter(map(normalize_value, label))
        best, seen = 0.0, set()
        for sel in sorted(self._selects, key=lambda s: not (s.complete and values_match(s.values, label))):
            if (sel.query, sel.clean) in seen:
                continue
            seen.add((sel.query, sel.clean))
            match = sel.complete and values_match(sel.values, label)
            if not match and (not self._jaccard or _jaccard(Counter(map(normalize_value, sel.values)), want) <= best):
                continue
            base = self._dependent_result(sel)
            if base is None:
                continue
            values, complete = base
            if complete and values_match(values, label):
                return True, 1.0
            if self._jaccard:
                best = max(best, _jaccard(Counter(map(normalize_value, values)), want))
        return False, best

    def _score(self, answer: str | None) -> dict[str, float]:
        """Return the episode's metrics (see the module docstring) for the final ``answer`` text."""
        label = self._meta.get("label") or []
        overlap = unscorable = 0.0
        self._notes = {}
        if self._meta.get("kind") == "select":
            answered = answer_matches(answer, label)
            agentbench = answer is not None and compare_results(answer, label)
            executed, overlap = self._cached("select", lambda: self._select_credit(label))
            result, state = executed, 0.0
            headline = agentbench if self._scoring == "agentbench" else answered
            partial = self._partial if self._selects else 0.0  # read the task's table
            dense = 1.0 if executed else self._cached("overlap", self._overlap_credit)
        else:
            gold = self._gold()
            final = self._cached("final", self._final_state)
            expected = gold.state
            executed = expected is not None and final == expected
            answer_md5 = self._meta.get("answer_md5")
            # AgentBench computes the expected hash from the gold statement when the task carries none
            truth = answer_md5 if has_answer_md5(answer_md5) else None if gold.error else hash_answer(gold.digest)
            agentbench = truth is not None and self._conn is not None and \
                modify_correct(self._cached("hash", self._agentbench_hash), truth)
            if (truth if self._scoring == "agentbench" else expected) is None:
                unscorable = 1.0
                self._notes["unscorable_reason"] = f"the gold statement fails on {self.BACKEND}: {gold.error}"
            dense = 1.0 if executed else progress(self._initial, final, expected)
            if self._jaccard:
                overlap = dense
            moved = bool(self._changed) and closer_to_gold(self._initial, final, expected)
            partial = self._partial if moved else 0.0
            answered, result, state = False, False, float(executed)
            headline = agentbench if self._scoring == "agentbench" else executed
        exec_score = 1.0 if executed else max(partial, overlap)
        m = float(headline)
        return {"exec": exec_score, "overlap": dense, "answer_match": float(answered), "state_match": state,
                "result_match": float(result), "agentbench": float(agentbench), "unscorable": unscorable,
                "em": m, "f1": m, "acc": m, "precision": m, "recall": m}

    def _score_notes(self) -> dict:
        """Return what the last scoring adds to the trajectory's metadata (``unscorable_reason``), or {}."""
        return dict(self._notes)


def _table_rows(conn: sqlite3.Connection, table: dict) -> list[tuple]:
    """The task table's rows in column order (authorizer lifted: scoring's own read)."""
    conn.set_authorizer(None)
    cols = ", ".join(quote(c["name"]) for c in table["table_info"]["columns"])
    return conn.execute(f"SELECT {cols} FROM {quote(table['table_name'])}").fetchall()


def _jaccard(a: Counter, b: Counter) -> float:
    return jaccard(a, b)


METRIC_KEYS = ("exec", "overlap", "answer_match", "state_match", "result_match", "agentbench", "unscorable", "em", "f1",
               "acc",
               "precision", "recall")


def sql_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the SQL metrics of the episode ``env`` just ran (zeros when it never started, or when it was
    interrupted while being scored); the task's scoring hook and what the SQL rewards read. (A function, not a
    method: TRL exposes public methods as tools.)"""
    if env is None:
        return dict.fromkeys(METRIC_KEYS, 0.0)
    try:
        return env._score(prediction)
    except ScoringInterrupted:
        return dict.fromkeys(METRIC_KEYS, 0.0)
