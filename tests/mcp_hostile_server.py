"""A hand-written MCP server over stdio (newline-delimited JSON-RPC, the 2025-11-25 handshake; ``server/discover``
is answered "method not found", so a client falls back to ``initialize``) whose tools are whatever a spec file says:
awkward names, nested schemas, non-BMP text, huge descriptions. Every tool answers with its name and the arguments
it received (``{"tool": ..., "arguments": ...}``), so a test sees exactly what went out. Modes, by tool name:

- ``leak``: answers with the value of the environment variable named by its ``variable`` argument, and also marks
  the answer ``isError`` when ``error`` is true (a server echoing its environment);
- a spec's ``"stderr"`` text is written to stderr at start (``$TOKEN``: the variable's value), and ``"exit": N``
  makes the server exit with N before answering anything (a server that fails to start), from its
  ``"exit_from_start"``-th start on (counted in the spec's ``"starts_file"``; default: the first);
- ``counter``: answers how many times it has been called by this server process (a check that changes state);
  ``zero`` sets that count back to 0 (a server's own reset);
- ``"hang": "start"`` never reads its stdin, ``"hang": "list"`` never answers ``tools/list``, ``"hang": "call"``
  never answers a ``tools/call`` (it goes on reading: a later request would be answered);
- ``"child": true`` starts a child process (a sleeping Python naming the spec file) that outlives the server, which
  itself exits as soon as its stdin closes: whoever closes the server must end its process group.

    python tests/mcp_hostile_server.py SPEC.json
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if spec.get("stderr"):
        print(spec["stderr"].replace("$TOKEN", os.environ.get("TOKEN", "")), file=sys.stderr, flush=True)
    starts = 1
    if spec.get("starts_file"):
        counter = Path(spec["starts_file"])
        starts = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(starts))
    if "exit" in spec and starts >= spec.get("exit_from_start", 1):
        sys.exit(spec["exit"])
    if spec.get("child"):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if spec.get("hang") == "start":
        time.sleep(600)
    calls: dict[str, int] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg:  # a notification (initialized, cancelled): nothing to answer
            continue
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", "2025-11-25"), "capabilities": {"tools": {}},
                      "serverInfo": {"name": "hostile", "version": "1"}}
        elif method == "tools/list":
            if spec.get("hang") == "list":
                continue
            result = {"tools": spec["tools"]}
        elif method == "tools/call":
            if spec.get("hang") == "call":
                continue
            name, arguments = params.get("name"), params.get("arguments") or {}
            if name == "big":  # a result of arguments["size"] characters
                result = {"content": [{"type": "text", "text": "x" * int(arguments.get("size", 0))}], "isError": False}
            elif name == "zero":
                calls["counter"] = 0
                result = {"content": [{"type": "text", "text": "reset"}], "isError": False}
            elif name == "counter":
                calls["counter"] = calls.get("counter", 0) + 1
                result = {"content": [{"type": "text", "text": str(calls["counter"])}], "isError": False}
            elif name == "leak":
                value = os.environ.get(arguments.get("variable", ""), "")
                result = {"content": [{"type": "text", "text": f"the value is {value}"}],
                          "isError": bool(arguments.get("error"))}
            else:
                text = json.dumps({"tool": name, "arguments": arguments}, ensure_ascii=False, sort_keys=True)
                result = {"content": [{"type": "text", "text": text}], "isError": False}
        elif method == "ping":
            result = {}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"no method {method}"}}
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
