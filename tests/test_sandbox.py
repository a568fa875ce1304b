"""The code sandbox against hostile programs: each one contained, the host unchanged, the env still serving.

Each program runs through the code environment's ``run_python`` tool (as a model would call it), with short
limits so the suite stays quick. On root machines with ``unshare`` the namespaced mode is exercised (its own
root with /usr and the stdlib only, network, PID and mount namespaces, a per-run uid, no_new_privs); elsewhere
the rlimits mode, where the programs it does not contain are skipped with the reason. The rlimits mode's own
guarantees are tested here in both cases (forced by replacing ``isolation``).
"""

import asyncio
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from agentrl.envs.base import call_tool
from agentrl.envs.code.env import CodeEnv, code_score, humaneval_tasks
from agentrl.envs.code.sandbox import MAX_SLOTS, RUN_UID_BASE, SandboxLimits, isolation, run_python, slot_count

LIMITS = SandboxLimits(timeout=4, cpu_seconds=2, memory_mb=256, file_mb=8, tmpfs_mb=32, processes=8)
NAMESPACES = isolation() == "namespaces"
HOST_MARK = Path(__file__).resolve().parent / "sandbox_was_here"
RUN_UIDS = range(RUN_UID_BASE, RUN_UID_BASE + MAX_SLOTS)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])  # the field after the state; comm may hold spaces


def _another_workers(pid: int) -> bool:
    """Whether ``pid`` descends from another xdist worker of this run (the workers are the children of one pytest
    process): its sandbox runs are that worker's, not a leak of this one's. An orphan (reparented to init) is not."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return False
    me, runner = os.getpid(), os.getppid()
    try:
        while pid > 1 and pid != me:
            parent = _parent(pid)
            if parent == runner:
                return True
            pid = parent
    except FileNotFoundError:  # gone meanwhile
        pass
    return False


def sandbox_processes() -> set[int]:
    """Processes running as one of the sandbox's per-run uids (namespaces mode: every sandboxed process), but for
    those of another xdist worker's runs."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid in RUN_UIDS and not _another_workers(int(entry)):
                    pids.add(int(entry))
            except FileNotFoundError:
                pass
    return pids


@pytest.fixture(scope="module")
def env():
    return CodeEnv(limits=LIMITS, max_calls=None)


def run(env, code: str) -> str:
    content, err = asyncio.run(call_tool(env, "run_python", {"code": code}))
    assert err is None, content  # no exception escapes the tool
    return content


def serve(srv: socket.socket, hits: list) -> None:
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        hits.append(1)
        conn.close()


@pytest.fixture(scope="module")
def listener():
    """A TCP server on the host's loopback that no sandboxed program may reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    hits = []
    threading.Thread(target=serve, args=(srv, hits), daemon=True).start()
    yield srv.getsockname()[1], hits
    srv.close()


@pytest.fixture(scope="module")
def unix_sockets():
    """Unix sockets of the host that a program running as any user could connect to (mode 0777): one in /run,
    where the host's database and D-Bus sockets live, and one in the abstract namespace."""
    path = f"/run/agentrl-test-{os.getpid()}.sock"
    hits = []
    servers = []
    for address in (path, f"\0agentrl-test-{os.getpid()}"):
        srv = socket.socket(socket.AF_UNIX)
        try:
            srv.bind(address)
        except PermissionError:
            srv.close()
            continue
        srv.listen()
        if not address.startswith("\0"):
            os.chmod(address, 0o777)
        threading.Thread(target=serve, args=(srv, hits), daemon=True).start()
        servers.append(srv)
    yield path, f"agentrl-test-{os.getpid()}", hits
    for srv in servers:
        srv.close()
    Path(path).unlink(missing_ok=True)


