"""The registry client against a real registry (Debian's docker-registry) on loopback.

Images are pushed with buildah (`buildah_kit.push_base_image`), and the client must find them
with the digest the push reported, or say None when a tag or repository is missing. Behind
htpasswd Basic auth, and behind a token service (the registry checks the tokens, the service
is the test's double below: it signs JWTs the registry trusts), it must get in with the right
credentials, and otherwise raise a RegistryError saying access was refused. A port nobody
listens on, and https to the plain-HTTP registry, must fail within seconds.

Tests skip, saying why, where docker-registry or buildah is missing.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from buildah_kit import (
    base_image_unavailable_reason,
    build,
    buildah_store,
    push_base_image,
)
from loopback import HOST, free_port
from registry_server import RegistryServer, TokenAuth, registry_unavailable_reason
from rollout.api.imageref import ImageReference, parse_image_reference
from rollout.controller.registry import DockerConfig, RegistryClient, RegistryError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        registry_unavailable_reason() is not None, reason=str(registry_unavailable_reason())
    ),
]

USER = "builder"
PASSWORD = "registry-test-pw-7d1e0c-never-print-me"
TOKEN_SERVICE = "rollout-test-registry"
TOKEN_ISSUER = "rollout-test-token-service"


def needs_base_image() -> None:
    reason = base_image_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def docker_config(registry_host: str, user: str = USER, password: str = PASSWORD) -> DockerConfig:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return DockerConfig.from_json(json.dumps({"auths": {registry_host: {"auth": auth}}}))


def ref(registry: RegistryServer, name: str) -> ImageReference:
    return parse_image_reference(f"{registry.host}/{name}")


# --- an anonymous registry --------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A registry anyone may read and write, for the module."""
    with RegistryServer(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="module")
def pushed(registry: RegistryServer) -> str:
    """The digest of `base/busybox:v1`, as buildah's push reported it."""
    needs_base_image()
    return push_base_image(registry.host, "base/busybox:v1")


@pytest.fixture
def client() -> Iterator[RegistryClient]:
    with RegistryClient(plain_http=True, timeout=5.0) as plain:
        yield plain


def test_a_pushed_image_is_found_with_the_digest_its_push_reported(
    registry: RegistryServer, pushed: str, client: RegistryClient
) -> None:
    assert pushed.startswith("sha256:")
    assert client.manifest_digest(ref(registry, "base/busybox:v1")) == pushed


def test_an_image_is_found_by_its_digest_and_an_unknown_digest_is_not(
    registry: RegistryServer, pushed: str, client: RegistryClient
) -> None:
    image = ref(registry, "base/busybox")
    assert client.manifest_digest(image.with_digest(pushed)) == pushed
    assert client.manifest_digest(image.with_digest("sha256:" + "0" * 64)) is None


def test_a_missing_tag_is_none(
    registry: RegistryServer, pushed: str, client: RegistryClient
) -> None:
    assert client.manifest_digest(ref(registry, "base/busybox:v1").with_tag("v2")) is None


def test_a_missing_repository_is_none(registry: RegistryServer, client: RegistryClient) -> None:
    assert client.manifest_digest(ref(registry, "nobody/pushed-this:v1")) is None
    assert client.manifest_digest(ref(registry, "never-pushed")) is None  # asks for :latest


def test_https_to_the_plain_http_registry_fails_at_once_saying_so(
    registry: RegistryServer,
) -> None:
    started = time.monotonic()
    with (
        RegistryClient(timeout=5.0) as https,
        pytest.raises(RegistryError, match="cannot be reached") as raised,
    ):
        https.manifest_digest(ref(registry, "base/busybox:v1"))
    assert time.monotonic() - started < 5.0
    assert f"registry {registry.host}" in str(raised.value)
    assert "TLS" in str(raised.value)


def test_an_unreachable_registry_is_retried_then_reported_within_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nothing listens on it
    caplog.set_level(logging.WARNING, logger="rollout.controller.registry")
    started = time.monotonic()
    with (
        RegistryClient(plain_http=True, timeout=2.0, attempts=3) as plain,
        pytest.raises(RegistryError) as raised,
    ):
        plain.manifest_digest(parse_image_reference(f"{HOST}:{port}/app:v1"))
    assert time.monotonic() - started < 5.0
    assert str(raised.value).startswith(f"registry {HOST}:{port} cannot be reached: ")
    assert "Connection refused" in str(raised.value)
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2  # three attempts


