"""Run untrusted Python in a separate, bounded process: what the code environment's ``run_python`` executes.

Every run gets a fresh process and a fresh temporary directory (removed afterwards), an empty environment
(no secrets), and resource limits set before the code starts: CPU seconds, address space per process, file
size, open files, no core dumps, and a process count. A wall-clock timeout kills the whole run.

**Memory of the whole run** is bounded by ``processes x memory_mb`` (address space per process times the
process limit) plus the tmpfs mounts: ``run_memory_mb(limits)``, at most RUN_BUDGET_MB (4,224 MB, the
defaults' bound; larger limits are refused). Runs hold one of ``slot_count()`` host-wide slots (``flock`` on
files in ``$TMPDIR/agentrl-sandbox-<euid>/``, so several processes share them), sized so that every slot at its
bound together stays under HOST_MEMORY_SHARE of the host's memory (23.5 GB here: 2 slots of 4.1 GB).
A cgroup would bound resident memory exactly, but cgroup v2 memory is not delegated on these machines (a v1
hybrid whose memory controller belongs to the VM's process manager) nor in the usual containers (read-only
/sys/fs/cgroup), so slots and per-run uids are the mechanism everywhere.

Two isolation levels, probed once per process (``isolation()``, a real probe run):

- ``namespaces`` (root, ``unshare``, ``pivot_root``; these machines): new mount, PID, network, IPC and UTS
  namespaces. The run's root is a fresh read-only tmpfs holding only read-only, nosuid binds of /usr (with the
  /bin, /lib... links), the interpreter's standard library and ``/etc/ld.so.cache``, a private /dev (null,
  zero, full, random, urandom, a tmpfs /dev/shm), a private /proc and a size-bounded tmpfs /tmp: /run (the
  host's unix sockets: MariaDB, PostgreSQL, D-Bus), /var, /home, /root, /work, /mnt, /opt, /srv, /sys and the
  rest do not exist. The old root is unmounted. The code runs with ``no_new_privs`` (setuid binaries do not
  elevate), no capabilities and no groups, as a **per-run uid** (RUN_UID_BASE + slot, never a real account),
  so RLIMIT_NPROC counts this run's processes only: a fork bomb cannot starve a concurrent run. Only a down
  loopback exists (no network, no abstract unix sockets of the host). The kernel kills every process of the
  PID namespace when its first process exits, so a ``setsid`` escape or a daemon dies with the run.
- ``rlimits`` (not root, or no namespaces; used only when asked for with ``AGENTRL_SANDBOX=rlimits``, else
  :func:`mode` refuses with what it does not contain): the same limits; sockets blocked inside the interpreter; the code
  runs in a child of a small wrapper that is a child subreaper and kills every leftover descendant when the
  code's process ends (a ``setsid`` double fork comes back to it), and ``os.getppid()`` is that wrapper, not
  the host. It does NOT contain: reads of anything the calling user can read (the repo, ``.env``, ``~/.ssh``),
  writes anywhere the user can write (each file bounded by ``file_mb``), signals to any of the user's processes
  (the host included, once the code finds its pid in /proc), the network through ``_socket``, ``ctypes`` or a
  subprocess (only the ``socket`` module is blocked), host unix sockets, ``/proc/<pid>/environ`` of the user's
  processes, setuid binaries; a descendant that kills the wrapper first escapes the cleanup; RLIMIT_NPROC is
  shared with the user's own processes (the run may start ``processes`` more than the user has). Each result
  records its ``isolation``.

Stdout and stderr go to files bounded by the file-size limit, and at most ``max_output`` characters come back.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import platform
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

RUN_UID_BASE = 61000  # per-run uids 61000..61127: below systemd's DynamicUser range (61184-65519)
MAX_SLOTS = 128
HOST_MEMORY_SHARE = 0.5  # every slot at its bound together stays under this share of the host's memory
RUN_BUDGET_MB = 8 * 512 + 2 * 64  # the default limits' bound: 8 processes x 512 MB + /tmp and /dev/shm
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}  # syscall numbers (glibc has no wrapper)


@dataclass
class SandboxLimits:
    """Bounds of one run; ``run_memory_mb`` of them may not exceed RUN_BUDGET_MB (ValueError)."""

    timeout: float = 10.0  # wall-clock seconds, then the whole run is killed
    cpu_seconds: int = 5
    memory_mb: int = 512  # address space of each process
    file_mb: int = 16  # largest file the code may write (also bounds stdout/stderr)
    tmpfs_mb: int = 64  # each of /tmp and /dev/shm (namespaces mode)
    processes: int = 8  # RLIMIT_NPROC of the run's own uid (threads count)
    open_files: int = 64
    max_output: int = 4000  # characters of stdout/stderr returned

    def __post_init__(self):
        if run_memory_mb(self) > RUN_BUDGET_MB:
            raise ValueError(f"sandbox limits allow {run_memory_mb(self):,} MB per run (processes x memory_mb + "
                             f"2 x tmpfs_mb), above the per-run budget of {RUN_BUDGET_MB:,} MB")


def run_memory_mb(limits: SandboxLimits) -> int:
    """Return the most memory one run can hold: every process at its address-space limit plus full tmpfs mounts."""
    return limits.processes * limits.memory_mb + 2 * limits.tmpfs_mb


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


# PID 1 of the new namespaces, as root: build the run's root, pivot into it, drop to the run's uid, run the code
_BOOT = r"""
import ctypes, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(r, what):
    if r != 0:
        raise OSError(ctypes.get_errno(), what)
