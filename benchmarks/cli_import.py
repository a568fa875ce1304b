"""How long `agentrl --help` waits before it can answer: the import time of ``agentrl.cli`` in a fresh interpreter,
against a fresh interpreter that imports only ``argparse`` (the baseline, measured in the same run).

    uv run python benchmarks/cli_import.py [--runs 20]

The CLI imports the application (every library module) only once a command is known (agentrl.cli.main), so a
mistyped flag or ``--help`` costs about what argparse does; this prints the best and median of ``--runs`` fresh
processes each, the ratio, and the agentrl modules ``import agentrl.cli`` loads.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def timed(code: str) -> float:
    """Return the wall time in seconds of a fresh interpreter running ``code``."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh processes per measurement")
    args = parser.parse_args()
    cases = {"argparse (baseline)": "import argparse", "agentrl.cli": "import agentrl.cli"}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
        for name, code in cases.items():
            times[name].append(timed(code))
    for name, t in times.items():
        print(f"{name:22s} best {min(t) * 1000:6.1f} ms  median {statistics.median(t) * 1000:6.1f} ms")
    base, cli = (statistics.median(t) for t in times.values())
    print(f"agentrl.cli / baseline (median): {cli / base:.2f}x")
    loaded = subprocess.run([sys.executable, "-c", "import sys, agentrl.cli; print(' '.join(sorted(m for m in "
                             "sys.modules if m.startswith('agentrl'))))"], check=True, capture_output=True, text=True)
    print("agentrl modules loaded:", loaded.stdout.strip())


if __name__ == "__main__":
    main()
