"""Agent harness benchmark: how close does the batch runner get to the ideal throughput of an endpoint?

A scripted OpenAI-compatible endpoint process (agentrl.scripted_endpoint) answers every call after a fixed
50 ms; each question costs 2 LLM calls + 1 real search (BM25 on the sample index, so the harness, not the
encoder, is what is measured; a hybrid-search run is reported too). Ideal throughput = concurrency / 0.1 s.

    uv run python benchmarks/agent_harness.py                # 1,000 questions at concurrency 1, 32, 128
    uv run python benchmarks/agent_harness.py --questions 300 --concurrency 128
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

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.05
CALLS_PER_QUESTION = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(concurrency: int, n: int, url: str, server_pid: int, retriever, method: str) -> dict:
    from agentrl.corpus import load_qa
    from agentrl.envs.search import LocalSearch
    from agentrl.policies.endpoint import EndpointConfig, EndpointPolicy
    from agentrl.runner import RunConfig, run_batch
    from agentrl.tasks import search_task

    base = load_qa(ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl")
    rows = [{**base[i % len(base)], "id": f"b{i}"} for i in range(n)]
    task = search_task(LocalSearch(retriever, method), top_k=3, max_searches=2)
    policy = EndpointPolicy(EndpointConfig(base_url=url, model="scripted", api_key="EMPTY"))
    out = Path(tempfile.mkdtemp(prefix="harness-"))
    s0, c0, t0 = _cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    metrics = run_batch(policy, task, rows, out, RunConfig(concurrency=concurrency, progress=False), overwrite=True)
    wall, client_cpu, server_cpu = time.perf_counter() - t0, time.process_time() - c0, _cpu_seconds(server_pid) - s0
    shutil.rmtree(out)
    assert metrics["errors"] == 0 and metrics["n"] == n, metrics
    qps = n / wall
    ideal = concurrency / (CALLS_PER_QUESTION * LATENCY)
    return {"concurrency": concurrency, "questions": n, "method": method, "wall_s": wall, "qps": qps,
            "ideal_qps": ideal, "fraction_of_ideal": qps / ideal, "harness_cpu_ms_per_q": 1000 * client_cpu / n,
            "endpoint_cpu_ms_per_q": 1000 * server_cpu / n}


def raw_http_floor(url: str, n: int = 2000, concurrency: int = 128) -> dict:
    """CPU per request of a bare aiohttp POST of the same size against the same endpoint: the floor any
    Python client pays, to compare with what the openai SDK path costs."""
    import asyncio

    import aiohttp

    body = {"model": "scripted", "max_tokens": 64, "messages": [
        {"role": "system", "content": "s" * 700}, {"role": "user", "content": "Who directed the film Ed Wood?"}]}

    async def go():
        sem = asyncio.Semaphore(concurrency)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            async def one():
                async with sem, session.post(f"{url}/chat/completions", json=body) as r:
                    json.loads(await r.read())

            t, c = time.perf_counter(), time.process_time()
            await asyncio.gather(*(one() for _ in range(n)))
            return n / (time.perf_counter() - t), 1000 * (time.process_time() - c) / n

    rps, cpu = asyncio.run(go())
    return {"requests_per_s": rps, "client_cpu_ms_per_request": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--concurrency", default="1,32,128")
    ap.add_argument("--index", help="index directory (default: the demo preset's sample index)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentrl.config import load_preset
    from agentrl.pipeline import corpus_and_index
    from agentrl.retrieval import Retriever

    index = Path(args.index) if args.index else corpus_and_index(load_preset("demo"), runs=ROOT / "runs").index_dir
    retriever = Retriever.load(index)
    retriever.search_batch(["warm up"], 3, "hybrid")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "agentrl.scripted_endpoint", "--port", str(port), "--latency",
                               str(LATENCY)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = []
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1"
        run(8, 16, url, server.pid, retriever, "bm25")  # warm up both processes
        plan = [(int(c), "bm25") for c in args.concurrency.split(",")] + [(128, "hybrid")]
        for c, method in plan:
            n = min(args.questions, max(40, 40 * c)) if c == 1 else args.questions
            r = run(c, n, url, server.pid, retriever, method)
            results.append(r)
            print(f"concurrency {c:>3} ({method:>6} search): {r['qps']:7.1f} q/s of ideal {r['ideal_qps']:6.0f} "
                  f"= {100 * r['fraction_of_ideal']:5.1f}%  | harness CPU {r['harness_cpu_ms_per_q']:.2f} ms/q, "
                  f"endpoint CPU {r['endpoint_cpu_ms_per_q']:.2f} ms/q  ({r['questions']} questions, "
                  f"{r['wall_s']:.1f} s)")
        floor = raw_http_floor(url)
        per_q = 2 * floor["client_cpu_ms_per_request"]
        print(f"reference: bare aiohttp POSTs to the same endpoint: {floor['requests_per_s']:,.0f} req/s, client CPU "
              f"{floor['client_cpu_ms_per_request']:.2f} ms/request ({per_q:.2f} ms per question of 2 calls)")
        results.append({"raw_http_floor": floor})
    finally:
        server.terminate()
        server.wait(timeout=20)
    print(f"peak RSS of the harness process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    out = ROOT / "runs" / "bench" / "agent_harness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