def test_the_base_image_builds_a_dockerfile_with_run(
    registry: RegistryServer, pushed: str, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {registry.host}/base/busybox:v1\nRUN echo hi > /x\nRUN cat /x\n"
    )
    with buildah_store() as buildah:
        output = build(buildah, tmp_path, "rollout-test-built")
        assert "hi" in output.splitlines()
        assert buildah.run("images", "--quiet", "rollout-test-built").strip()


# --- htpasswd Basic auth ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A registry behind htpasswd Basic auth, knowing USER with PASSWORD."""
    with RegistryServer(
        tmp_path_factory.mktemp("basic-registry"), users={USER: PASSWORD}
    ) as server:
        yield server


@pytest.fixture(scope="module")
def basic_pushed(basic_registry: RegistryServer) -> str:
    needs_base_image()
    return push_base_image(basic_registry.host, "private/app:v1", credentials=(USER, PASSWORD))


def test_basic_auth_without_credentials_is_refused_saying_none_were_sent(
    basic_registry: RegistryServer,
) -> None:
    with (
        RegistryClient(plain_http=True) as anonymous,
        pytest.raises(RegistryError, match="refused access") as raised,
    ):
        anonymous.manifest_digest(ref(basic_registry, "private/app:v1"))
    message = str(raised.value)
    assert f"registry {basic_registry.host} refused access to repository 'private/app'" in message
    assert "no credentials were sent" in message


def test_basic_auth_with_the_right_credentials_finds_the_image(
    basic_registry: RegistryServer, basic_pushed: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = docker_config(basic_registry.host)
    with RegistryClient(config, plain_http=True) as authed:
        assert authed.manifest_digest(ref(basic_registry, "private/app:v1")) == basic_pushed
        assert authed.manifest_digest(ref(basic_registry, "private/app:v9")) is None
    assert PASSWORD not in caplog.text


def test_basic_auth_with_a_wrong_password_is_refused_saying_credentials_were_sent(
    basic_registry: RegistryServer,
) -> None:
    config = docker_config(basic_registry.host, password="wrong")
    with (
        RegistryClient(config, plain_http=True) as wrong,
        pytest.raises(RegistryError, match="refused access") as raised,
    ):
        wrong.manifest_digest(ref(basic_registry, "private/app:v1"))
    assert f"credentials for {basic_registry.host} were sent" in str(raised.value)
    assert "wrong" not in str(raised.value)


# --- token auth: the registry trusts the tokens of a token service ----------------------------


@dataclass
class TokenRequest:
    """What a client asked the token service for."""

    user: str | None
    service: str | None
    scopes: list[str]


@dataclass
class TokenService:
    """A double of a registry's token service: it checks Basic credentials and signs a JWT
    (ES256, its certificate in the header) granting the scopes asked for, which the real
    registry verifies against `certificate` (PEM)."""

    users: Mapping[str, str]
    workdir: Path
    token_field: str = "token"
    no_access_for: frozenset[str] = frozenset()
    requests: list[TokenRequest] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._certificate = _self_signed(self._key)
        self.certificate = self.workdir / "token-service.pem"
        self.certificate.write_bytes(self._certificate.public_bytes(serialization.Encoding.PEM))
        self._server = _TokenServer(self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def realm(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}/token"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def user_of(self, authorization: str | None) -> str | None:
        """The user whose Basic credentials `authorization` holds, or None; ValueError when
        they are wrong."""
        if authorization is None:
            return None
        scheme, _, encoded = authorization.partition(" ")
        user, _, password = base64.b64decode(encoded).decode().partition(":")
        if scheme.lower() != "basic" or self.users.get(user) != password:
            raise ValueError("wrong credentials")
        return user

    def token(self, user: str, scopes: list[str]) -> str:
        now = int(time.time())
        access = [] if user in self.no_access_for else [_access(scope) for scope in scopes]
        claims = {
            "iss": TOKEN_ISSUER,
            "sub": user,
            "aud": TOKEN_SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        der = self._certificate.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}
        signing_input = f"{_b64url(json.dumps(header))}.{_b64url(json.dumps(claims))}"
        r, s = decode_dss_signature(
            self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        )
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        token = f"{signing_input}.{_b64url(signature)}"
        self.issued.append(token)
        return token


def _b64url(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _access(scope: str) -> dict[str, Any]:
    """`repository:name:pull,push` as a token's access entry."""
    kind, _, rest = scope.partition(":")
    name, _, actions = rest.rpartition(":")
    return {"type": kind, "name": name, "actions": actions.split(",")}


def _self_signed(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TOKEN_ISSUER)])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


class _TokenServer(ThreadingHTTPServer):
    def __init__(self, service: TokenService) -> None:
        super().__init__((HOST, 0), _TokenHandler)
        self.service = service


class _TokenHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _TokenServer

    def do_GET(self) -> None:
        service = self.server.service
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path != "/token":
            self._answer(404, {"error": "not found"})
            return
        try:
            user = service.user_of(self.headers.get("Authorization"))
        except ValueError:
            user = None  # wrong credentials: refused like none
        scopes = query.get("scope", [])
        service.requests.append(TokenRequest(user, query.get("service", [""])[0] or None, scopes))
        if user is None:
            self._answer(401, {"error": "credentials required"})
            return
        token = service.token(user, scopes)
        self._answer(200, {service.token_field: token, "expires_in": 300})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


@pytest.fixture(scope="module")
def token_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenService]:
    service = TokenService(
        {USER: PASSWORD, "stranger": "pw"},
        tmp_path_factory.mktemp("token-service"),
        no_access_for=frozenset({"stranger"}),
    )
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def token_registry(
    tmp_path_factory: pytest.TempPathFactory, token_service: TokenService
) -> Iterator[RegistryServer]:
    """A registry that accepts only the token service's tokens."""
    auth = TokenAuth(token_service.realm, TOKEN_SERVICE, TOKEN_ISSUER, token_service.certificate)
    with RegistryServer(tmp_path_factory.mktemp("token-registry"), token_auth=auth) as server:
        yield server


