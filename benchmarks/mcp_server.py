"""MCP server benchmark: `agentrl serve --transport http` against a bare HTTP endpoint running the same search.

Both servers are separate processes on loopback over the demo preset's sample index (hybrid search, top-5): the
real MCP server, and a bare Starlette app whose one route runs the same batched search (``BatchSearcher`` over
the same ``Retriever``) and returns the passages as JSON: the ceiling for what any protocol layer can reach here.
The load generator is one process with 50 concurrent clients posting JSON over aiohttp: to the MCP server as
the MCP SDK's client sends them (JSON-RPC ``tools/call``, protocol 2026-07-28, one POST per call), to the bare
endpoint as ``{"query", "top_k"}``. Raw posts rather than ``mcp.Client`` because the SDK client costs more CPU
per call than the server on this 2-core machine and would measure itself (``--sdk-client`` adds that figure).

Printed: calls/s, p50/p99 latency and CPU per call for each, the ratio MCP / bare after a warm-up (every query
seen once, as in a run that repeats questions), a cold run (the same load at once after the server starts
listening), the time from process start to the first answer, and a 1 MB query (refused at once).

    uv run python benchmarks/mcp_server.py                       # 50 clients x 100 calls
    uv run python benchmarks/mcp_server.py --clients 50 --calls 200 --rounds 3
    uv run python benchmarks/mcp_server.py --hostile 13           # + a round with 1 call in 13 hostile
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from _util import cpu_seconds, free_port, preset_index

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl"
TOP_K = 5
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "search"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}




def bare_app(index_dir: str):
    """Return the ceiling: a Starlette app with ``POST /search`` running the MCP server's batched search."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from agentrl.retrieval import Retriever
    from agentrl.retrieval.batcher import BatchSearcher

    retriever = Retriever.load(index_dir)
    retriever.search("warm up", 1)
    searcher = BatchSearcher(retriever)

    async def search(request: Request):
        body = json.loads(await request.body())
        hits = await searcher.search(body["query"], body["top_k"])
        rows = [{"id": h.id, "title": h.title, "text": h.text, "score": h.score} for h in hits]
        return Response(json.dumps(rows), media_type="application/json")

    return Starlette(routes=[Route("/search", search, methods=["POST"])])


def start(kind: str, index_dir: Path) -> tuple[subprocess.Popen, str, float]:
    """Start the ``mcp`` or ``bare`` server process; return it, its URL and the start time (perf_counter)."""
    port = free_port()
    if kind == "mcp":
        cmd = [sys.executable, "-m", "agentrl.cli", "serve", "--index", str(index_dir), "--transport", "http",
               "--port", str(port)]
        url = f"http://127.0.0.1:{port}/mcp"
    else:
        cmd = [sys.executable, __file__, "--serve-bare", str(port), "--index", str(index_dir)]
        url = f"http://127.0.0.1:{port}/search"
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, url, started


def first_tools_list(url: str, timeout: float = 300) -> float:
    """Return the perf_counter time at which ``url`` first answered a ``tools/list`` with the search tool."""
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {"_meta": META}}).encode()
    headers = {**MCP_HEADERS, "mcp-method": "tools/list"}
    headers.pop("mcp-name")
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=30) as reply:
                if "search" in reply.read().decode():
                    return time.perf_counter()
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{url} answered no tools/list")


def wait_listening(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Return once the server's port accepts connections (raise if the process exits or the timeout passes)."""
    port = int(url.split(":")[2].split("/")[0])
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"{url} did not start listening")


# hostile calls mixed into the load by --hostile: a 1 MB query and a bad top_k (answered as tool errors), queries
# with no searchable term (hybrid search answers them from its dense half), a body that is not JSON (a JSON-RPC
# parse error)
HOSTILE = [{"query": "x" * 1_000_000, "top_k": TOP_K}, {"query": "the of and", "top_k": TOP_K},
           {"query": "?", "top_k": TOP_K}, {"query": "é", "top_k": TOP_K}, {"query": "Ed Wood", "top_k": "many"},
           None]