HOSTILE = {
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "infinite_loop": "while True:\n    pass",
    "memory_bomb": "x = bytearray(4 * 1024 ** 3)\nprint('allocated')",
    "memory_growth": "chunks = []\nwhile True:\n    chunks.append(' ' * 10 ** 7)",
    "one_gb_write": "with open('big', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * 1024 ** 2)\n"
                    "print('wrote 1 GB')",
    "write_into_the_repo": f"open({str(HOST_MARK)!r}, 'w').write('pwned')\nprint('wrote')",
    "write_to_host_tmp": "open('/tmp/agentrl_sandbox_was_here', 'w').write('pwned')\nprint('wrote')",
    "write_to_home": "import os\nopen(os.path.expanduser('~/../../root/pwned'), 'w').write('x')\nprint('wrote')",
    "read_ssh_keys": "import os, glob\nprint('KEYS', glob.glob('/root/.ssh/*') + glob.glob('/home/*/.ssh/*'))",
    "read_env_secrets": "import os\nprint('ENV', dict(os.environ))",
    "read_host_environ_via_proc": "import os\nprint('PIDS', len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
                                  "print('PROC', open('/proc/1/environ').read())",
    "open_internet_socket": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\nprint('connected')",
    "kill_the_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill({pid}, signal.SIGKILL)\n"
                       "print('killed')",
    "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('survived')",
    "recursion_limit_bomb": "import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1)\nf(0)",
    "subprocess_escape": "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\n"
                         "print('spawned')",
    "double_fork_daemon": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                          "        while True:\n            time.sleep(1)\n    os._exit(0)\nprint('daemonised')",
    "output_flood": "while True:\n    print('x' * 10000)",
    "file_descriptor_exhaustion": "fs = [open('/dev/null') for _ in range(100000)]",
    "ctypes_segfault": "import ctypes\nctypes.string_at(0)",
    "become_root": "import os\nos.setuid(0)\nprint('root')",
    "fill_the_disk": "for i in range(100):\n    open(f'/tmp/fill{i}', 'wb').write(b'x' * 7 * 1024 ** 2)\n"
                     "print('filled')",
    "ignore_signals_and_spin": "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
                               "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
    "thread_bomb": "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()",
    "setuid_binaries_do_not_elevate": "import subprocess\n"
                                      "st = subprocess.run(['cat', '/proc/self/status'], capture_output=True, "
                                      "text=True).stdout\nprint(*[x for x in st.splitlines() if 'NoNewPrivs' in x])\n"
                                      "print(*[x.split()[4] + ' ' + x.split()[5] for x in open('/proc/self/mountinfo') "
                                      "if x.split()[4] in ('/usr', '/tmp')])\n"
                                      "r = subprocess.run(['su', '-c', 'id'], capture_output=True, text=True)\n"
                                      "print('SU', r.returncode, r.stdout)",
    "list_host_directories": "import os\nprint('ROOT', sorted(os.listdir('/')))\n"
                             "print('GONE', [d for d in ('/run', '/var', '/home', '/work', '/mnt', '/opt', '/srv', "
                             "'/sys', '/media', '/etc/passwd') if not os.path.exists(d)])",
    "forked_children_fill_memory": "import os\nr, w = os.pipe()\nforks = refused = 0\nfor _ in range(40):\n"
                                   "    try:\n        pid = os.fork()\n    except OSError:\n"
                                   "        refused = 1\n        break\n    if pid == 0:\n        os.close(w)\n"
                                   "        try:\n            x = bytearray(64 * 1024 ** 2)\n"
                                   "            y = bytearray(300 * 1024 ** 2)\n            code = 0\n"
                                   "        except MemoryError:\n            code = 3\n        os.read(r, 1)\n"
                                   "        os._exit(code)\n    forks += 1\nos.close(w)\ncodes = []\n"
                                   "for _ in range(forks):\n    codes.append(os.waitstatus_to_exitcode(os.wait()[1]))\n"
                                   "print('FORKS', forks, 'REFUSED', refused, 'MEMORYERRORS', codes.count(3))",
    "mount_attempt": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\nprint('mount', r, ctypes.get_errno())\n"
                     "import os\nprint(os.listdir('/work'))",
}