@pytest.fixture(scope="module")
def token_pushed(token_registry: RegistryServer) -> str:
    needs_base_image()
    return push_base_image(token_registry.host, "team/app:v1", credentials=(USER, PASSWORD))


@pytest.mark.parametrize("token_field", ["token", "access_token"])
def test_a_bearer_challenge_is_met_with_a_token_for_pulling_the_repository(
    token_registry: RegistryServer,
    token_service: TokenService,
    token_pushed: str,
    token_field: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token_service.token_field = token_field
    token_service.requests.clear()
    caplog.set_level(logging.DEBUG)
    with RegistryClient(docker_config(token_registry.host), plain_http=True) as authed:
        assert authed.manifest_digest(ref(token_registry, "team/app:v1")) == token_pushed
    [asked] = token_service.requests
    assert asked == TokenRequest(USER, TOKEN_SERVICE, ["repository:team/app:pull"])
    assert PASSWORD not in caplog.text
    assert not any(token in caplog.text for token in token_service.issued)


def test_a_missing_image_behind_a_token_service_is_none(
    token_registry: RegistryServer, token_service: TokenService
) -> None:
    with RegistryClient(docker_config(token_registry.host), plain_http=True) as authed:
        assert authed.manifest_digest(ref(token_registry, "team/other:v1")) is None


def test_a_token_service_that_refuses_anonymous_clients_is_access_refused(
    token_registry: RegistryServer,
) -> None:
    with (
        RegistryClient(plain_http=True) as anonymous,
        pytest.raises(RegistryError, match="refused access") as raised,
    ):
        anonymous.manifest_digest(ref(token_registry, "team/app:v1"))
    assert "token service" in str(raised.value)
    assert "no credentials were sent" in str(raised.value)


def test_a_token_without_the_pull_right_is_access_refused(
    token_registry: RegistryServer, token_pushed: str
) -> None:
    config = docker_config(token_registry.host, user="stranger", password="pw")
    with (
        RegistryClient(config, plain_http=True) as stranger,
        pytest.raises(RegistryError, match="refused access") as raised,
    ):
        stranger.manifest_digest(ref(token_registry, "team/app:v1"))
    assert "HTTP 401" in str(raised.value)
    assert f"credentials for {token_registry.host} were sent" in str(raised.value)
