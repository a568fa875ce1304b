"""MariaDB backend of the SQL environment: DB Bench tasks on a real MySQL-compatible server, as AgentBench runs them.

One ``mariadbd`` per process (``shared_server()``, agentrl.envs.sql.mariadb_server), started lazily by the first
episode that needs it, on a private unix socket (no TCP) with its data directory in a private temporary directory
(tmpfs when there is one), stopped at exit. Each episode gets:

- a database ``ep_<random>`` holding the task table created as AgentBench creates it (every column TEXT, every
  value ``str(value)``),
- a user of the same name that may SELECT/INSERT/UPDATE/DELETE in that database and nothing else (no FILE, no
  DDL, no other database; ``MAX_STATEMENT_TIME`` and ``MAX_USER_CONNECTIONS`` on the account),
- dropped, user and database, when the episode ends (``_close``, the next ``reset``, or garbage collection).

``execute_sql`` runs one statement whose first keyword is on an allow-list (SELECT/WITH/VALUES, SHOW, DESCRIBE,
EXPLAIN, INSERT/UPDATE/DELETE/REPLACE): ``SET`` (which could lift the session's statement time limit), prepared
or dynamic statements and transaction control are refused before they reach the server. A watchdog kills a
statement that outlives the time limit by more than a grace period, whatever the session did; each statement
commits on its own, and a write that grows the table past the size cap is rolled back. Errors (syntax,
permission, time limit) come back as ``Error: ...`` text; no exception leaves ``execute_sql``.

Scoring is SQLEnv's (agentrl.envs.sql.env), with the table hash computed natively by AgentBench's own query (on an
admin connection of the episode's own), the expected final table and hash made by the gold statement on a scratch
copy run as a separate restricted user (cached per task), and exec credit's re-runs of the model's reads on
perturbed copies of the table (agentrl.envs.sql.credit), each a database only the episode's user may SELECT from.
An interrupt (item timeout) kills whichever of these queries is running.

Sample::

    row = load_dbbench("data/samples/dbbench_dev.jsonl")[40]
    env = MariaDBEnv()
    env.reset(**row)
    env.execute_sql("UPDATE `Football Team Results` SET Wins = '5', Byes = '3', Losses = '8', Draws = '2', "
                    "Against = '1305' WHERE `Ballarat FL` = 'Creswick'")    # -> "OK (1 row affected)"
    sql_score("done", row, env)["agentbench"]   # 1.0: the table hash equals the task's answer_md5
    env._close()                                # drops the episode's database and user
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import threading
import weakref
from collections import Counter

from agentrl.envs.sql.credit import perturbed_tables
from agentrl.envs.sql.dbbench import normalize_value
from agentrl.envs.sql.env import GoldResult, SQLEnv
from agentrl.envs.sql.mariadb_server import (
    _LOST,
    MariaDBServer,
    _grant_pattern,
    _text,
    agentbench_hash_sql,
    backtick,
    shared_server,
)
from agentrl.envs.sql.oracle import oracle_turns
from agentrl.envs.sql.sandbox import SQLLimits

ALLOWED = {"SELECT", "WITH", "VALUES", "TABLE", "(", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "INSERT", "UPDATE",
           "DELETE", "REPLACE"}
WRITES = {"INSERT", "UPDATE", "DELETE", "REPLACE"}
_READS = {"SELECT", "WITH", "VALUES", "TABLE", "("}
_INTERRUPTED = {1317, 1969, 3024}  # query interrupted (KILL QUERY), max_statement_time exceeded (MariaDB, MySQL)
WATCHDOG_GRACE = 1.0  # seconds past the time limit before the watchdog kills a statement the server did not stop
MAX_TABLE_ROWS = 100_000
MAX_TABLE_CHARS = 16_000_000  # the SQLite backend's 16 MB page cap, as text size



def first_keyword(sql: str) -> str:
    """Return the statement's first keyword, upper-case, after leading whitespace and comments ("(" for a
    parenthesised query, "/*!" for a leading executable comment, "" for none)."""
    s = sql
    while True:
        s = s.lstrip()
        if s.startswith(("--", "#")):
            s = s.split("\n", 1)[1] if "\n" in s else ""
        elif s.startswith(("/*!", "/*M!")):
            return "/*!"  # MariaDB runs its content or skips it depending on a version number: refused
        elif s.startswith("/*"):
            end = s.find("*/", 2)
            s = s[end + 2:] if end >= 0 else ""
        else:
            break
    if s.startswith("("):
        return "("
    m = re.match(r"[A-Za-z]+", s)
    return m.group(0).upper() if m else ""


_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'")


class MariaDBEnv(SQLEnv):
    """SQLEnv on a per-episode MariaDB database and user (see the module docstring); the same tool, rewards and
    scoring. ``server`` defaults to the process's shared server, started on the first episode."""

    BACKEND = "MariaDB"

    def __init__(self, limits: SQLLimits | None = None, max_calls: int | None = None, partial_credit: float = 0.1,
                 jaccard: bool = False, scoring: str = "agentbench", server: MariaDBServer | None = None):
        self._server = server
        self._database: str | None = None
        self._finalizer = None
        self._busy = threading.Lock()
        self._stale = False  # the episode connection was lost: reconnect before the next statement
        self._score_conn = None  # an admin connection of this episode's scoring (an interrupt kills its query)
        self._variants: dict[str, str] = {}  # perturbed copies of the table for exec credit: variant -> database
        super().__init__(limits, max_calls, partial_credit, jaccard, scoring)

    def execute_sql(self, query: str) -> str:
        """Run one SQL statement on the MySQL (MariaDB) database and return the result as a small text table.

        Args:
            query: A single MySQL statement. Quote table and column names that contain spaces with backticks.
        """
        return self._execute(query)

    # ------------------------------------------------------------------ episode lifecycle

    def _open(self, table: dict) -> None:
        """Create the episode's database, table and user, and connect as that user."""
        server = self._server = self._server or shared_server()
        database = "ep_" + secrets.token_hex(6)
        password = secrets.token_hex(16)
        server._create(database, table)
        try:
            server.admin([
                f"CREATE USER '{database}'@'localhost' IDENTIFIED BY '{password}' WITH MAX_USER_CONNECTIONS 2 "
                f"MAX_STATEMENT_TIME {self._limits.time_limit:g}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON {_grant_pattern(database)}.* TO '{database}'@'localhost'"])
            conn = self._connect(server, database, password)
        except Exception:
            _drop(server, database, None)
            raise
        self._conn, self._database, self._password = conn, database, password
        self._finalizer = weakref.finalize(self, _drop, server, database, conn, self._variants)
        rows = table["table_info"].get("rows") or []
        self._initial = Counter(tuple(normalize_value(str(v)) for v in r) for r in rows)

    def _connect(self, server: MariaDBServer, database: str, password: str):
        """Connect as the episode's user, rows capped at what scoring keeps (+1 to tell a longer result)."""
        conn = server.connect(database, password, database, streaming=True)
        cap = max(self._limits.max_rows, self._limits.max_scored_rows) + 1
        with conn.cursor() as cur:  # ours, before any statement of the model's: SET is refused to it
            cur.execute(f"SET SESSION sql_select_limit = {cap}")
        return conn

    def _close(self) -> None:
        """End the episode: close the connections, drop its user and databases (idempotent)."""
        if self._score_conn is not None:
            with self._scratch_lock:
                self._scratch.discard(self._score_conn)
            with contextlib.suppress(Exception):
                self._score_conn.close()
            self._score_conn = None
        if self._finalizer is not None:
            if not self._busy.acquire(timeout=self._limits.time_limit + 2 * WATCHDOG_GRACE):
                with contextlib.suppress(Exception):  # stuck: cut the connection off
                    self._server.admin([f"KILL CONNECTION {int(self._conn.thread_id())}"])
            else:
                self._busy.release()
            self._finalizer()
        self._finalizer, self._conn, self._database = None, None, None
        self._variants = {}

    def _interrupt(self) -> None:
        """Stop the statement running now (the item was cancelled), the model's or one of scoring's: KILL QUERY from
        an admin connection; scoring then stops with ScoringInterrupted."""
        self._cancel.set()
        conn, server = self._conn, self._server
        if server is None:
            return
        with self._scratch_lock:
            scoring = list(self._scratch)
        for c in ([conn] if conn is not None and self._busy.locked() else []) + scoring:
            with contextlib.suppress(Exception):
                server.kill_query(c.thread_id())

    # ------------------------------------------------------------------ statements

    def _prepare(self, query):
        """MySQL runs the model's statement as written."""
        return query

    @contextlib.contextmanager
    def _episode_connection(self):
        """The episode's connection, held for one statement: reconnected when lost, a watchdog that kills the
        query past the time limit, rolled back on error (and marked lost when the connection went)."""
        import pymysql

        with self._busy:
            if self._stale:
                self._reconnect()
            conn = self._conn
            timer = threading.Timer(self._limits.time_limit + WATCHDOG_GRACE, self._server.kill_query,
                                    (conn.thread_id(),))
            timer.daemon = True
            timer.start()
            try:
                yield conn
            except Exception as exc:
                with contextlib.suppress(Exception):
                    conn.rollback()
                if isinstance(exc, pymysql.err.InterfaceError) or \
                        (isinstance(exc, pymysql.err.OperationalError) and exc.args[0] in _LOST):
                    self._stale = True
                raise
            finally:
                timer.cancel()

    def _run(self, query: str) -> tuple[list[str], list[tuple], bool, int, bool, bool]:
        """Run one statement of the model's; return ``(columns, rows, complete, changed, read_task_table,
        write)``. Raises ValueError (refused statement) or pymysql errors, which ``_execute`` turns into text."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty SQL statement")
        if "\x00" in query:
            raise ValueError("the statement contains a NUL character")
        if len(query) > self._limits.max_sql_length:
            raise ValueError(f"statement longer than {self._limits.max_sql_length:,} characters")
        keyword = first_keyword(query)
        if keyword not in ALLOWED:
            raise ValueError(f"'{keyword or query.strip()[:20]}' statements are not allowed here (or not SQL): only "
                             "SELECT, SHOW, DESCRIBE, EXPLAIN and INSERT/UPDATE/DELETE/REPLACE on the task's table "
                             "(each statement commits itself)")
        with self._episode_connection() as conn:
            columns, rows, complete, changed = self._fetch(conn, query, keyword)
            if changed:
                self._check_size(conn)
            read = bool(columns) and keyword in _READS and self._reads_table(conn, query)
            conn.commit()
            return columns, rows, complete, changed, read, keyword in WRITES

    def _fetch(self, conn, query: str, keyword: str) -> tuple[list[str], list[tuple], bool, int]:
        """Execute and read the result row by row under SQLEnv's caps (rows kept for scoring, text budget)."""
        import pymysql

        limits = self._limits
        cap = max(limits.max_rows, limits.max_scored_rows)
        rows: list[tuple] = []
        complete, size, columns = True, 0, []
        cur = conn.cursor()
        try:
            cur.execute(query)
            columns = [d[0] for d in cur.description or []]
            try:
                for row in iter(cur.fetchone, None) if columns else ():
                    row = tuple(_text(v) for v in row)
                    size += sum(len(v) if isinstance(v, str) else 8 for v in row)
                    if len(rows) == cap or (size > limits.max_scored_chars and len(rows) >= limits.max_rows):
                        complete = False
                        self._server.kill_query(conn.thread_id())  # do not stream the rest through the socket
                        break
                    rows.append(row)
            except pymysql.err.OperationalError as exc:
                # a slow read that already produced the rows to show keeps them, as on SQLite
                if exc.args[0] not in _INTERRUPTED or len(rows) < limits.max_rows or keyword in WRITES:
                    raise
                complete = False
            changed = (len(rows) if columns else max(cur.rowcount, 0)) if keyword in WRITES else 0
        finally:
            with contextlib.suppress(Exception):
                cur.close()
        return columns, rows, complete, changed

    def _check_size(self, conn) -> None:
        """Refuse (the caller rolls back) a write that leaves the table over the row or text-size cap."""
        table = self._meta["table"]
        text = ",".join(f"COALESCE(LENGTH({backtick(c['name'])}),0)" for c in table["table_info"]["columns"])
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*), COALESCE(SUM({text.replace(',', '+')}),0) "
                        f"FROM {backtick(table['table_name'])}")
            n, chars = cur.fetchone()
        if n > MAX_TABLE_ROWS or int(chars) > MAX_TABLE_CHARS:
            raise ValueError(f"the table would hold {n:,} rows / {int(chars):,} characters, over the limit of "
                             f"{MAX_TABLE_ROWS:,} rows / {MAX_TABLE_CHARS:,} characters (statement rolled back)")

    def _reads_table(self, conn, query: str) -> bool:
        """Return True when the query reads the task's table: the server's own expansion of it (EXPLAIN EXTENDED,
        note 1003) names ``db.table`` outside string literals (a literal ``SELECT 'x'`` never earns exec credit)."""
        import pymysql

        target = f"{backtick(self._database)}.{backtick(self._meta['table']['table_name'])}"
        try:
            with conn.cursor() as cur:
                cur.execute("EXPLAIN EXTENDED " + query)
                cur.fetchall()
                cur.execute("SHOW WARNINGS")
                notes = [r[2] for r in cur.fetchall() if r[1] == 1003]
        except pymysql.MySQLError:
            return False
        return any(target in _STRING.sub("''", _text(note)) for note in notes)

    def _reconnect(self) -> None:
        """Replace a lost episode connection (the database and the committed table survive)."""
        with contextlib.suppress(Exception):
            self._conn.close()
        conn = self._connect(self._server, self._database, self._password)
        self._conn, self._stale = conn, False
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _drop, self._server, self._database, conn, self._variants)

    def _error_text(self, exc: Exception) -> str:
        """The model's view of a failed statement: the server's message, the time limit named."""
        import pymysql

        if isinstance(exc, pymysql.MySQLError) and len(exc.args) >= 2 and isinstance(exc.args[0], int):
            if exc.args[0] in _INTERRUPTED:
                return f"statement stopped after the {self._limits.time_limit:g} s time limit"
            return f"{exc.args[0]}: {exc.args[1]}"
        return super()._error_text(exc)

    # ------------------------------------------------------------------ scoring hooks

    def _scoring_rows(self, sql: str) -> list:
        """Rows of a trusted statement on the episode's database, on this episode's scoring connection (admin; an
        interrupt kills its query)."""
        self._check_cancel()
        if self._score_conn is None:
            conn = self._server._connect_admin()
            conn.select_db(self._database)
            with self._scratch_lock:
                self._scratch.add(conn)
            self._score_conn = conn
        try:
            with self._score_conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        except Exception:
            self._check_cancel()  # a killed query is an interrupt, not an error of the episode
            raise

    def _final_state(self) -> Counter | None:
        """The task table now, as a multiset of normalised rows (None without a database)."""
        if self._database is None:
            return None
        rows = self._scoring_rows(f"SELECT * FROM {backtick(self._meta['table']['table_name'])}")
        return Counter(tuple(normalize_value(_text(v)) for v in r) for r in rows)

    def _agentbench_hash(self) -> str | None:
        """AgentBench's table hash, by its own query on the episode's database (None for an empty table)."""
        rows = self._scoring_rows(agentbench_hash_sql(self._meta["table"]))
        return _text(rows[0][0]) if rows and rows[0][0] is not None else None

    def _run_gold(self, want_digest: bool) -> GoldResult:
        """The gold statement's effect on a scratch copy (as the gold user; cached per table and statement, its
        connection killed by an interrupt)."""
        gold = self._meta.get("sql")
        if not gold or self._server is None:
            return GoldResult(None, None, "the task has no gold statement")
        used: list = []

        def register(conn) -> None:
            used.append(conn)
            with self._scratch_lock:
                self._scratch.add(conn)

        try:
            return gold_result(self._server, self._meta["table"], gold, register, self._cancel.is_set)
        except Exception as exc:  # noqa: BLE001 - a lost connection twice: no verdict, reported as the reason
            self._check_cancel()
            return GoldResult(None, None, f"the server lost the gold statement's connection: {exc}")
        finally:
            with self._scratch_lock:
                self._scratch.difference_update(used)

    def _gold_query(self) -> str | None:
        """The task's gold statement (MySQL: this backend runs it as written)."""
        return self._meta.get("sql") or None

    def _rerun_table(self, query: str, variant: str) -> tuple[list[str], list[tuple], bool] | None:
        """Run a read of the episode's on a copy of the initial table (a database of its own, SELECT only for the
        episode's user), on the episode's connection; ``(columns, rows, complete)`` or None when it fails."""
        import pymysql

        keyword = first_keyword(query)
        if keyword not in _READS:
            return None  # a write is no read of the data
        self._check_cancel()
        database = self._variant(variant)
        try:
            with self._episode_connection() as conn:
                with conn.cursor() as cur:
                    cur.execute(f"USE {backtick(database)}")
                try:
                    columns, rows, complete, _ = self._fetch(conn, query, keyword)
                    conn.commit()
                finally:
                    with conn.cursor() as cur:
                        cur.execute(f"USE {backtick(self._database)}")
        except (pymysql.MySQLError, ValueError):
            self._check_cancel()
            return None
        return (list(columns), list(rows), complete) if columns else None

    def _variant(self, variant: str) -> str:
        """The database holding the ``variant`` copy of the initial table (agentrl.envs.sql.credit), created on
        first use and readable (only) by the episode's user; dropped with the episode."""
        if variant not in self._variants:
            database = f"{self._database}_{variant}"
            self._server._create(database, perturbed_tables(self._meta["table"])[variant])
            self._variants[variant] = database
            self._server.admin([f"GRANT SELECT ON {_grant_pattern(database)}.* TO '{self._database}'@'localhost'"])
        return self._variants[variant]