def mount(src, target, fs=None, flags=0, data=None):
    check(libc.mount(src and src.encode(), target.encode(), fs and fs.encode(), flags, data and data.encode()),
          "mount " + target)
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC = 1, 2, 4, 8, 32, 4096, 16384
main, new, size, uid, pivot = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
source = open(main, encoding="utf-8", errors="replace").read()
stdlib = os.path.dirname(os.__file__)
def bind(src, is_dir=True):
    if is_dir:
        os.makedirs(new + src, exist_ok=True)
    else:
        open(new + src, "a").close()
    mount(src, new + src, None, BIND | REC)
    mount(None, new + src, None, BIND | REMOUNT | RDONLY | NOSUID | NODEV)
mount("tmpfs", new, "tmpfs", NOSUID | NODEV, "size=1m,mode=755")
bind("/usr")
for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
    if os.path.islink(name):
        os.symlink(os.readlink(name), new + name)
    elif os.path.isdir(name):
        bind(name)
if not os.path.isdir(new + stdlib):
    bind(stdlib)
os.makedirs(new + "/etc", exist_ok=True)
if os.path.isfile("/etc/ld.so.cache"):
    bind("/etc/ld.so.cache", is_dir=False)
os.mkdir(new + "/dev")
mount("tmpfs", new + "/dev", "tmpfs", NOSUID | NOEXEC, "size=64k,mode=755")
for dev in ("null", "zero", "full", "random", "urandom"):
    open(new + "/dev/" + dev, "w").close()
    mount("/dev/" + dev, new + "/dev/" + dev, None, BIND)
for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                 ("stderr", "/proc/self/fd/2")):
    os.symlink(to, new + "/dev/" + link)
for target in ("/tmp", "/dev/shm"):
    os.makedirs(new + target, exist_ok=True)
    mount("tmpfs", new + target, "tmpfs", NOSUID | NODEV, "size=" + size + "m,mode=1777")
os.mkdir(new + "/proc")
mount("proc", new + "/proc", "proc", NOSUID | NODEV | NOEXEC)
os.chdir(new)
check(libc.syscall(pivot, b".", b"."), "pivot_root")
check(libc.umount2(b".", 2), "umount the host root")  # MNT_DETACH: the host's tree is gone from this namespace
os.chdir("/")
mount(None, "/", None, BIND | REMOUNT | RDONLY | NOSUID | NODEV)
os.mkdir("/tmp/work", 0o700)
os.chown("/tmp/work", uid, uid)
os.chdir("/tmp/work")
for res, value in zip(("CPU", "AS", "FSIZE", "NOFILE", "NPROC", "CORE"), sys.argv[6:12]):
    resource.setrlimit(getattr(resource, "RLIMIT_" + res), (int(value), int(value)))