# what the rlimits mode does not contain (see agentrl.envs.code.sandbox): these programs are skipped there, not run
NOT_CONTAINED_WITHOUT_NAMESPACES = {
    "write_into_the_repo": "writes wherever the calling user can write",
    "write_to_home": "writes wherever the calling user can write",
    "write_to_host_tmp": "writes wherever the calling user can write",
    "read_ssh_keys": "reads whatever the calling user can read",
    "read_host_environ_via_proc": "sees /proc of the host",
    "kill_the_parent": "signals every process of the calling user, the host's included",
    "kill_everything": "signals every process of the calling user",
    "fork_bomb": "shares RLIMIT_NPROC with the calling user's own processes",
    "thread_bomb": "shares RLIMIT_NPROC with the calling user's own processes",
    "forked_children_fill_memory": "shares RLIMIT_NPROC with the calling user's own processes",
    "fill_the_disk": "has no private /tmp",
    "mount_attempt": "runs as the calling user (root may mount)",
    "setuid_binaries_do_not_elevate": "does not set no_new_privs nor hide setuid binaries",
    "list_host_directories": "shows the host's file system",
    "become_root": "runs as the calling user (who may be root)",
}


def contained(name: str, out: str, port_hits: list) -> None:
    """The check for each hostile program: what it tried did not happen."""
    if name in ("fork_bomb", "infinite_loop", "ignore_signals_and_spin", "thread_bomb", "output_flood"):
        assert out.startswith(("timed out", "exit status")), out
    if name in ("memory_bomb", "memory_growth"):
        assert "allocated" not in out and "MemoryError" in out
    if name == "one_gb_write":
        assert "wrote 1 GB" not in out and ("File too large" in out or "No space" in out)
    if name == "write_into_the_repo":
        assert "wrote" not in out and not HOST_MARK.exists()
    if name == "write_to_home":
        assert "wrote" not in out and not Path("/root/pwned").exists()
    if name == "write_to_host_tmp":
        assert not Path("/tmp/agentrl_sandbox_was_here").exists()  # written (if at all) to a throwaway tmpfs
    if name == "read_ssh_keys":
        assert "KEYS []" in out
    if name == "read_env_secrets":
        assert "AGENTRL_TEST_SECRET" not in out and "s3cret-value" not in out
    if name == "read_host_environ_via_proc":
        assert "s3cret-value" not in out
        visible = int(out.split("PIDS ")[1].split()[0])
        assert visible <= 2, out  # the run's own processes only: the host's hundreds are not there
    if name == "open_internet_socket":
        assert "connected" not in out
    if name == "kill_the_parent":
        assert "killed" not in out and "ProcessLookupError" in out  # the host's pid does not exist in the namespace
    if name == "kill_everything":
        assert "ProcessLookupError" in out  # no process it may signal: its namespace holds itself only
    if name == "recursion_limit_bomb":
        assert not out.startswith("exit status 0")
    if name == "output_flood":
        assert len(out) < 2 * LIMITS.max_output + 200
    if name == "file_descriptor_exhaustion":
        assert "Too many open files" in out
    if name == "ctypes_segfault":
        assert out.startswith("exit status -11"), out
    if name == "become_root":
        assert "Operation not permitted" in out and "\nroot" not in out
    if name == "fill_the_disk":
        assert "filled" not in out and "No space left" in out
    if name == "mount_attempt":
        assert "mount -1 1" in out  # EPERM
    if name == "setuid_binaries_do_not_elevate":
        assert "NoNewPrivs:\t1" in out and "/usr ro,nosuid,nodev" in out and "uid=0" not in out, out
    if name == "list_host_directories":
        gone = out.split("GONE ")[1]
        for d in ("/run", "/var", "/home", "/work", "/mnt", "/opt", "/srv", "/sys", "/media", "/etc/passwd"):
            assert f"'{d}'" in gone or not Path(d).exists(), (d, out)
    if name == "forked_children_fill_memory":
        forks, refused, errors = (int(v) for v in out.split("FORKS ")[1].split()[0:5:2])
        # at most `processes` processes, each held to memory_mb: the run never holds more than their product
        assert refused == 1 and forks <= LIMITS.processes - 1 and errors == forks, out
    assert not port_hits


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_program_is_contained_and_the_host_is_unchanged(name, env, listener, monkeypatch):
    if not NAMESPACES and name in NOT_CONTAINED_WITHOUT_NAMESPACES:
        pytest.skip(f"rlimits mode (no namespaces here): the code {NOT_CONTAINED_WITHOUT_NAMESPACES[name]}")
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cret-value")
    port, hits = listener
    existed = Path("/root/pwned").exists()
    code = HOSTILE[name].replace("{pid}", str(os.getpid()))
    if name == "open_internet_socket":  # also the host's own loopback server
        code += f"\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    out = run(env, code)
    if name == "write_to_home":
        assert not existed, "/root/pwned existed before the test: remove it"
    contained(name, out, hits)
    # nothing left running: every process of a namespaced run has a per-run uid and the PID namespace died
    assert not sandbox_processes()


