"""The code sandbox against hostile programs: each one contained, the host unchanged, the env still serving.

Each program runs through the code environment's ``run_python`` tool (as a model would call it), with short
limits so the suite stays quick. On root machines with ``unshare`` the namespaced mode is exercised (network,
PID and mount namespaces, uid nobody); elsewhere the rlimits mode (a few checks then do not apply and say so).
"""

import asyncio
import os
import socket
import threading
from pathlib import Path

import pytest

from agentrl.envs.base import call_tool
from agentrl.envs.code import CodeEnv, code_score, humaneval_tasks
from agentrl.sandbox import SandboxLimits, isolation, run_python

LIMITS = SandboxLimits(timeout=4, cpu_seconds=2, memory_mb=512, file_mb=8, tmpfs_mb=32, processes=32)
NAMESPACES = isolation() == "namespaces"
HOST_MARK = Path(__file__).resolve().parent / "sandbox_was_here"


def nobody_processes() -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == 65534:
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


@pytest.fixture(scope="module")
def listener():
    """A TCP server on the host's loopback that no sandboxed program may reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    hits = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            hits.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1], hits
    srv.close()


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
    "read_host_environ_via_proc": "print('PROC', open('/proc/1/environ').read())",
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
    "mount_attempt": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "r = libc.mount(b'none', b'/work', b'tmpfs', 0, None)\nprint('mount', r, ctypes.get_errno())\n"
                     "import os\nprint(os.listdir('/work'))",
}


def contained(name: str, out: str, port_hits: list) -> None:
    """The check for each hostile program: what it tried did not happen."""
    if name in ("fork_bomb", "infinite_loop", "ignore_signals_and_spin", "thread_bomb", "output_flood"):
        assert out.startswith(("timed out", "exit status")), out
    if name in ("memory_bomb", "memory_growth"):
        assert "allocated" not in out and "MemoryError" in out
    if name == "one_gb_write":
        assert "wrote 1 GB" not in out and ("File too large" in out or "No space" in out)
    if name in ("write_into_the_repo", "write_to_home"):
        assert "wrote" not in out and not HOST_MARK.exists()
    if name == "write_to_host_tmp":
        assert not Path("/tmp/agentrl_sandbox_was_here").exists()  # written (if at all) to a throwaway tmpfs
    if name == "read_ssh_keys" and NAMESPACES:
        assert "KEYS []" in out
    if name == "read_env_secrets":
        assert "AGENTRL_TEST_SECRET" not in out and "s3cret-value" not in out
    if name == "read_host_environ_via_proc":
        assert "s3cret-value" not in out
    if name == "open_internet_socket":
        assert "connected" not in out
    if name in ("kill_the_parent", "kill_everything") and NAMESPACES:
        assert "killed" not in out or "survived" in out  # host pids are not even visible in the PID namespace
    if name == "recursion_limit_bomb":
        assert not out.startswith("exit status 0")
    if name == "output_flood":
        assert len(out) < 2 * LIMITS.max_output + 200
    if name == "file_descriptor_exhaustion":
        assert "Too many open files" in out
    if name == "ctypes_segfault":
        assert out.startswith("exit status -11") or "exit status" in out
    if name == "become_root":
        assert "root" not in out.split("stderr")[0].replace("exit status", "")
    if name == "fill_the_disk" and NAMESPACES:
        assert "filled" not in out and "No space left" in out
    if name == "mount_attempt" and NAMESPACES:
        assert "mount -1" in out
    assert not port_hits


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_program_is_contained_and_the_host_is_unchanged(name, env, listener, monkeypatch):
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cret-value")
    port, hits = listener
    before = nobody_processes()
    code = HOSTILE[name].replace("{pid}", str(os.getpid()))
    if name == "open_internet_socket":  # also the host's own loopback server
        code += f"\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    out = run(env, code)
    contained(name, out, hits)
    assert nobody_processes() <= before  # nothing left running (namespaced mode: the PID namespace died)


def test_a_host_loopback_server_is_unreachable_from_the_sandbox(listener):
    port, hits = listener
    if not NAMESPACES:
        pytest.skip("rlimits mode blocks sockets inside the interpreter only")
    r = run_python(f"import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n"
                   "print('connected')", LIMITS)
    assert "connected" not in r.stdout and not hits


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
    import agentrl.sandbox as sb

    monkeypatch.setattr(sb, "isolation", lambda: "rlimits")
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cret-value")
    spin = run_python(HOSTILE["infinite_loop"], LIMITS)
    assert spin.isolation == "rlimits" and not spin.ok
    assert "MemoryError" in run_python(HOSTILE["memory_bomb"], LIMITS).stderr
    assert "network access is disabled" in run_python(HOSTILE["open_internet_socket"], LIMITS).stderr
    assert "s3cret-value" not in run_python(HOSTILE["read_env_secrets"], LIMITS).stdout
    assert "File too large" in run_python(HOSTILE["one_gb_write"], LIMITS).stderr
