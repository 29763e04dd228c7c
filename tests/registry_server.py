"""A real OCI registry on loopback for tests: Debian's `docker-registry` (distribution 2.x).

`RegistryServer` writes a config for a fresh storage directory and a free port on 127.0.0.1,
starts `docker-registry serve` and waits (with a deadline) until `/v2/` answers. It serves plain
HTTP, anonymously, or behind htpasswd Basic auth (`users`), or behind a token service
(`token_auth`: the registry checks the JWTs another server issues, as Docker Hub's does).

The htpasswd file needs bcrypt hashes (the registry refuses any other kind). They come from
Python's `bcrypt`, in the `dev` extra: pip installs it wherever the tests run, without another
system package (apache2-utils' `htpasswd -B`) whose absence would skip the auth tests.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import bcrypt
import yaml

from loopback import HOST, free_port
from server_process import ServerProcess

DOCKER_REGISTRY = "docker-registry"
DOCKER_REGISTRY_PACKAGE = "docker-registry"
START_TIMEOUT_SEC = 30.0


def registry_unavailable_reason() -> str | None:
    """Why no registry can be started here, or None when one can."""
    if shutil.which(DOCKER_REGISTRY) is None:
        return f"docker-registry is not installed (Debian package {DOCKER_REGISTRY_PACKAGE})"
    return None


@dataclass(frozen=True)
class TokenAuth:
    """The registry's side of token auth: where clients get tokens (`realm`), the audience the
    tokens must name (`service`), their issuer, and the certificates that sign them (PEM)."""

    realm: str
    service: str
    issuer: str
    root_certificates: Path


def htpasswd_line(user: str, password: str) -> str:
    """One htpasswd entry with a bcrypt hash (cost 4, the least: tests need no strength)."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    return f"{user}:{hashed}\n"


def _answers(url: str) -> bool:
    """Whether an HTTP server answers at `url`, whatever its status (401 is an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


class RegistryServer:
    """`docker-registry serve` on 127.0.0.1, a free port and a storage directory of its own."""

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        users: Mapping[str, str] | None = None,
        token_auth: TokenAuth | None = None,
        port: int | None = None,
    ) -> None:
        if users and token_auth:
            raise ValueError("a registry has one kind of auth: users (htpasswd) or token_auth")
        self.port = port if port is not None else free_port()
        self._own_workdir = workdir is None
        self._workdir = workdir or Path(tempfile.mkdtemp(prefix="registry-"))
        self._users = dict(users or {})
        self._token_auth = token_auth
        self._server = ServerProcess(f"the registry on {self.host}", self.log_path)

    @property
    def host(self) -> str:
        """host:port, as image references name the registry."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def storage(self) -> Path:
        return self._workdir / "storage"

    @property
    def log_path(self) -> Path:
        return self._workdir / "registry.log"

    @property
    def running(self) -> bool:
        return self._server.running

    def start(self, timeout: float = START_TIMEOUT_SEC) -> None:
        """Start the registry; return once `/v2/` answers."""
        reason = registry_unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        config = self._write_config()
        self._server.start(
            [DOCKER_REGISTRY, "serve", str(config)],
            lambda: _answers(f"{self.url}/v2/"),
            timeout=timeout,
            until="answer",
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the registry (SIGTERM, then SIGKILL after `timeout`); its port is then closed."""
        self._server.stop(timeout)

    def log_tail(self, lines: int = 40) -> str:
        return self._server.log_tail(lines)

    def _write_config(self) -> Path:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        config: dict[str, object] = {
            "version": 0.1,
            "log": {"level": "info", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.storage)},
                "delete": {"enabled": True},
                # No background work: the registry only answers requests.
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {"addr": self.host, "secret": secrets.token_hex(16)},
        }
        auth = self._auth_config()
        if auth:
            config["auth"] = auth
        path = self._workdir / "config.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _auth_config(self) -> dict[str, object]:
        if self._users:
            htpasswd = self._workdir / "htpasswd"
            htpasswd.write_text("".join(htpasswd_line(u, p) for u, p in self._users.items()))
            return {"htpasswd": {"realm": "rollout-test-registry", "path": str(htpasswd)}}
        if self._token_auth is not None:
            token = self._token_auth
            return {
                "token": {
                    "realm": token.realm,
                    "service": token.service,
                    "issuer": token.issuer,
                    "rootcertbundle": str(token.root_certificates),
                }
            }
        return {}

    def __enter__(self) -> RegistryServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop; a working directory the server made itself is removed (one it was given is
        left for the test's own clean-up, logs and all)."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