def test_a_host_loopback_server_is_unreachable_from_the_sandbox(listener):
    port, hits = listener
    if not NAMESPACES:
        pytest.skip("rlimits mode blocks sockets inside the interpreter only: `_socket` reaches the host")
    r = run_python(f"import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n"
                   "print('connected')", LIMITS)
    assert "connected" not in r.stdout and not hits


def test_host_unix_sockets_in_run_and_in_the_abstract_namespace_are_unreachable(unix_sockets):
    path, abstract, hits = unix_sockets
    if not NAMESPACES:
        pytest.skip("rlimits mode: the code reaches every unix socket the calling user can")
    if not Path(path).exists():
        pytest.skip(f"cannot create a socket in /run as uid {os.getuid()}")
    # the host itself can connect: the sockets are live, so a refusal below is the sandbox's doing
    for address in (path, "\0" + abstract):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(address)
    while len(hits) < 2:
        time.sleep(0.01)
    hits.clear()
    addresses = (path, "\0" + abstract)
    r = run_python(f"import _socket\nfor a in {addresses!r}:\n    s = _socket.socket(_socket.AF_UNIX)\n    try:\n"
                   "        s.connect(a)\n        print('connected', repr(a))\n    except OSError as e:\n"
                   "        print('refused', type(e).__name__)\n", LIMITS)
    assert r.ok, r.stderr
    assert "connected" not in r.stdout and r.stdout.count("refused") == 2, r.stdout
    assert not hits


def test_a_fork_bomb_does_not_starve_a_concurrent_run():
    if not NAMESPACES:
        pytest.skip("rlimits mode: RLIMIT_NPROC is shared by every run of the calling user")
    if slot_count() < 2:
        pytest.skip("this host has memory for one sandbox run at a time")
    kills = []
    bomb = threading.Thread(target=run_python, args=("import os\nwhile True:\n    try:\n        os.fork()\n"
                                                     "    except OSError:\n        pass",
                                                     SandboxLimits(timeout=120, cpu_seconds=60, processes=8,
                                                                   memory_mb=128, tmpfs_mb=8)),
                            kwargs={"started": kills.append}, daemon=True)
    bomb.start()
    while len(sandbox_processes()) < 8:  # the bomb holds every process its uid may have
        assert bomb.is_alive()
        time.sleep(0.01)
    r = run_python("import subprocess\nprint(subprocess.run(['echo', 'forked'], capture_output=True, "
                   "text=True).stdout)", LIMITS)
    still_bombing = bomb.is_alive()
    kills[0]()
    bomb.join(30)
    assert still_bombing and r.ok and "forked" in r.stdout, r
    assert not sandbox_processes()


def test_the_env_still_serves_and_scores_after_the_hostile_runs(env):
    assert run(env, "print(6 * 7)") == "exit status 0\nstdout:\n42"
    row = humaneval_tasks()[0]
    env.reset(**row)
    good = row["metadata"]["prompt"] + row["metadata"]["canonical_solution"]
    assert code_score(good, row, env)["passed"] == 1.0
    assert code_score(good.replace("return True", "return False"), row, env)["passed"] == 0.0
    assert code_score(None, row, env)["passed"] == 0.0


