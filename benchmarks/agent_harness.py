"""Agent harness benchmark: how close does the batch runner get to what a bare HTTP client reaches?

A scripted OpenAI-compatible endpoint process (tests/scripted_endpoint.py) answers every call after a fixed
50 ms; each question costs 2 LLM calls + 1 real search (BM25 on the sample index, so the harness, not the
encoder, is what is measured; a hybrid-search run is reported too). Ideal throughput = concurrency / 0.1 s.

The ceiling is a bare aiohttp loop in this process, measured in the same run: the same number of questions in
flight, each question the two requests the harness sent for a real question (captured by the endpoint), no search,
no trajectory, no file, on the same event loop as the harness (uvloop where installed). The harness is run once per
endpoint transport (aiohttp, openai) and the ratio harness / ceiling printed for each at the highest concurrency.

    uv run python benchmarks/agent_harness.py                # 1,000 questions at concurrency 1, 32, 128
    uv run python benchmarks/agent_harness.py --questions 2000 --concurrency 128 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import cpu_seconds, free_port, preset_index

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.05
CALLS_PER_QUESTION = 2




def run(concurrency: int, n: int, url: str, server_pid: int, retriever, method: str,
        transport: str = "aiohttp") -> dict:
    from agentrl.data.corpus import load_qa
    from agentrl.envs.search.env import LocalSearch, search_task
    from agentrl.rollout.endpoint import EndpointConfig, EndpointPolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    base = load_qa(ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl")
    rows = [{**base[i % len(base)], "id": f"b{i}"} for i in range(n)]
    task = search_task(LocalSearch(retriever, method), top_k=3, max_searches=2)
    policy = EndpointPolicy(EndpointConfig(base_url=url, model="scripted", api_key="EMPTY", transport=transport))
    out = Path(tempfile.mkdtemp(prefix="harness-"))
    s0, c0, t0 = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    metrics = run_batch(policy, task, rows, out, RunConfig(concurrency=concurrency, progress=False), overwrite=True)
    wall, client_cpu, server_cpu = time.perf_counter() - t0, time.process_time() - c0, cpu_seconds(server_pid) - s0
    shutil.rmtree(out)
    assert metrics["errors"] == 0 and metrics["n"] == n, metrics
    qps = n / wall
    ideal = concurrency / (CALLS_PER_QUESTION * LATENCY)
    return {"concurrency": concurrency, "questions": n, "method": method, "transport": transport, "wall_s": wall,
            "qps": qps,
            "ideal_qps": ideal, "fraction_of_ideal": qps / ideal, "harness_cpu_ms_per_q": 1000 * client_cpu / n,
            "endpoint_cpu_ms_per_q": 1000 * server_cpu / n}


def captured_question(url: str, question: str) -> list[bytes]:
    """Return the two request bodies the harness sent for ``question`` (first turn, then with the tool result),
    as recorded by the scripted endpoint."""
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{url}/_requests?{urllib.parse.urlencode({'contains': question})}") as resp:
        bodies = json.loads(resp.read())["data"]
    first = next(b for b in bodies if not any(m["role"] == "tool" for m in b["messages"]))
    second = next(b for b in bodies if any(m["role"] == "tool" for m in b["messages"]))
    return [json.dumps(first).encode(), json.dumps(second).encode()]


def bare_client(url: str, bodies: list[bytes], n: int, concurrency: int, server_pid: int) -> dict:
    """The ceiling: ``concurrency`` workers, each question the same requests in order over one aiohttp session,
    reply bodies parsed as JSON, nothing else, on the event loop the harness runs on (agentrl.core.aio: uvloop where
    installed). Returns questions/s, requests/s and CPU per question."""
    import asyncio

    import aiohttp

    from agentrl.core.aio import run_sync

    async def go():
        left = iter(range(n))
        headers = {"Authorization": "Bearer EMPTY", "Content-Type": "application/json"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            async def worker():
                for _ in left:
                    for body in bodies:
                        async with session.post(f"{url}/chat/completions", data=body, headers=headers) as r:
                            json.loads(await r.read())

            s0, c0, t0 = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - t0, time.process_time() - c0, cpu_seconds(server_pid) - s0

    wall, cpu, server_cpu = run_sync(go())
    return {"concurrency": concurrency, "questions": n, "qps": n / wall, "requests_per_s": len(bodies) * n / wall,
            "client_cpu_ms_per_q": 1000 * cpu / n, "endpoint_cpu_ms_per_q": 1000 * server_cpu / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--concurrency", default="1,32,128")
    ap.add_argument("--transports", default="aiohttp,openai", help="endpoint transports compared at the top "
                    "concurrency (the first one also runs the other concurrencies and the hybrid search)")
    ap.add_argument("--rounds", type=int, default=1, help="ceiling/harness rounds at the top concurrency")
    ap.add_argument("--no-hybrid", action="store_true", help="skip the hybrid-search run")
    ap.add_argument("--index", help="index directory (default: the demo preset's sample index)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentrl.retrieval import Retriever

    index = Path(args.index) if args.index else preset_index("demo", ROOT / "runs")
    retriever = Retriever.load(index)
    retriever.search_batch(["warm up"], 3, "bm25" if args.no_hybrid else "hybrid")
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "scripted_endpoint.py"), "--port", str(port),
                               "--latency", str(LATENCY)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    transports = args.transports.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    top = max(levels)
    results = []

    def show(r: dict) -> None:
        print(f"concurrency {r['concurrency']:>3} ({r['method']:>6} search, {r['transport']:>7}): {r['qps']:7.1f} q/s "
              f"of ideal {r['ideal_qps']:6.0f} = {100 * r['fraction_of_ideal']:5.1f}%  | harness CPU "
              f"{r['harness_cpu_ms_per_q']:.2f} ms/q, endpoint CPU {r['endpoint_cpu_ms_per_q']:.2f} ms/q  "
              f"({r['questions']} questions, {r['wall_s']:.1f} s)", flush=True)

    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1"
        for transport in transports:  # warm up both processes and every transport
            run(8, 16, url, server.pid, retriever, "bm25", transport)
        bodies = captured_question(url, retriever_question())
        for c in levels:
            if c == top:
                continue
            n = min(args.questions, max(40, 40 * c)) if c == 1 else args.questions
            r = run(c, n, url, server.pid, retriever, "bm25", transports[0])
            results.append(r)
            show(r)
        ratios: dict[str, list[float]] = {t: [] for t in transports}
        for _ in range(args.rounds):
            ceiling = bare_client(url, bodies, args.questions, top, server.pid)
            results.append({"bare_client": ceiling})
            print(f"concurrency {top:>3} (bare aiohttp client, same 2 requests per question): {ceiling['qps']:7.1f} "
                  f"q/s ({ceiling['requests_per_s']:,.0f} req/s) | client CPU {ceiling['client_cpu_ms_per_q']:.2f} "
                  f"ms/q, endpoint CPU {ceiling['endpoint_cpu_ms_per_q']:.2f} ms/q", flush=True)
            for transport in transports:
                r = run(top, args.questions, url, server.pid, retriever, "bm25", transport)
                r["ratio_to_bare_client"] = r["qps"] / ceiling["qps"]
                ratios[transport].append(r["ratio_to_bare_client"])
                results.append(r)
                show(r)
                print(f"    harness / bare client ({transport}): {r['ratio_to_bare_client']:.2f}", flush=True)
        for transport, values in ratios.items():
            values = sorted(values)
            print(f"ratio harness / bare client at concurrency {top}, {transport} transport: median "
                  f"{values[len(values) // 2]:.2f} over {len(values)} round(s) {[round(v, 2) for v in values]}")
        if not args.no_hybrid:
            r = run(top, args.questions, url, server.pid, retriever, "hybrid", transports[0])
            results.append(r)
            show(r)
    finally:
        server.terminate()
        server.wait(timeout=20)
    print(f"peak RSS of the harness process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    out = ROOT / "runs" / "bench" / "agent_harness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


def retriever_question() -> str:
    """Return the question of the first benchmark row (its requests are the ceiling's)."""
    from agentrl.data.corpus import load_qa

    return load_qa(ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl")[0]["question"]


if __name__ == "__main__":
    main()
