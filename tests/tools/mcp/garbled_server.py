"""A stdio MCP server that speaks JSON-RPC by hand (standard library only), to break it on
purpose: its one tool, `garble`, answers a call with a line that is not JSON-RPC and then
nothing at all; `echo` answers properly (the session must go on after the garbage).
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {"name": "garble", "description": "Answer with garbage.",
     "inputSchema": {"type": "object", "properties": {}},
     "annotations": {"readOnlyHint": True}},
    {"name": "echo", "description": "Echo the text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
     "annotations": {"readOnlyHint": True}},
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, ident = message.get("method"), message.get("id")
        if ident is None:  # a notification
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": ident, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "garbled", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": TOOLS}})
        elif method == "tools/call" and message["params"]["name"] == "garble":
            sys.stdout.write("this is {not JSON-RPC at all\n")
            sys.stdout.flush()
        elif method == "tools/call":
            text = message["params"].get("arguments", {}).get("text", "")
            send({"jsonrpc": "2.0", "id": ident, "result": {
                "content": [{"type": "text", "text": f"echo: {text}"}], "isError": False}})
        else:  # server/discover and the rest: the client falls back to the handshake
            send({"jsonrpc": "2.0", "id": ident,
                  "error": {"code": -32601, "message": f"method not found: {method}"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