def test_a_body_only_answer_is_completed_with_the_prompt():
    row = humaneval_tasks()[2]
    env = CodeEnv()
    env.reset(**row)
    assert code_score(row["metadata"]["canonical_solution"].strip(), row, env)["passed"] == 1.0


def test_temporary_directories_are_removed_after_each_run():
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("agentrl-sbx-*"))
    run_python("open('scratch.txt', 'w').write('x')\nprint('ok')", LIMITS)
    assert set(Path(tempfile.gettempdir()).glob("agentrl-sbx-*")) <= before


def test_the_rlimits_fallback_still_bounds_time_memory_output_and_blocks_sockets(monkeypatch):
    import agentrl.envs.code.sandbox as sb

    monkeypatch.setattr(sb, "isolation", lambda: "rlimits")
    monkeypatch.setenv("AGENTRL_SANDBOX", "rlimits")  # the weaker mode, asked for
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cret-value")
    spin = run_python(HOSTILE["infinite_loop"], LIMITS)
    assert spin.isolation == "rlimits" and not spin.ok and (spin.timed_out or spin.returncode == -9)
    assert "MemoryError" in run_python(HOSTILE["memory_bomb"], LIMITS).stderr
    assert "network access is disabled" in run_python(HOSTILE["open_internet_socket"], LIMITS).stderr
    assert "s3cret-value" not in run_python(HOSTILE["read_env_secrets"], LIMITS).stdout
    assert "File too large" in run_python(HOSTILE["one_gb_write"], LIMITS).stderr
    assert run_python(HOSTILE["ctypes_segfault"], LIMITS).returncode == -11


def test_the_rlimits_fallback_kills_a_parent_that_is_not_the_host_and_a_setsid_daemon_dies(monkeypatch):
    import agentrl.envs.code.sandbox as sb

    monkeypatch.setattr(sb, "isolation", lambda: "rlimits")
    monkeypatch.setenv("AGENTRL_SANDBOX", "rlimits")  # the weaker mode, asked for
    r = run_python("import os, signal\nprint(os.getppid(), flush=True)\nos.kill(os.getppid(), signal.SIGKILL)\n"
                   "import time\ntime.sleep(30)", LIMITS)
    assert int(r.stdout) != os.getpid() and r.returncode == -9 and not r.timed_out  # the wrapper died, not us
    daemon = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        os.write(w, str(os.getpid()).encode())\n        while True:\n            time.sleep(1)\n"
              "    os._exit(0)\nos.close(w)\nprint(os.read(r, 20).decode())")
    r = run_python(daemon, LIMITS)
    pid = int(r.stdout)
    assert r.ok and not Path(f"/proc/{pid}").exists(), f"the double-forked daemon {pid} outlived the run"


def test_the_weaker_mode_is_refused_unless_asked_for_and_then_says_what_it_does_not_contain(monkeypatch, caplog):
    import agentrl.envs.code.sandbox as sb
    from agentrl.core.io import DataError
    from agentrl.envs.code import code_task

    monkeypatch.setattr(sb, "isolation", lambda: "rlimits")
    monkeypatch.delenv("AGENTRL_SANDBOX", raising=False)
    with pytest.raises(sb.SandboxUnavailable, match="does NOT contain reads of .*~/.ssh.*AGENTRL_SANDBOX=rlimits"):
        run_python("print(1)", LIMITS)
    with pytest.raises(DataError, match="AGENTRL_SANDBOX=rlimits"):  # refused before the first item
        code_task()
    monkeypatch.setenv("AGENTRL_SANDBOX", "rlimits")
    sb._warn_weak.cache_clear()
    with caplog.at_level("WARNING", logger=sb.__name__):
        r = run_python("print(1)", LIMITS)
    assert r.ok and r.isolation == "rlimits" and "NOT contained" in caplog.text and ".env" in caplog.text
