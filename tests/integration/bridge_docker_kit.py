"""The test engine (`engine_kit`) as the bridge's docker provider reaches an engine: over TCP,
and over TCP with TLS.

The provider takes only remote addresses (tcp://, ssh://), and the test engine is usually
Podman's API service on a unix socket: `UnixForwarder` listens on a loopback port and relays
each connection to the socket, byte for byte (the Engine API's hijacked exec streams included).
With `tls`, it is what `dockerd --tlsverify` is: TLS on that port, a client certificate signed
by the engine's CA required (`engine_tls` makes the CA, the server's and the client's
certificates, the client's in the three files docker-py reads from DOCKER_CERT_PATH).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from engine_kit import EngineUnderTest


@dataclass(frozen=True)
class EngineTls:
    """An engine's TLS: its server context, and the client's files (ca.pem, cert.pem, key.pem)."""

    server: ssl.SSLContext
    client_dir: Path


def engine_tls(directory: Path) -> EngineTls:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    now = datetime.datetime.now(datetime.UTC)

    def certificate(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, Any] | None
    ) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        issuer_name, issuer_key = issuer or (name, key)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
        )
        if subject == "engine":
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = certificate("engine-ca", ca_key, None)
    signed_by_ca = (ca.subject, ca_key)
    server = certificate("engine", server_key, signed_by_ca)
    client = certificate("bridge", client_key, signed_by_ca)
    server_dir, client_dir = directory / "server", directory / "client"
    for place in (server_dir, client_dir):
        place.mkdir(parents=True)
        (place / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (server_dir / "cert.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (server_dir / "key.pem").write_bytes(pem(server_key))
    (client_dir / "cert.pem").write_bytes(client.public_bytes(serialization.Encoding.PEM))
    (client_dir / "key.pem").write_bytes(pem(client_key))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=server_dir / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED  # --tlsverify: no client certificate, no engine
    context.load_cert_chain(server_dir / "cert.pem", server_dir / "key.pem")
    return EngineTls(context, client_dir)


class UnixForwarder:
    """Relays connections to a loopback TCP port to a unix socket, until closed (with `tls`:
    each connection's TLS handshake first, a client certificate required)."""

    def __init__(self, socket_path: Path, tls: ssl.SSLContext | None = None) -> None:
        self.socket_path = socket_path
        self.tls = tls
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            if self.tls is not None:
                threading.Thread(target=self._handshake, args=(client,), daemon=True).start()
                continue
            self._relay(client)

    def _handshake(self, client: socket.socket) -> None:
        assert self.tls is not None
        try:
            secured = self.tls.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            client.close()  # no certificate, or not one of the CA's: refused, as dockerd does
            return
        upstream = self._upstream(secured)
        if upstream is not None:
            self._pump_tls(secured, upstream)

    def _relay(self, client: socket.socket) -> None:
        upstream = self._upstream(client)
        if upstream is not None:
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _upstream(self, client: socket.socket) -> socket.socket | None:
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(str(self.socket_path))
        except OSError:
            client.close()
            upstream.close()
            return None
        with self._lock:
            self._open.update((client, upstream))
        return upstream

    @staticmethod
    def _pump_tls(client: ssl.SSLSocket, upstream: socket.socket) -> None:
        """Both directions in one thread: an SSL socket must not be read and written by two
        threads at once."""
        reading = {client, upstream}
        try:
            while reading:
                ready = [client] if client in reading and client.pending() else []
                if not ready:
                    ready, _, _ = select.select(list(reading), [], [])
                for source in ready:
                    sink = upstream if source is client else client
                    data = source.recv(65536)
                    if data:
                        sink.sendall(data)
                    elif source is client:  # the bridge is done asking: let the engine finish
                        reading.discard(client)
                        upstream.shutdown(socket.SHUT_WR)
                    else:  # the engine is done answering
                        return
        except OSError:
            pass
        finally:
            for end in (client, upstream):
                with contextlib.suppress(OSError):
                    end.close()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()
        with self._lock:
            for end in self._open:
                end.close()
            self._open.clear()


@contextlib.contextmanager
def tcp_address(engine: EngineUnderTest, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """A tcp:// address of the test engine: its own, or a forwarder's to its unix socket (with
    `tls`, always a forwarder's, which serves TLS)."""
    host = engine.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("tcp://") and tls is None:
        yield host
        return
    if not host.startswith("unix://"):
        pytest.skip(f"the test engine at {host} is reachable neither over tcp nor a unix socket")
    forwarder = UnixForwarder(Path(host.removeprefix("unix://")), tls)
    try:
        yield forwarder.address
    finally:
        forwarder.close()
