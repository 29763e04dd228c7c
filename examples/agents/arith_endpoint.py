"""An agent endpoint (seed 003's contract) for the example arithmetic benchmark: it reads the
question of each attempt ("What is 7 * 9?"), answers it, and scores its own answer. Standard
library only; a real agent would call its model here and instrument the call with the trace id
the payload brings (`attempt.traceId`, also in the `traceparent` header).

    AGENT_RUN_TOKEN=dev-token python3 examples/agents/arith_endpoint.py [--port 8765]

With AGENT_RUN_TOKEN set, requests without `Authorization: Bearer <token>` get 401.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUESTION = re.compile(r"What is (\d+) ([+*]) (\d+)\?")


def answer(instruction: str) -> str | None:
    match = QUESTION.search(instruction)
    if match is None:
        return None
    a, op, b = int(match[1]), match[2], int(match[3])
    return str(a + b if op == "+" else a * b)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        token = os.environ.get("AGENT_RUN_TOKEN")
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            self.reply(401, {"detail": "unauthorized"})
            return
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        output = answer(payload["task"]["instruction"])
        trace = payload["attempt"]["traceId"]
        print(f"attempt {payload['attempt']['id']} (trace {trace}): {output}", flush=True)
        if output is None:
            self.reply(200, {"output": "I don't know", "passed": False})
        else:
            self.reply(200, {"output": output, "score": {"score": 1.0}, "passed": True})

    def reply(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # one line per attempt is printed above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"listening on http://{args.host}:{server.server_address[1]}/rollout/eval", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
