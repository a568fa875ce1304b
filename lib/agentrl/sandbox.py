"""Run untrusted Python in a separate, bounded process: what the code environment's ``run_python`` executes.

Every run gets a fresh process and a fresh temporary directory (removed afterwards), an empty environment
(no secrets), and resource limits set before the code starts: CPU seconds, address space, file size,
open files, no core dumps, and a process count. A wall-clock timeout kills the whole process group.

Two isolation levels, picked once per process (``isolation()``):

- ``namespaces`` (root with ``unshare``, as on these machines): new network, PID and mount namespaces;
  fresh tmpfs on /tmp, /var/tmp, /dev/shm and /run/lock (size-bounded; gone when the run ends) and a
  private /proc; the code then runs as ``nobody`` with no capabilities; /root, /home, /work (the repo and
  its .env) and other data mounts appear as empty read-only directories, the standard library as a
  read-only view. It cannot write outside those tmpfs mounts, see or signal host processes, or reach any
  network (only a down loopback exists). The kernel kills every process of the PID namespace when its
  first process exits, so a fork that escapes the process group (``setsid``) dies too.
- ``rlimits`` (elsewhere): the same limits plus a process group, with ``socket`` blocked inside the
  interpreter before the code runs; weaker (the code runs as the calling user), so the mode is recorded in
  each result.

Stdout and stderr go to files bounded by the file-size limit, and at most ``max_output`` characters come back.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

NOBODY = 65534


@dataclass
class SandboxLimits:
    """Bounds of one run."""

    timeout: float = 10.0  # wall-clock seconds, then the process group is killed
    cpu_seconds: int = 5
    memory_mb: int = 1024  # address space
    file_mb: int = 16  # largest file the code may write (also bounds stdout/stderr)
    tmpfs_mb: int = 64  # each of /tmp, /var/tmp, /dev/shm (namespaces mode)
    processes: int = 32  # RLIMIT_NPROC of the sandbox user
    open_files: int = 64
    max_output: int = 4000  # characters of stdout/stderr returned


@dataclass
class RunResult:
    """What one run did."""

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    seconds: float
    isolation: str

    @property
    def ok(self) -> bool:
        """Return True when the program exited with status 0 in time."""
        return self.returncode == 0 and not self.timed_out


# runs as root inside the new namespaces: private mounts, then drop to nobody and run the code in-process
_BOOT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def mount(src, target, fs, flags=0, data=None):
    if libc.mount(src.encode(), target.encode(), fs.encode() if fs else None, flags,
                  data.encode() if data else None) != 0:
        raise OSError(ctypes.get_errno(), "mount " + target)
source = open(sys.argv[1], encoding="utf-8", errors="replace").read()
size = sys.argv[2]
for target in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    if os.path.isdir(target):
        mount("tmpfs", target, "tmpfs", 0, "size=" + size + "m,mode=1777")
mount("proc", "/proc", "proc", 14)  # MS_NOSUID | MS_NODEV | MS_NOEXEC
# the standard library may sit where nobody cannot read it (/root/.pyenv): expose a read-only view of it
stdlib = os.path.dirname(os.__file__)
os.mkdir("/tmp/.stdlib")
mount(stdlib, "/tmp/.stdlib", None, 4096 | 16384)  # MS_BIND | MS_REC
mount(stdlib, "/tmp/.stdlib", None, 4096 | 32 | 1)  # MS_BIND | MS_REMOUNT | MS_RDONLY
sys.path[:] = [p.replace(stdlib, "/tmp/.stdlib", 1) for p in sys.path if p.startswith(stdlib)]
# homes, the repo and the shared data: an empty read-only view (no .env files, no keys, no ~/.ssh)
for target in ("/root", "/home", "/work", "/srv", "/mnt", "/media", "/opt", "/old_root", "/farm"):
    if os.path.isdir(target):
        mount("tmpfs", target, "tmpfs", 1, "size=1m,mode=755")  # MS_RDONLY; the stdlib stays at /tmp/.stdlib
os.mkdir("/tmp/work")
os.chown("/tmp/work", 65534, 65534)
os.chdir("/tmp/work")
import resource
for res, value in zip(("CPU", "AS", "FSIZE", "NOFILE", "NPROC", "CORE"), sys.argv[3:9]):
    resource.setrlimit(getattr(resource, "RLIMIT_" + res), (int(value), int(value)))
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
del libc, mount, size, stdlib, res, value
sys.argv = ["main.py"]
os.environ.clear()
os.environ.update({"HOME": "/tmp/work", "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
exec(compile(source, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""

# fallback: no namespaces; block sockets in the interpreter before the code runs
_BOOT_PLAIN = r"""
import socket, sys
def _blocked(*a, **k):
    raise PermissionError("network access is disabled in the sandbox")
