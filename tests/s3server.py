"""A real S3 endpoint on loopback for tests: moto's server mode in a subprocess.

`S3Server` starts the server on 127.0.0.1 on a free port, waits (with a deadline) until it accepts
connections, and can be stopped and started again on the same port to simulate an outage. moto
keeps its state in memory, so a restarted server has forgotten every bucket; `start(buckets=...)`
creates buckets *before* the port opens, so that a client retrying through an outage never sees a
window in which the endpoint answers but its bucket does not exist yet.

Run as a script this file is the subprocess itself (`python tests/s3server.py --port N`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from loopback import HOST, free_port  # as a script too: tests/ is then its own directory
from server_process import ServerProcess

# moto accepts any credentials unless authentication is switched on (see `enable_auth`).
BOOTSTRAP_CREDENTIALS = {"aws_access_key_id": "bootstrap", "aws_secret_access_key": "bootstrap"}


def new_bucket_name() -> str:
    """A bucket name no other test uses."""
    return f"rollout-test-{uuid.uuid4().hex[:12]}"


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            return not is_self_connection(sock)
    except OSError:
        return False


def is_self_connection(sock: socket.socket) -> bool:
    """Whether `sock` is connected to itself: with nothing listening on a loopback port, a
    connect whose ephemeral port happens to be that same port meets itself (TCP's simultaneous
    open) and succeeds, which is no server's answer."""
    return bool(sock.getsockname() == sock.getpeername())


class S3Server:
    """moto's S3 server in a subprocess on a fixed loopback port, restartable."""

    def __init__(self, port: int | None = None, *, log_dir: Path | None = None) -> None:
        self.port = port if port is not None else free_port()
        self._log_dir = log_dir or Path(tempfile.mkdtemp(prefix="s3server-"))
        self._server = ServerProcess(
            f"the S3 server on port {self.port}", self._log_dir / f"moto-{self.port}.log"
        )

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server.running

    def start(
        self, buckets: Iterable[str] = (), region: str = "us-east-1", timeout: float = 30.0
    ) -> None:
        """Start the server with `buckets` already created; return once it accepts connections."""
        command = [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port)]
        command += ["--region", region]
        for bucket in buckets:
            command += ["--bucket", bucket]
        self._server.start(
            command, lambda: _accepts_connections(self.port), timeout=timeout, until="open"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server; afterwards connections to its port are refused."""
        self._server.stop(timeout)

    def restart(self, buckets: Iterable[str] = (), region: str = "us-east-1") -> None:
        self.stop()
        self.start(buckets, region)

    def enable_auth(self) -> None:
        """From now on the server checks signatures against the IAM users it knows.

        Create the IAM user and its access key before calling this: afterwards every request,
        IAM ones included, must be signed by a known key with a policy that allows it.
        """
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            # Not form-encoded, or the server reads the body as a form and finds no count.
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            json.loads(response.read())

    def log_tail(self, lines: int = 40) -> str:
        return self._server.log_tail(lines)

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def running_s3_server(buckets: Iterable[str] = ()) -> Iterator[S3Server]:
    server = S3Server()
    server.start(buckets)
    try:
        yield server
    finally:
        server.stop()


def _serve(port: int, buckets: list[str], region: str) -> None:
    """The subprocess: create the buckets in moto's memory, then listen on `port` until SIGTERM."""
    import boto3
    from moto.server import ThreadedMotoServer

    # moto's backends are process-wide, so buckets created through a private server on an
    # ephemeral port exist on the public one too, and the public port opens only when they do.
    if buckets:
        private = ThreadedMotoServer(HOST, 0, verbose=False)
        private.start()
        private_host, private_port = private.get_host_and_port()
        client = boto3.client(
            "s3",
            endpoint_url=f"http://{private_host}:{private_port}",
            region_name=region,
            **BOOTSTRAP_CREDENTIALS,
        )
        for bucket in buckets:
            if region == "us-east-1":
                client.create_bucket(Bucket=bucket)
            else:
                client.create_bucket(
                    Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region}
                )
        private.stop()

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    server = ThreadedMotoServer(HOST, port, verbose=False)
    server.start()
    print(f"moto S3 server listening on {HOST}:{port}", flush=True)
    stopped.wait()
    server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[])
    parser.add_argument("--region", default="us-east-1")
    args = parser.parse_args(argv)
    # The server never calls out, but a proxy set in the environment must not catch loopback.
    os.environ.setdefault("NO_PROXY", HOST)
    _serve(args.port, args.bucket, args.region)


if __name__ == "__main__":
    main()
