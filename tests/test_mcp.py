"""The retrieval MCP server, exercised by real MCP clients over stdio and streamable HTTP."""

import asyncio
import json
import sys

import pytest

from agentrl.retrieval.batcher import BatchSearcher
from agentrl.retrieval.mcp_server import build_server


def _serve_cmd(index, *extra):
    return [sys.executable, "-m", "agentrl.cli", "serve", "--index", str(index), *extra]


async def _exercise(client):
    tools = await client.list_tools()
    assert [t.name for t in tools.tools] == ["search"]
    r = await client.call_tool("search", {"query": "Scott Derrickson director", "top_k": 3})
    assert not r.is_error
    hits = r.structured_content["result"]
    assert len(hits) == 3 and set(hits[0]) == {"id", "title", "text", "score"}
    assert any("Derrickson" in h["text"] for h in hits)
    bad = await client.call_tool("search", {"query": "", "top_k": 3})
    assert bad.is_error and "non-empty" in bad.content[0].text
    bad = await client.call_tool("search", {"query": "x", "top_k": 0})
    assert bad.is_error and "top_k" in bad.content[0].text
    bad = await client.call_tool("search", {"query": "x", "top_k": "many"})
    assert bad.is_error
    again = await client.call_tool("search", {"query": "Ed Wood film", "top_k": 2})  # still serving
    assert not again.is_error and len(again.structured_content["result"]) == 2


@pytest.mark.slow
def test_mcp_server_answers_a_real_client_over_stdio(small_index):
    from mcp import Client, StdioServerParameters

    cmd = _serve_cmd(small_index, "--transport", "stdio")

    async def main():
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as client:
            await _exercise(client)

    asyncio.run(main())


