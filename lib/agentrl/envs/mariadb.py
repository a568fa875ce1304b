"""MariaDB backend of the SQL environment: DB Bench tasks on a real MySQL-compatible server, as AgentBench runs them.

One ``mariadbd`` per process (``shared_server()``), started lazily by the first episode that needs it, on a
private unix socket (no TCP) with its data directory in a private temporary directory (tmpfs when there is one),
stopped at exit. Each episode gets:

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

Scoring is SQLEnv's (agentrl.envs.sql), with the table hash computed natively by AgentBench's own query (on an
admin connection of the episode's own), the expected final table and hash made by the gold statement on a scratch
copy run as a separate restricted user (cached per task), and exec credit's re-runs of the model's reads on
perturbed copies of the table (agentrl.envs.sql_credit), each a database only the episode's user may SELECT from.
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

import atexit
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections import Counter
from pathlib import Path

from agentrl.envs.sql import GoldResult, SQLEnv, SQLLimits, normalize_value
from agentrl.io import DataError

INSTALL_HINT = "apt-get install mariadb-server (Debian/Ubuntu) puts them on PATH"
# MySQL 8's defaults, which AgentBench's docker mysql:8 runs with (MariaDB's own default omits ONLY_FULL_GROUP_BY)
MYSQL8_SQL_MODE = ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
                   "NO_ENGINE_SUBSTITUTION")
ALLOWED = {"SELECT", "WITH", "VALUES", "TABLE", "(", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "INSERT", "UPDATE",
           "DELETE", "REPLACE"}
WRITES = {"INSERT", "UPDATE", "DELETE", "REPLACE"}
_READS = {"SELECT", "WITH", "VALUES", "TABLE", "("}
_INTERRUPTED = {1317, 1969, 3024}  # query interrupted (KILL QUERY), max_statement_time exceeded (MariaDB, MySQL)
_LOST = {0, 2006, 2013}  # the connection is gone
WATCHDOG_GRACE = 1.0  # seconds past the time limit before the watchdog kills a statement the server did not stop
MAX_TABLE_ROWS = 100_000
MAX_TABLE_CHARS = 16_000_000  # the SQLite backend's 16 MB page cap, as text size


def binaries() -> tuple[str, str]:
    """Return the paths of ``mariadbd`` and ``mariadb-install-db``; raise DataError naming the package if absent."""
    found = []
    for names in (("mariadbd", "mysqld"), ("mariadb-install-db", "mysql_install_db")):
        # /usr/sbin is not on every user's PATH
        path = next(filter(None, (shutil.which(n) or shutil.which(n, path="/usr/sbin:/usr/bin") for n in names)),
                    None)
        if path is None:
            raise DataError(f"MariaDB not found ({names[0]} is not installed): {INSTALL_HINT}")
        found.append(path)
    return found[0], found[1]


def available() -> bool:
    """Return True when the MariaDB server binaries are installed."""
    try:
        binaries()
    except DataError:
        return False
    return True


def backtick(identifier: str) -> str:
    """Return ``identifier`` quoted for MySQL (backticks, inner backticks doubled)."""
    return "`" + str(identifier).replace("`", "``") + "`"


def _grant_pattern(database: str) -> str:
    """The database name as a GRANT pattern: ``_`` and ``%`` are wildcards there, so they are escaped."""
    return backtick(database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%"))


class MariaDBServer:
    """A private ``mariadbd``: unix socket only, data in a temporary directory, an admin account whose password
    lives in this process only. ``start()`` is idempotent; ``stop()`` ends the server and removes its files."""

    def __init__(self, time_limit: float = 1.0, startup_timeout: float = 60.0):
        self.time_limit, self.startup_timeout = time_limit, startup_timeout
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self._password = secrets.token_hex(16)
        self._gold_password = secrets.token_hex(16)
        self._lock = threading.RLock()
        self._admin = None

    @property
    def socket(self) -> str:
        """Return the path of the server's unix socket."""
        assert self.dir is not None, "server not started"
        return str(self.dir / "mysqld.sock")

    def start(self) -> MariaDBServer:
        """Initialise a data directory, start the server and wait until the admin account can connect; return
        self. Raises DataError when the binaries are missing or the server does not come up (with its log)."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return self
            mariadbd, install_db = binaries()
            _remove_stale_dirs()
            base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # tmpfs: as AgentBench's docker tmpfs
            self.dir = Path(tempfile.mkdtemp(prefix=f"agentrl-mariadb-{os.getpid()}-", dir=base))
            os.chmod(self.dir, 0o700)  # the socket inside is reachable by this user only
            for sub in ("data", "tmp", "files"):
                (self.dir / sub).mkdir()
            user = ["--user=root"] if os.geteuid() == 0 else []  # mariadbd refuses to run as root otherwise
            log = self.dir / "error.log"
            init = subprocess.run([install_db, "--no-defaults", f"--datadir={self.dir / 'data'}", *user,
                                   "--skip-test-db", "--auth-root-authentication-method=socket",
                                   "--skip-name-resolve", "--innodb-log-file-size=8M"],
                                  capture_output=True, text=True, timeout=self.startup_timeout)
            if init.returncode != 0:
                raise DataError(f"mariadb-install-db failed ({init.returncode}): {init.stderr[-2000:]}")
            init_file = self.dir / "init.sql"
            init_file.write_text(
                f"CREATE USER 'agentrl_admin'@'localhost' IDENTIFIED BY '{self._password}';\n"
                "GRANT ALL PRIVILEGES ON *.* TO 'agentrl_admin'@'localhost' WITH GRANT OPTION;\n"
                f"CREATE USER 'agentrl_gold'@'localhost' IDENTIFIED BY '{self._gold_password}' "
                f"WITH MAX_STATEMENT_TIME {max(self.time_limit, 5.0):g};\n"
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `gold\\_%`.* TO 'agentrl_gold'@'localhost';\n")
            os.chmod(init_file, 0o600)
            args = [mariadbd, "--no-defaults", f"--datadir={self.dir / 'data'}", f"--socket={self.socket}",
                    f"--pid-file={self.dir / 'mysqld.pid'}", f"--log-error={log}", f"--tmpdir={self.dir / 'tmp'}",
                    *user, "--skip-networking", "--skip-name-resolve", f"--init-file={init_file}",
                    f"--secure-file-priv={self.dir / 'files'}", "--local-infile=0", "--skip-log-bin",
                    "--performance-schema=OFF", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=8M",
                    "--innodb-flush-log-at-trx-commit=0", "--max-connections=1000",
                    "--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_520_nopad_ci",
                    f"--sql-mode={MYSQL8_SQL_MODE}", "--group-concat-max-len=1024",  # MySQL 8's default
                    "--max-recursive-iterations=1000",  # MySQL 8's cte_max_recursion_depth
                    "--max-allowed-packet=4M", "--max-session-mem-used=512M", "--tmp-memory-table-size=16M",
                    "--max-heap-table-size=16M", "--query-cache-type=0", "--skip-symbolic-links"]
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent(),
                                         start_new_session=True)
            deadline = time.monotonic() + self.startup_timeout
            while True:
                if self.proc.poll() is not None:
                    text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    self._cleanup()
                    raise DataError(f"mariadbd exited at start-up:\n{text}")
                try:
                    self._admin = self._connect_admin()
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    if time.monotonic() > deadline:
                        self.stop()
                        raise DataError(f"mariadbd did not accept connections within {self.startup_timeout:g} s") \
                            from None
                    time.sleep(0.05)
            init_file.unlink()
            weakref.finalize(self, _stop_process, self.proc, str(self.dir))
        return self

    def _connect_admin(self):
        import pymysql

        # ssl_disabled: a unix socket needs no TLS, and pymysql's "preferred" TLS builds a context per connection
        # (loading the system CA store: ~35 ms, most of an episode's cost)
        return pymysql.connect(unix_socket=self.socket, user="agentrl_admin", password=self._password,
                               charset="utf8mb4", autocommit=True, connect_timeout=5, ssl_disabled=True)

    def connect(self, user: str, password: str, database: str | None = None, *, streaming: bool = False):
        """Return a new pymysql connection of ``user`` (autocommit off, local infile off); ``streaming`` makes
        its cursors unbuffered (rows read one by one)."""
        import pymysql
        import pymysql.cursors

        return pymysql.connect(unix_socket=self.socket, user=user, password=password, database=database,
                               charset="utf8mb4", autocommit=False, local_infile=False, connect_timeout=5,
                               ssl_disabled=True,
                               cursorclass=pymysql.cursors.SSCursor if streaming else pymysql.cursors.Cursor)

    def admin(self, statements: list, database: str | None = None) -> list:
        """Run trusted statements (text or ``(text, params)``) as the admin, in ``database`` if given; return the
        rows of the last one."""
        with self._lock:
            self.start()
            for attempt in (0, 1):
                try:
                    if self._admin is None:
                        self._admin = self._connect_admin()
                    rows: list = []
                    with self._admin.cursor() as cur:
                        if database:
                            cur.execute(f"USE {backtick(database)}")
                        for item in statements:
                            sql, params = (item, None) if isinstance(item, str) else item
                            cur.execute(sql, params)
                            rows = list(cur.fetchall())
                    return rows
                except Exception as exc:
                    import pymysql

                    if attempt or not isinstance(exc, pymysql.err.InterfaceError | pymysql.err.OperationalError) \
                            or exc.args[0] not in (0, 2006, 2013):
                        raise
                    self._admin = None  # a dropped connection: reconnect once
            return []

    def gold(self, table: dict, statement: str, register=None) -> GoldResult:
        """Run ``statement`` on a scratch copy of the task table as the restricted gold user, on a connection of its
        own (handed to ``register`` first, so that an interrupt can kill its query); return the table after it
        (normalised rows) and AgentBench's hash of it, or the server's error when the statement fails. Raises the
        pymysql error when the connection is lost or the query killed: that is no verdict on the statement."""
        import pymysql

        database = "gold_" + secrets.token_hex(6)
        self._create(database, table)
        conn = None
        try:
            conn = self.connect("agentrl_gold", self._gold_password, database)
            if register is not None:
                register(conn)
            with conn.cursor() as cur:
                try:
                    cur.execute(statement)
                except pymysql.MySQLError as exc:
                    if isinstance(exc, pymysql.err.InterfaceError) or exc.args[0] in _LOST | {1317}:
                        raise
                    return GoldResult(None, None, f"{exc.args[0]}: {exc.args[-1]}")
                cur.execute(f"SELECT * FROM {backtick(table['table_name'])}")
                rows = cur.fetchall()
                cur.execute(agentbench_hash_sql(table))
                digest = cur.fetchone()[0]
            conn.commit()
            return GoldResult(Counter(tuple(normalize_value(_text(v)) for v in r) for r in rows),
                              None if digest is None else _text(digest), None)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            self.admin([f"DROP DATABASE IF EXISTS {backtick(database)}"])

    def _create(self, database: str, table: dict) -> None:
        """Create ``database`` holding the task table, filled as AgentBench fills it."""
        import pymysql

        self.admin([f"CREATE DATABASE {backtick(database)}"])
        try:
            self.admin(create_table_sql(table), database=database)
        except Exception as exc:
            self.admin([f"DROP DATABASE IF EXISTS {backtick(database)}"])
            if isinstance(exc, pymysql.err.ProgrammingError | pymysql.err.DataError | pymysql.err.OperationalError):
                # as in AgentBench, whose MySQL rejects the same table (db_5: a column without a name)
                raise DataError(f"MySQL cannot create the task's table {table.get('table_name')!r}: "
                                f"{exc.args[0]}: {exc.args[-1]}") from None
            raise

    def kill_query(self, thread_id: int) -> None:
        """Stop the statement running on connection ``thread_id`` (a fresh admin connection: the shared one may be
        busy); errors are ignored (the statement may have ended)."""
        with contextlib.suppress(Exception):
            conn = self._connect_admin()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"KILL QUERY {int(thread_id)}")
            finally:
                conn.close()

    def rss_bytes(self) -> int:
        """Return the server process's resident memory in bytes (0 when it is not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def peak_rss_bytes(self) -> int:
        """Return the server process's peak resident memory in bytes (VmHWM; 0 when it is not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def databases(self) -> list[str]:
        """Return the names of the episode and scratch databases that exist now."""
        return [r[0] for r in self.admin(["SHOW DATABASES"]) if r[0].startswith(("ep_", "gold_"))]

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its directory."""
        with self._lock:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None
            if self.proc is not None:
                _stop_process(self.proc, None)
            self._cleanup()

    def _cleanup(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir, self.proc = None, None


def _die_with_parent():
    """A preexec function that has the kernel stop the server when this process dies (SIGKILL included), or None
    off the main thread: PR_SET_PDEATHSIG fires when the starting *thread* exits, and a pool thread may."""
    if threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def set_death_signal() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return set_death_signal


def _stop_process(proc: subprocess.Popen, directory: str | None) -> None:
    """Terminate ``proc`` (SIGKILL after 10 s) and remove ``directory``; the finaliser and atexit hook."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def _remove_stale_dirs() -> None:
    """Remove the directories of servers whose process is gone (a crash or SIGKILL skips the clean-up)."""
    for base in {"/dev/shm", tempfile.gettempdir()}:
        for path in Path(base).glob("agentrl-mariadb-*-*") if os.path.isdir(base) else ():
            try:
                pid = int(path.name.split("-")[2])
                os.kill(pid, 0)
            except ProcessLookupError:
                shutil.rmtree(path, ignore_errors=True)
            except (ValueError, IndexError, PermissionError):
                continue


_SHARED: MariaDBServer | None = None
_SHARED_PID = 0
_SHARED_LOCK = threading.Lock()


def shared_server() -> MariaDBServer:
    """Return this process's server, started on first use and stopped at exit (a forked child starts its own)."""
    global _SHARED, _SHARED_PID
    with _SHARED_LOCK:
        if _SHARED is None or os.getpid() != _SHARED_PID or _SHARED.proc is None or _SHARED.proc.poll() is not None:
            _SHARED, _SHARED_PID = MariaDBServer().start(), os.getpid()
            atexit.register(_SHARED.stop)
        return _SHARED


def _text(value):
    """A result value as the model and the scorer see it: bytes decoded as UTF-8 (bad bytes replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else value


def create_table_sql(table: dict) -> list[str]:
    """Return the statements that create and fill the task table as AgentBench's ``_build_init_sql`` does: every
    column TEXT, every value ``str(value)`` (values escaped here instead of bound, in batches of 500 rows)."""
    from pymysql.converters import escape_string

    columns = (table.get("table_info") or {}).get("columns") or []
    if not table.get("table_name") or not columns:
        raise DataError("SQL task table needs 'table_name' and 'table_info.columns'")
    name = backtick(table["table_name"])
    defs = ",".join(f"{backtick(c['name'])} TEXT" for c in columns)
    out = [f"CREATE TABLE IF NOT EXISTS {name} ({defs})"]
    names = ",".join(backtick(c["name"]) for c in columns)
    rows = table["table_info"].get("rows") or []
    for i in range(0, len(rows), 500):
        values = ",".join("(" + ",".join(f"'{escape_string(str(v))}'" for v in row) + ")" for row in rows[i:i + 500])
        out.append(f"INSERT INTO {name} ({names}) VALUES {values}")
    return out


def agentbench_hash_sql(table: dict) -> str:
    """Return AgentBench's table-hash query (``DBResultProcessor._get_table_hash_async``) for the task table."""
    columns = ",".join(backtick(c["name"]) for c in table["table_info"]["columns"])
    return (f"select md5(group_concat(rowhash order by rowhash)) as hash "
            f"from( SELECT substring(MD5(CONCAT_WS(',', {columns})), 1, 5) AS rowhash "
            f"FROM {backtick(table['table_name'])}) as sub;")


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

    def _rerun(self, query: str, variant: str) -> tuple[list, bool] | None:
        """Run a read of the episode's on a copy of the initial table (a database of its own, SELECT only for the
        episode's user), on the episode's connection; ``(values, complete)`` or None when it fails."""
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
        return ([v for r in rows for v in r], complete) if columns else None

    def _variant(self, variant: str) -> str:
        """The database holding the ``variant`` copy of the initial table (agentrl.envs.sql_credit), created on
        first use and readable (only) by the episode's user; dropped with the episode."""
        from agentrl.envs.sql_credit import perturbed_tables

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
    from agentrl.envs.sql import oracle_turns

    meta = row.get("metadata") or {}
    table = meta["table"]
    query = meta.get("sql")
    if meta.get("kind") == "select" and query and gold_result(shared_server(), table, query).error is not None:
        query = None
    return oracle_turns(meta, query or f"SELECT * FROM {backtick(table['table_name'])} LIMIT 5")