socket.socket = socket.create_connection = socket.socketpair = socket.fromfd = _blocked
socket.getaddrinfo = _blocked
source = open(sys.argv[1], encoding="utf-8", errors="replace").read()
import resource
for res, value in zip(("CPU", "AS", "FSIZE", "NOFILE", "NPROC", "CORE"), sys.argv[3:9]):
    resource.setrlimit(getattr(resource, "RLIMIT_" + res), (int(value), int(value)))
sys.argv = ["main.py"]
exec(compile(source, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@functools.cache
def isolation() -> str:
    """Return ``"namespaces"`` when namespaced runs work here (root and a working ``unshare``), else ``"rlimits"``."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "rlimits"
    try:
        probe = subprocess.run([*_unshare(), sys.executable, "-I", "-S", "-c", "import os; os.setuid(65534)"],
                               capture_output=True, timeout=20, env={})
    except (OSError, subprocess.TimeoutExpired):
        return "rlimits"
    return "namespaces" if probe.returncode == 0 else "rlimits"


def _unshare() -> list[str]:
    return [shutil.which("unshare") or "unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork",
            "--kill-child"]


def _limit_args(limits: SandboxLimits) -> list[str]:
    """Return the limits as the bootstrap's arguments (CPU, AS, FSIZE, NOFILE, NPROC, CORE). The bootstrap sets
    them before the code runs: a ``preexec_fn`` would force a full fork() of this (possibly huge) process."""
    mb = 1024 * 1024
    return [str(v) for v in (limits.cpu_seconds, limits.memory_mb * mb, limits.file_mb * mb, limits.open_files,
                             limits.processes, 0)]


def _kill_children(pid: int) -> None:
    """SIGKILL the direct children of ``pid`` (the first process of a PID namespace: the kernel then kills the
    rest of the namespace before ``pid`` can reap it)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            children = [int(c) for c in fh.read().split()]
    except OSError:
        children = []
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _read(path: str, limit: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read(limit + 1)
    return text if len(text) <= limit else text[:limit] + "\n... (output cut)"


def run_python(code: str, limits: SandboxLimits | None = None, started=None) -> RunResult:
    """Run ``code`` as a Python program in the sandbox; return its output and status (never raises for what
    the code does; OSError only when no process can be started at all). ``started``, when given, is called with
    a function that kills the run from another thread (a cancelled item), before the program is waited for."""
    limits = limits or SandboxLimits()
    mode = isolation()
    work = tempfile.mkdtemp(prefix="agentrl-sbx-")
    start = time.perf_counter()
    try:
        main = os.path.join(work, "main.py")
        with open(main, "w", encoding="utf-8") as fh:
            fh.write(code)
        out_path, err_path = os.path.join(work, "stdout"), os.path.join(work, "stderr")
        if mode == "namespaces":
            cmd = [*_unshare(), sys.executable, "-I", "-S", "-c", _BOOT, main, str(limits.tmpfs_mb),
                   *_limit_args(limits)]
        else:
            cmd = [sys.executable, "-I", "-S", "-c", _BOOT_PLAIN, main, "", *_limit_args(limits)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work}
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=work, env=env,
                                    start_new_session=True, close_fds=True)
            expired = threading.Event()

            def kill():
                if mode == "namespaces":  # unshare then returns once the whole namespace is gone
                    _kill_children(proc.pid)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)

            def on_timeout():
                expired.set()
                kill()

            if started is not None:
                started(kill)
            # a timer instead of wait(timeout=...): that one polls with sleeps of up to 50 ms
            timer = threading.Timer(limits.timeout, on_timeout)
            timer.daemon = True
            timer.start()
            try:
                proc.wait()
            finally:
                timer.cancel()
                # the whole group, also after a normal exit: children left running in the background
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        timed_out = expired.is_set()
        return RunResult(stdout=_read(out_path, limits.max_output), stderr=_read(err_path, limits.max_output),
                         returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                         seconds=round(time.perf_counter() - start, 4), isolation=mode)
    finally:
        shutil.rmtree(work, ignore_errors=True)
