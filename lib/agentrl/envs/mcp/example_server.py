"""A small MCP server over stdio, the runnable example of training on an MCP server (configs/mcp_example.toml,
docs/environments.md "Train on your MCP server"): a notebook of short notes under keys, with tools to read, write,
list and count them. Every episode gets a fresh process, so every episode starts from the same notes.

    python -m agentrl.envs.mcp.example_server        # speaks MCP on stdin/stdout
"""

from __future__ import annotations

NOTES = {"capital": "Paris", "river": "Seine", "color": "green", "fruit": "apple", "planet": "Mars",
         "metal": "iron", "tree": "oak"}


def main() -> None:
    """Run the notes server on stdio until its client closes the connection."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    notes = dict(NOTES)
    server = MCPServer(name="notes", instructions="Notes are short texts stored under a key.")

    @server.tool()
    def read_note(key: str) -> str:
        """Read the note stored under a key."""
        if key not in notes:
            raise ToolError(f"no note under {key!r} (keys: {', '.join(sorted(notes))})")
        return notes[key]

    @server.tool()
    def write_note(key: str, text: str) -> str:
        """Store a note under a key, replacing what was there."""
        notes[key] = text
        return f"stored {len(text)} characters under {key}"

    @server.tool()
    def list_keys() -> str:
        """List the keys that hold a note, in alphabetical order."""
        return ", ".join(sorted(notes))

    @server.tool()
    def count(prefix: str = "") -> int:
        """Count the notes whose key starts with a prefix."""
        return sum(k.startswith(prefix) for k in notes)

    server.run("stdio")


if __name__ == "__main__":
    main()
