"""A small MCP server over stdio for tests (the mcp SDK's MCPServer): a key-value notebook with tools of several
argument types, an image tool, a tool that fails, and two faults a test turns on by argument: ``crash`` (the process
exits mid-call) and ``hang`` (the call never returns).

    python tests/mcp_stdio_server.py [--state FILE]     # the notes persist in FILE (default: in memory)
"""

import argparse
import base64
import json
import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--state", help="JSON file holding the notes")
    args = p.parse_args()
    state = Path(args.state) if args.state else None
    notes: dict[str, str] = json.loads(state.read_text()) if state and state.exists() else {"capital": "Paris"}
    server = MCPServer(name="notes", instructions="Notes are short texts stored under a key.")

    def save() -> None:
        if state is not None:
            state.write_text(json.dumps(notes))

    @server.tool()
    def read_note(key: str) -> str:
        """Read the note stored under a key 🔍 (a non-BMP character: tokenizers must see it whole)."""
        if key not in notes:
            raise ToolError(f"no note under {key!r} (keys: {', '.join(sorted(notes))})")
        return notes[key]

    @server.tool(name="write-note")
    def write_note(key: str, text: str, repeat: int = 1) -> str:
        """Store a note under a key (replacing what was there)."""
        notes[key] = text * repeat
        save()
        return f"stored {len(notes[key])} characters under {key}"

    @server.tool()
    def count(prefix: str = "", case_sensitive: bool = True) -> int:
        """Count the notes whose key starts with a prefix."""
        keys = notes if case_sensitive else [k.lower() for k in notes]
        return sum(k.startswith(prefix if case_sensitive else prefix.lower()) for k in keys)

    @server.tool()
    def picture() -> ImageContent:
        """A small picture of the notebook."""
        return ImageContent(type="image", data=base64.b64encode(b"\x89PNG" + b"0" * 96).decode(), mime_type="image/png")

    @server.tool()
    def fault(kind: str) -> str:
        """Misbehave on purpose: kind is crash (the server exits) or hang (the call never returns)."""
        if kind == "crash":
            os._exit(3)
        if kind == "hang":
            time.sleep(3600)
        return "no fault"

    server.run("stdio")


if __name__ == "__main__":
    main()