def _request(kind: str, query: str, call_id: int, arguments: dict | None = None) -> tuple[bytes, dict]:
    if kind == "mcp":
        args = arguments if arguments is not None else {"query": query, "top_k": TOP_K}
        body = {"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                "params": {"name": "search", "arguments": args, "_meta": META}}
        return json.dumps(body).encode(), MCP_HEADERS
    return json.dumps({"query": query, "top_k": TOP_K}).encode(), {"content-type": "application/json"}


def _check(kind: str, reply) -> tuple[bool, str]:
    """Return (ok, error text) for one reply: five passages, or (for MCP) a tool error's text."""
    if kind == "bare":
        return len(reply) == TOP_K, ""
    result = reply.get("result") or {}
    if result.get("isError"):
        return False, result["content"][0]["text"]
    return len((result.get("structuredContent") or {}).get("result") or []) == TOP_K, ""


async def load(kind: str, url: str, queries: list[str], clients: int, calls: int, offset: int = 0,
               connect_retry: bool = False, hostile_every: int = 0) -> dict:
    """Run ``clients`` concurrent clients of ``calls`` sequential calls each; return calls/s, latencies, errors
    of the valid calls. With ``hostile_every`` = N, every N-th call is one of HOSTILE instead (MCP only): those
    are counted apart (``hostile``, and ``hostile_answered`` when the reply was a tool or JSON-RPC error)."""
    import aiohttp
    import numpy as np

    latencies: list[float] = []
    errors = hostile = hostile_answered = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def client(ci: int) -> None:
            nonlocal errors, hostile, hostile_answered
            for j in range(calls):
                n = offset + ci * calls + j
                if hostile_every and n % hostile_every == hostile_every - 1:
                    args = HOSTILE[(n // hostile_every) % len(HOSTILE)]
                    body = b"{not json" if args is None else _request(kind, "", n, args)[0]
                    async with session.post(url, data=body, headers=MCP_HEADERS) as r:
                        reply = json.loads(await r.read())
                    hostile += 1
                    # stop-word-only queries have no BM25 term, so hybrid answers them from the dense index alone:
                    # a normal reply, counted apart from the errors
                    hostile_answered += "error" in reply or bool((reply.get("result") or {}).get("isError"))
                    continue
                body, headers = _request(kind, queries[n % len(queries)], n)
                t = time.perf_counter()
                while True:
                    try:
                        async with session.post(url, data=body, headers=headers) as r:
                            reply = json.loads(await r.read())
                        break
                    except aiohttp.ClientConnectionError:
                        if not connect_retry:
                            raise
                        await asyncio.sleep(0.05)  # the server is still starting: as a patient client would
                latencies.append(time.perf_counter() - t)
                errors += not _check(kind, reply)[0]

        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    lat = np.array(latencies) * 1000
    return {"calls": len(latencies), "errors": errors, "hostile": hostile, "hostile_answered": hostile_answered,
            "wall_s": wall, "calls_per_s": len(latencies) / wall,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "max_ms": float(lat.max()), "client_cpu_ms_per_call": 1000 * cpu / len(latencies)}


async def sdk_load(url: str, queries: list[str], clients: int, calls: int) -> dict:
    """The same load through ``mcp.Client`` (one client session per simulated client): what an agent sees."""
    import numpy as np
    from mcp import Client

    latencies: list[float] = []
    errors = 0

    async def client(ci: int) -> None:
        nonlocal errors
        async with Client(url) as c:
            for j in range(calls):
                t = time.perf_counter()
                r = await c.call_tool("search", {"query": queries[(ci * calls + j) % len(queries)], "top_k": TOP_K})
                latencies.append(time.perf_counter() - t)
                errors += bool(r.is_error) or len(r.structured_content["result"]) != TOP_K

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    lat = np.array(latencies) * 1000
    return {"calls": len(latencies), "errors": errors, "calls_per_s": len(latencies) / wall,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}


def measure(kind: str, url: str, pid: int, queries: list[str], clients: int, calls: int, offset: int = 0,
            hostile_every: int = 0) -> dict:
    """Return :func:`load` figures plus the server's CPU per call."""
    s0 = cpu_seconds(pid)
    r = asyncio.run(load(kind, url, queries, clients, calls, offset, hostile_every=hostile_every))
    r["server_cpu_ms_per_call"] = 1000 * (cpu_seconds(pid) - s0) / r["calls"]
    return r


def show(label: str, r: dict) -> None:
    """Print one measurement line."""
    cpu = f", CPU/call server {r['server_cpu_ms_per_call']:.2f} ms" if "server_cpu_ms_per_call" in r else ""
    cpu += f", client {r['client_cpu_ms_per_call']:.2f} ms" if "client_cpu_ms_per_call" in r else ""
    print(f"{label:<38} {r['calls_per_s']:7.0f} calls/s  p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
          f"errors {r['errors']}{cpu}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--calls", type=int, default=100, help="calls per client")
    ap.add_argument("--rounds", type=int, default=1, help="warm measurement rounds (bare, then MCP, each round)")
    ap.add_argument("--sdk-client", action="store_true", help="also measure through mcp.Client")
    ap.add_argument("--hostile", type=int, default=0, metavar="N",
                    help="also measure with every N-th call hostile (1 MB query, no searchable term, bad top_k, "
                         "a body that is not JSON)")
    ap.add_argument("--index", help="index directory (default: the demo preset's sample index)")
    ap.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.serve_bare:
        import uvicorn

        uvicorn.run(bare_app(args.index), host="127.0.0.1", port=args.serve_bare, log_level="warning",
                    access_log=False)
        return
    from agentrl.data.corpus import load_qa

    index = Path(args.index) if args.index else preset_index("demo", ROOT / "runs")
    queries = [r["question"] for r in load_qa(SAMPLE)]
    results: dict = {"clients": args.clients, "calls_per_client": args.calls}

    # cold: the load starts the moment the MCP server listens; first answer timed from the process start
    proc, url, started = start("mcp", index)
    try:
        wait_listening(url, proc)
        listening = time.perf_counter() - started
        tools_list = first_tools_list(url) - started

        async def first_answer() -> float:
            await load("mcp", url, queries[:1], 1, 1, connect_retry=True)
            return time.perf_counter() - started

        ttfa = asyncio.run(first_answer())
        cold = measure("mcp", url, proc.pid, queries, args.clients, args.calls, offset=1)
        results["cold"] = {"listening_s": listening, "first_tools_list_s": tools_list, "first_answer_s": ttfa, **cold}
        print(f"MCP cold start: listening after {listening:.1f} s, first tools/list answered after {tools_list:.1f} s "
              f"(goal 3 s), first search answered after {ttfa:.1f} s (the embedder's load, in the background since "
              "the start)", flush=True)
        show("MCP cold run (no warm-up)", cold)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    servers = {kind: start(kind, index) for kind in ("bare", "mcp")}
    try:
        for kind, (proc, url, _) in servers.items():
            wait_listening(url, proc)
            asyncio.run(load(kind, url, queries, args.clients, max(1, len(queries) // args.clients) + 1,
                             connect_retry=True))  # warm-up: every query once
        results["rounds"] = []
        for _ in range(args.rounds):
            rnd = {}
            for kind, (proc, url, _) in servers.items():
                rnd[kind] = measure(kind, url, proc.pid, queries, args.clients, args.calls)
                show(f"{'bare HTTP (ceiling)' if kind == 'bare' else 'MCP server'}, warm", rnd[kind])
            rnd["ratio"] = rnd["mcp"]["calls_per_s"] / rnd["bare"]["calls_per_s"]
            print(f"  MCP / bare: {rnd['ratio']:.2f}", flush=True)
            results["rounds"].append(rnd)
        mcp_proc, mcp_url, _ = servers["mcp"]
        if args.hostile:
            # valid-call throughput and p99 with hostile calls mixed in, against the clean MCP rounds above
            bad = measure("mcp", mcp_url, mcp_proc.pid, queries, args.clients, args.calls, hostile_every=args.hostile)
            results["hostile"] = {"every": args.hostile, **bad}
            show(f"MCP server, 1 call in {args.hostile} hostile", bad)
            print(f"  hostile calls: {bad['hostile']}: {bad['hostile_answered']} answered with a tool or JSON-RPC "
                  f"error, {bad['hostile'] - bad['hostile_answered']} stop-word-only queries answered by the dense "
                  f"half of hybrid search; valid calls failed: {bad['errors']}", flush=True)
        big = asyncio.run(load("mcp", mcp_url, [f"{i} " + "x" * 1_000_000 for i in range(20)], 1, 20))
        results["one_mb_query"] = big
        print(f"1 MB query: {big['p50_ms']:.1f} ms per call (p50 of 20), refused as a tool error: "
              f"{big['errors'] == 20}", flush=True)
        if args.sdk_client:
            sdk = asyncio.run(sdk_load(mcp_url, queries, args.clients, args.calls))
            results["sdk_client"] = sdk
            show("MCP server via mcp.Client", sdk)
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    warm = sorted(results["rounds"], key=lambda r: r["ratio"])[len(results["rounds"]) // 2]
    print(f"median round: MCP {warm['mcp']['calls_per_s']:.0f} calls/s, p99 {warm['mcp']['p99_ms']:.1f} ms; "
          f"bare {warm['bare']['calls_per_s']:.0f} calls/s; ratio {warm['ratio']:.2f}")
    out = ROOT / "runs" / "bench" / "mcp_server.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
