"""A private MariaDB server for the SQL environment (agentrl.envs.sql.mariadb): one ``mariadbd`` per process.

``shared_server()`` starts it on first use, on a private unix socket (no TCP), with its data directory in a private
temporary directory (tmpfs when there is one); it is stopped at exit, and the kernel stops it when this process
dies (PR_SET_PDEATHSIG). Directories left by a crashed process are removed by the next start. The admin account's
password lives in this process only.

Sample::

    server = shared_server()                     # ~2-5 s the first time
    server.admin(["CREATE DATABASE demo"])       # statements run as the admin account
    server.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
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

from agentrl.core.io import DataError
from agentrl.envs.sql.dbbench import normalize_value
from agentrl.envs.sql.env import GoldResult

INSTALL_HINT = "apt-get install mariadb-server (Debian/Ubuntu) puts them on PATH"
# MySQL 8's defaults, which AgentBench's docker mysql:8 runs with (MariaDB's own default omits ONLY_FULL_GROUP_BY)
MYSQL8_SQL_MODE = ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
                   "NO_ENGINE_SUBSTITUTION")
_LOST = {0, 2006, 2013}  # the connection is gone



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