@pytest.mark.parametrize("mode, revision", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_mcp_server_answers_a_real_client_over_http_in_both_protocol_revisions(mcp_url, mode, revision):
    """The stateless 2026-07-28 revision (server/discover) and the 2025-11-25 handshake most clients still speak."""
    from mcp import Client

    async def main():
        async with Client(mcp_url, mode=mode) as client:
            assert client.protocol_version == revision
            await _exercise(client)

    asyncio.run(main())


def test_concurrent_http_clients_all_get_their_own_answers(mcp_url, small_retriever):
    from mcp import Client

    queries = ["Scott Derrickson", "Ed Wood", "Tyler Bates", "Doctor Strange", "Adam Collis", "Hellraiser"]
    expected = {q: small_retriever.search(q, 1)[0].id for q in queries}
    assert len(set(expected.values())) > 3

    async def one(q):
        async with Client(mcp_url) as client:
            r = await client.call_tool("search", {"query": q, "top_k": 1})
            return q, r.structured_content["result"][0]["id"]

    async def main():
        return await asyncio.gather(*(one(q) for q in queries * 3))

    results = asyncio.run(main())
    assert len(results) == 18
    for q, passage_id in results:
        assert passage_id == expected[q]


class CountingRetriever:
    """Wraps the real retriever to record the batch sizes the searcher sends."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def search_batch(self, queries, top_k, method=None):
        self.batches.append(len(queries))
        return self.inner.search_batch(queries, top_k, method)


def test_concurrent_calls_are_batched_not_queued_one_by_one(small_retriever):
    counting = CountingRetriever(small_retriever)
    searcher = BatchSearcher(counting)
    queries = [f"film director {i}" for i in range(40)]

    async def main():
        return await asyncio.gather(*(searcher.search(q, 2 + i % 3) for i, q in enumerate(queries)))

    results = asyncio.run(main())
    assert sum(counting.batches) == 40 and len(counting.batches) < 40 and max(counting.batches) > 1
    assert [len(r) for r in results] == [2 + i % 3 for i in range(40)]
    expected = small_retriever.search(queries[5], 4)
    assert [p.id for p in results[5]] == [h.id for h in expected[: 2 + 5 % 3]]


def test_in_process_server_reports_tool_errors_and_keeps_serving(small_retriever):
    from mcp import Client

    server = build_server(small_retriever, max_top_k=10)

    async def main():
        async with Client(server) as client:
            r = await client.call_tool("search", {"query": "x", "top_k": 11})
            assert r.is_error and "between 1 and 10" in r.content[0].text
            ok = await client.call_tool("search", {"query": "Ed Wood", "top_k": 10})
            assert not ok.is_error

    asyncio.run(main())


def test_remote_search_backend_shares_one_session_across_concurrent_episodes(mcp_url, small_retriever):
    from agentrl.envs.search.env import LocalSearch, MCPSearch, SearchEnv

    backend = MCPSearch(mcp_url)
    queries = ["Tyler Bates composer", "Ed Wood film", "Scott Derrickson", "Doctor Strange"] * 10

    async def main():
        envs = [SearchEnv(backend, top_k=2) for _ in queries]
        remote = await asyncio.gather(*(e.search(q) for e, q in zip(envs, queries, strict=True)))
        sessions = len(backend._sessions)
        await backend.aclose()
        after_close = await SearchEnv(backend, top_k=2).search("Ed Wood film")  # reconnects
        await backend.aclose()
        return remote, sessions, after_close

    remote, sessions, after_close = asyncio.run(main())
    local = LocalSearch(small_retriever)
    expected = [asyncio.run(SearchEnv(local, top_k=2).search(q)) for q in queries[:4]]
    assert sessions == 1
    assert remote == expected * 10 and after_close == expected[1]


def test_http_server_answers_a_bare_json_rpc_post_without_a_session(mcp_url):
    """Stateless JSON-response mode: a handshake-era client (protocol 2025-06-18) gets a tools/call answered in one
    POST with one JSON body, without initialize or a session id; a 2026-07-28 request likewise."""
    import json
    import urllib.request

    def post(body: dict, version: str) -> tuple[dict, dict]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": version}
        if version == "2026-07-28":  # its routing headers repeat the method and tool name
            headers.update({"mcp-method": body["method"], "mcp-name": body["params"]["name"]})
        req = urllib.request.Request(mcp_url, data=json.dumps(body).encode(), method="POST", headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.headers["content-type"].startswith("application/json")
            return json.loads(resp.read()), dict(resp.headers)

    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "Ed Wood film", "top_k": 2}}}
    reply, headers = post(call, "2025-06-18")
    assert reply["id"] == 7 and not reply["result"]["isError"]
    assert len(reply["result"]["structuredContent"]["result"]) == 2
    assert "mcp-session-id" not in {k.lower() for k in headers}
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    modern = {**call, "params": {**call["params"], "_meta": meta}}
    reply, _ = post(modern, "2026-07-28")
    assert reply["result"]["structuredContent"] == post(call, "2025-06-18")[0]["result"]["structuredContent"]
    bad = {**call, "params": {"name": "search", "arguments": {"query": "x" * 5000}}}
    reply, _ = post(bad, "2025-06-18")
    assert reply["result"]["isError"] and "query too long" in reply["result"]["content"][0]["text"]


MODERN = {"content-type": "application/json", "accept": "application/json, text/event-stream",
          "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "search",
          "host": "127.0.0.1:8765"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def _call(arguments: dict, call_id=1, **params) -> dict:
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
            "params": {"name": "search", "arguments": arguments, "_meta": META, **params}}


async def _post(app, body, headers: dict | list, chunks: int = 1) -> tuple:
    """POST ``body`` to an ASGI app; return (status, headers, body bytes) of its reply."""
    import json

    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    items = headers.items() if isinstance(headers, dict) else headers
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mcp", "raw_path": b"/mcp", "root_path": "", "query_string": b"",
             "headers": [(k.encode(), v.encode()) for k, v in items], "client": ("127.0.0.1", 5), "server": None}
    step = max(1, -(-len(raw) // chunks))
    messages = [{"type": "http.request", "body": raw[i:i + step], "more_body": i + step < len(raw)}
                for i in range(0, max(len(raw), 1), step)]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], sorted(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_fast_path_writes_the_sdk_reply_byte_for_byte_and_leaves_every_other_request_to_it(small_retriever):
    """Every request goes to the fast path and to the bare SDK app; their replies must be identical. The fast path
    answers only the well-formed search calls and hands the rest (refused arguments, other methods, bad headers
    or envelopes) to the SDK with the body replayed."""
    from agentrl.retrieval.mcp_server import http_app

    fast = http_app(small_retriever, max_top_k=10)
    sdk = fast.app
    answered = [  # (body, headers): calls the fast path answers itself
        (_call({"query": "Ed Wood film", "top_k": 2}), MODERN),
        (_call({"query": "Scott Derrickson"}), MODERN),  # top_k defaults to 5
        (_call({"query": "Doctor Strange", "top_k": 10}, call_id="req-ü-7"), MODERN),
        (_call({"query": "Tyler Bates \"composer\"\n\t é 中文 😀", "top_k": 3}, call_id=2**70), MODERN),
        (_call({"query": "x" * 2000, "top_k": 1}), MODERN),  # at the length limit
        (_call({"query": "Ed Wood"}), {**MODERN, "accept": "*/*"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "origin": "http://localhost:3000"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "content-type": "application/json; charset=utf-8"}),
    ]
    refused_headers = {k: v for k, v in MODERN.items() if k != "mcp-name"}
    delegated = [
        (_call({"query": "", "top_k": 2}), MODERN),
        (_call({"query": "   "}), MODERN),
        (_call({"query": "x" * 2001}), MODERN),
        (_call({"query": "Ed Wood", "top_k": 0}), MODERN),
        (_call({"query": "Ed Wood", "top_k": 11}), MODERN),
        (_call({"query": "Ed Wood", "top_k": "5"}), MODERN),
        (_call({"query": "Ed Wood", "top_k": 5.0}), MODERN),
        (_call({"query": "Ed Wood", "top_k": True}), MODERN),
        (_call({"query": 42}), MODERN),
        (_call({"query": "Ed Wood", "k": 2}), MODERN),
        (_call({}), MODERN),
        (_call({"query": "Ed Wood"}, call_id=1.5), MODERN),
        (_call({"query": "Ed Wood"}, call_id=None), MODERN),
        (_call({"query": "Ed Wood"}, extra=1), MODERN),
        ({"jsonrpc": "2.0", "method": "tools/call", "params": _call({"query": "x"})["params"]}, MODERN),
        ([_call({"query": "Ed Wood"})], MODERN),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {', MODERN),
        (_call({"query": "Ed Wood"}, name="other"), MODERN),
        ({**_call({"query": "Ed Wood"}), "params": {"name": "search", "arguments": {"query": "Ed Wood"}}}, MODERN),
        (_call({"query": "Ed Wood"}, _meta={**META, "io.modelcontextprotocol/protocolVersion": "2025-06-18"}), MODERN),
        (_call({"query": "Ed Wood"}, _meta={**META, "io.modelcontextprotocol/clientCapabilities": "x"}), MODERN),
        (_call({"query": "Ed Wood"}, _meta={**META, "io.modelcontextprotocol/clientInfo": {"name": 1}}), MODERN),
        (_call({"query": "Ed Wood"}), refused_headers),
        (_call({"query": "Ed Wood"}), {**MODERN, "mcp-name": "other"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "mcp-method": "tools/list"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "mcp-protocol-version": "2025-06-18"}),
        (_call({"query": "Ed Wood"}), [*MODERN.items(), ("mcp-name", "search")]),
        (_call({"query": "Ed Wood"}), {**MODERN, "mcp-param-query": "Ed Wood"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "host": "evil.example:80"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "origin": "http://evil.example"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "content-type": "text/plain"}),
        (_call({"query": "Ed Wood"}), {**MODERN, "accept": "text/event-stream"}),
        ({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": META}},
         {**MODERN, "mcp-method": "tools/list"}),
    ]

    async def main():
        async with sdk.router.lifespan_context(sdk):
            for i, (body, headers) in enumerate(answered + delegated):
                before = fast.answered
                mine = await _post(fast, body, headers, chunks=1 + i % 3)
                ref = await _post(sdk, body, headers)
                assert mine == ref, (i, body, mine, ref)
                assert fast.answered - before == (i < len(answered)), (i, body, mine)
                if i < len(answered):
                    assert mine[0] == 200 and b'"isError":false' in mine[2]

    asyncio.run(main())


def test_the_fast_paths_encoded_results_are_one_per_hit_list_and_bounded(monkeypatch):
    from types import SimpleNamespace

    from agentrl.retrieval import mcp_fast
    from agentrl.retrieval.mcp_server import Passage

    monkeypatch.setattr(mcp_fast, "RESULT_CACHE", 2)
    fp = mcp_fast.SearchFastPath(None, None, Passage, path="/mcp", server_info={"name": "s", "version": "1"},
                                 security=None, max_body=1000, max_top_k=5, max_query_chars=100)

    def hit(i, score=0.5):
        return SimpleNamespace(id=f"d{i}", title=f"T{i}", text=f"text {i}", score=score)

    lists = [[hit(1)], [hit(2)], [hit(1), hit(2)], [hit(1, score=0.25)]]  # the last differs from the first by score
    replies = [fp._reply(n, hits) for n, hits in enumerate(lists)]
    assert len(fp._results) == 2  # the oldest results were dropped
    for n, (hits, reply) in enumerate(zip(lists, replies, strict=True)):
        fresh = json.loads(fp._reply(n, hits))  # encoded again or read from the cache: the same reply
        assert json.loads(reply) == fresh and fresh["id"] == n
        assert [p["score"] for p in fresh["result"]["structuredContent"]["result"]] == [h.score for h in hits]


def _blocked_embedder_index(small_index, tmp_path):
    """Return ``(index, fifo, modules)``: a copy of ``small_index`` whose embedder is a copy of MiniLM with its
    ``modules.json`` replaced by a named pipe, so loading the embedder blocks until the test writes ``modules`` (the
    real file's text) or something else into it."""
    import os
    import shutil

    from agentrl.retrieval.dense import resolve_embedder

    model = tmp_path / "minilm"
    shutil.copytree(resolve_embedder("minilm"), model)
    modules = (model / "modules.json").read_text()
    (model / "modules.json").unlink()
    os.mkfifo(model / "modules.json")
    index = tmp_path / "index"
    shutil.copytree(small_index, index)
    meta = json.loads((index / "index.json").read_text())
    meta["embedder"] = meta["config"]["dense"]["embedder"] = str(model)
    (index / "index.json").write_text(json.dumps(meta))
    return index, model / "modules.json", modules


def _rpc(url: str, method: str, params: dict, timeout: float):
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}).encode()
    headers = {**MODERN, "mcp-method": method, "host": url.split("/")[2]}
    if method != "tools/call":
        headers.pop("mcp-name")
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=timeout) as r:
        return json.loads(r.read())