def _drop(server: MariaDBServer, database: str, conn, variants: dict | None = None) -> None:
    """Close an episode's connection and drop its user and databases (errors ignored: the server may be gone)."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()
    if server.proc is None or server.proc.poll() is not None:
        return
    with contextlib.suppress(Exception):
        server.admin([f"DROP USER IF EXISTS '{database}'@'localhost'", f"DROP DATABASE IF EXISTS {backtick(database)}",
                      *(f"DROP DATABASE IF EXISTS {backtick(d)}" for d in (variants or {}).values())])


_GOLD_CACHE: dict = {}
_GOLD_CACHE_SIZE = 512
_GOLD_LOCK = threading.Lock()


def gold_result(server: MariaDBServer, table: dict, gold: str, register=None, cancelled=None) -> GoldResult:
    """Return what the gold statement makes of the task table on ``server`` (MariaDBServer.gold), cached per table
    and statement: a failing statement's error is the task's, so it is cached too; a lost connection is retried
    once (unless ``cancelled()`` says the caller was interrupted) and never cached."""
    key = (id(server), json.dumps(table, sort_keys=True), gold)
    with _GOLD_LOCK:
        if key in _GOLD_CACHE:
            return _GOLD_CACHE[key]
    for attempt in (0, 1):
        try:
            result = server.gold(table, gold, register)
            break
        except Exception:
            if attempt or (cancelled is not None and cancelled()):
                raise
    with _GOLD_LOCK:
        if len(_GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            _GOLD_CACHE.pop(next(iter(_GOLD_CACHE)))
        _GOLD_CACHE[key] = result
    return result


def oracle_plan(row: dict) -> list:
    """The oracle's turns on MariaDB: run the gold statement as written (MySQL; for a SELECT whose gold does not
    run, look at the table instead), then answer with the label values (SELECT) or "done"."""
    meta = row.get("metadata") or {}
    table = meta["table"]
    query = meta.get("sql")
    if meta.get("kind") == "select" and query and gold_result(shared_server(), table, query).error is not None:
        query = None
    return oracle_turns(meta, query or f"SELECT * FROM {backtick(table['table_name'])} LIMIT 5")