check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS: setuid binaries run unprivileged
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
sys.path[:] = [p for p in sys.path if p.startswith(stdlib)]
del libc, check, mount, bind, main, new, size, uid, pivot, stdlib, res, value
sys.argv = ["main.py"]
os.environ.clear()
os.environ.update({"HOME": "/tmp/work", "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
exec(compile(source, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""

# fallback: a subreaper wrapper runs the code in its child (sockets blocked), then kills what the code left behind
_BOOT_PLAIN = r"""
import ctypes, os, resource, signal, sys
source = open(sys.argv[1], encoding="utf-8", errors="replace").read()
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # it re-raises the code's fatal signal: no core file either
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned descendants come back here
child = os.fork()
if child == 0:
    import socket
    def _blocked(*a, **k):
        raise PermissionError("network access is disabled in the sandbox")
    socket.socket = socket.create_connection = socket.socketpair = socket.fromfd = _blocked
    socket.getaddrinfo = _blocked
    for res, value in zip(("CPU", "AS", "FSIZE", "NOFILE", "NPROC", "CORE"), sys.argv[6:12]):
        resource.setrlimit(getattr(resource, "RLIMIT_" + res), (int(value), int(value)))
    del res, value, child
    sys.argv = ["main.py"]
    exec(compile(source, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
else:
    while True:
        pid, status = os.wait()
        if pid == child:
            break
    while True:
        try:
            with open(f"/proc/self/task/{os.getpid()}/children") as fh:
                left = [int(p) for p in fh.read().split()]
        except OSError:
            left = []
        if not left:
            break
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.wait()
        except ChildProcessError:
            break
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))
"""


@functools.cache
def isolation() -> str:
    """Return ``"namespaces"`` when a probe run in namespaces works here (root, ``unshare``, ``pivot_root``),
    else ``"rlimits"``."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or platform.machine() not in _PIVOT_ROOT:
        return "rlimits"
    try:
        probe = _run("import os\nprint(os.getuid(), sorted(os.listdir('/')))", SandboxLimits(timeout=30),
                     "namespaces", None)
    except OSError as exc:
        log.warning("sandbox: namespaces unavailable (%s); using the rlimits mode", exc)
        return "rlimits"
    if probe.ok and probe.stdout.split()[0].isdigit() and int(probe.stdout.split()[0]) >= RUN_UID_BASE:
        return "namespaces"
    log.warning("sandbox: the namespaces probe failed (%s); using the rlimits mode", probe.stderr[-300:].strip())
    return "rlimits"


def _host_memory_mb() -> int:
    try:
        with open("/proc/meminfo") as fh:
            return int(next(line for line in fh if line.startswith("MemTotal:")).split()[1]) // 1024
    except (OSError, StopIteration, ValueError):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 ** 20)


@functools.cache
def slot_count() -> int:
    """Return how many runs may hold memory at once on this host: HOST_MEMORY_SHARE of its memory over the
    per-run budget (at least 1, at most MAX_SLOTS)."""
    return max(1, min(MAX_SLOTS, int(_host_memory_mb() * HOST_MEMORY_SHARE) // RUN_BUDGET_MB))


@functools.cache
def _run_uids() -> tuple[int, ...]:
    uids = []
    for uid in range(RUN_UID_BASE, RUN_UID_BASE + MAX_SLOTS):
        try:
            pwd.getpwuid(uid)  # a real account: never run untrusted code under it
        except KeyError:
            uids.append(uid)
    return tuple(uids)


class _Slots:
    """Host-wide run slots: a thread waits for a free one in this process, then locks its file (other processes
    lock the same files); the lock goes with the file descriptor, so a killed process frees its slot."""

    def __init__(self):
        self._cond = threading.Condition()
        self._held: set[int] = set()

    @contextlib.contextmanager
    def hold(self):
        """Hold a free slot for the duration of the block; yield its index."""
        n = min(slot_count(), len(_run_uids()))
        folder = os.path.join(tempfile.gettempdir(), f"agentrl-sandbox-{os.geteuid()}")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = index = None
        with self._cond:
            while fd is None:
                self._cond.wait_for(lambda: len(self._held) < n)
                for i in (i for i in range(n) if i not in self._held):
                    fd = os.open(os.path.join(folder, f"slot{i}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # another process runs in it
                        os.close(fd)
                        fd = None
                        continue
                    index = i
                    self._held.add(i)
                    break
                else:
                    self._cond.wait(0.02)  # every free slot is taken by other processes
        try:
            yield index
        finally:
            os.close(fd)
            with self._cond:
                self._held.discard(index)
                self._cond.notify()


SLOTS = _Slots()


def _unshare() -> list[str]:
    return [shutil.which("unshare") or "unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork",
            "--kill-child"]


def _user_processes() -> int:
    # RLIMIT_NPROC counts threads: every task of every process of the user
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
    return count


def _limit_args(limits: SandboxLimits, nproc: int) -> list[str]:
    """Return the limits as the bootstrap's arguments (CPU, AS, FSIZE, NOFILE, NPROC, CORE). The bootstrap sets
    them before the code runs: a ``preexec_fn`` would force a full fork() of this (possibly huge) process."""
    mb = 1024 * 1024
    return [str(v) for v in (limits.cpu_seconds, limits.memory_mb * mb, limits.file_mb * mb, limits.open_files,
                             nproc, 0)]


def _kill_children(pid: int) -> None:
    """SIGKILL the direct children of ``pid``: the code under the rlimits wrapper (which then kills the rest), or
    the first process of a PID namespace (the kernel then kills the rest of the namespace)."""
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


WEAK_OPT_IN = "AGENTRL_SANDBOX"  # =rlimits: run model-written code in the weaker mode where namespaces are missing
NOT_CONTAINED = ("reads of anything this user can read (the repository, .env, ~/.ssh), writes wherever this user can "
                 "write, signals to this user's processes (the trainer included), the network through _socket, ctypes "
                 "or a subprocess, host unix sockets, and setuid binaries")


class SandboxUnavailable(RuntimeError):
    """The namespaces sandbox is not available here and the weaker rlimits mode was not asked for."""


def mode() -> str:
    """Return the isolation runs use: ``namespaces`` where it works; ``rlimits`` only when the user asked for it
    (``AGENTRL_SANDBOX=rlimits``), with one warning line saying what it does not contain; else raise
    SandboxUnavailable saying why and what to do."""
    found = isolation()
    if found == "namespaces":
        return found
    if os.environ.get(WEAK_OPT_IN) == "rlimits":
        _warn_weak()
        return found
    why = "not root" if os.geteuid() != 0 else "no working unshare/pivot_root"
    raise SandboxUnavailable(
        f"the code sandbox cannot isolate model-written code here ({why}): only its rlimits mode would run, which "
        f"does NOT contain {NOT_CONTAINED}. Run as root on Linux (a container or VM is best), or accept the weaker "
        f"mode with {WEAK_OPT_IN}=rlimits")


@functools.cache
def _warn_weak() -> None:
    log.warning("sandbox: rlimits mode (%s=rlimits): model-written code is bounded in time and memory but NOT "
                "contained: %s", WEAK_OPT_IN, NOT_CONTAINED)


def run_python(code: str, limits: SandboxLimits | None = None, started=None) -> RunResult:
    """Run ``code`` as a Python program in the sandbox; return its output and status (never raises for what
    the code does; OSError only when no process can be started at all, SandboxUnavailable when only the weaker
    mode exists and was not asked for: :func:`mode`). ``started``, when given, is called with a function that kills
    the run from another thread (a cancelled item), before the program is waited for."""
    return _run(code, limits or SandboxLimits(), mode(), started)


def _run(code: str, limits: SandboxLimits, mode: str, started) -> RunResult:
    work = tempfile.mkdtemp(prefix="agentrl-sbx-")
    try:
        main = os.path.join(work, "main.py")
        with open(main, "w", encoding="utf-8") as fh:
            fh.write(code)
        with SLOTS.hold() as slot:
            start = time.perf_counter()
            if mode == "namespaces":
                os.mkdir(os.path.join(work, "root"))
                cmd = [*_unshare(), sys.executable, "-I", "-S", "-c", _BOOT, main, os.path.join(work, "root"),
                       str(limits.tmpfs_mb), str(_run_uids()[slot]), str(_PIVOT_ROOT[platform.machine()]),
                       *_limit_args(limits, limits.processes)]
            else:  # NPROC counts every process of the user: allow the run `processes` more than exist now
                cmd = [sys.executable, "-I", "-S", "-c", _BOOT_PLAIN, main, "", "", "", "",
                       *_limit_args(limits, _user_processes() + limits.processes)]
            returncode, timed_out = _wait(cmd, work, limits, mode, started)
            seconds = round(time.perf_counter() - start, 4)
        out, err = os.path.join(work, "stdout"), os.path.join(work, "stderr")
        return RunResult(stdout=_read(out, limits.max_output), stderr=_read(err, limits.max_output),
                         returncode=returncode, timed_out=timed_out, seconds=seconds, isolation=mode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait(cmd: list[str], work: str, limits: SandboxLimits, mode: str, started) -> tuple[int | None, bool]:
    """Start ``cmd`` with output to files in ``work``, kill it at the wall-clock limit; return (status, timed out)."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work}
    with open(os.path.join(work, "stdout"), "wb") as out, open(os.path.join(work, "stderr"), "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=work, env=env,
                                start_new_session=True, close_fds=True)
        expired = threading.Event()

        def kill():
            # the code first: the namespace (or the wrapper's cleanup) takes its descendants along
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
    return (None if expired.is_set() else proc.returncode), expired.is_set()