def test_the_http_server_answers_tools_list_before_its_embedder_loads_and_a_search_waits_for_it(small_index,
                                                                                               tmp_path):
    import concurrent.futures

    from conftest import free_port, start_process, stop_process

    index, fifo, modules = _blocked_embedder_index(small_index, tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    proc = start_process([sys.executable, "-m", "agentrl.cli", "serve", "--index", str(index), "--transport", "http",
                          "--port", str(port)], port)
    try:
        listed = _rpc(url, "tools/list", {}, timeout=30)  # the embedder is still blocked on its modules.json
        assert [t["name"] for t in listed["result"]["tools"]] == ["search"]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            search = pool.submit(_rpc, url, "tools/call", {"name": "search", "arguments": {"query": "Ed Wood"}}, 120)
            done, _ = concurrent.futures.wait([search], timeout=3)
            assert not done  # the search waits for the embedder
            fifo.write_text(modules)  # the embedder loads
            hits = search.result(timeout=120)["result"]["structuredContent"]["result"]
        assert hits and all(h["text"] for h in hits)
    finally:
        stop_process(proc)


def test_an_embedder_that_cannot_load_ends_the_http_server_with_exit_2_and_its_error(small_index, tmp_path):
    from conftest import free_port, start_process

    index, fifo, _ = _blocked_embedder_index(small_index, tmp_path)
    port = free_port()
    proc = start_process([sys.executable, "-m", "agentrl.cli", "serve", "--index", str(index), "--transport", "http",
                          "--port", str(port)], port)
    fifo.write_text("{ not json")  # the warm-up fails: the server stops instead of serving without search
    assert proc.wait(timeout=120) == 2
    assert "the retriever could not search" in proc.stderr.read()
