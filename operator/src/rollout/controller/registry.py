"""Whether a registry already has an image: an OCI Distribution "manifest HEAD".

Before the operator builds an environment image it asks the registry for
`<registry>/<repository>:<tag>`; when the manifest is there the build is skipped and the trial
runs the image by its digest. This module is that question, asked the way Docker and containerd
ask it:

- `HEAD /v2/<repository>/manifests/<tag or digest>`, accepting OCI and Docker manifests and
  indexes, answers 200 with the `Docker-Content-Digest` header (or a GET whose body's sha256 is
  the digest), or 404 when the image is not there;
- a 401 carries a `WWW-Authenticate` challenge: `Bearer` sends us to a token service for a
  token scoped to the repository (with the pull Secret's credentials when it has some), `Basic`
  wants the credentials themselves; the request is made once more with them;
- connection errors, timeouts, 429 and 5xx are retried briefly (tenacity), then reported as
  the registry not being reachable; a failed TLS handshake (https to a plain-HTTP registry) is
  reported at once, as retrying cannot help. Redirects are not followed: manifest and token
  endpoints answer directly, and a 3xx is reported as an unexpected answer.

Credentials come from a `kubernetes.io/dockerconfigjson` Secret (`DockerConfig`) and are matched
to a registry as Docker matches them. No password, token or Authorization header is ever logged,
put in an error or shown by a repr.

Synchronous (urllib3): callers run it in a thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from rollout.api.imageref import (
    DOCKER_HUB,
    DOCKER_HUB_API_HOST,
    LEGACY_DOCKER_HUB,
    ImageReference,
)

log = logging.getLogger(__name__)

MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
"""What a manifest request accepts: without the index types a registry would convert a
multi-platform image's index, or refuse it, and the digest would not be the one pulled."""

DIGEST_HEADER = "Docker-Content-Digest"

DOCKER_HUB_CONFIG_KEY = "https://index.docker.io/v1/"
"""The key `docker login` writes Docker Hub's credentials under."""

_DOCKER_HUB_HOSTS = frozenset({DOCKER_HUB, LEGACY_DOCKER_HUB, DOCKER_HUB_API_HOST})

BACKOFF_INITIAL_SEC = 0.25
BACKOFF_MAX_SEC = 2.0
"""Retries are short: with the default 3 attempts a registry that is down costs about a second
beyond the requests' own timeouts."""

USER_AGENT = "rollout-operator"


class RegistryError(Exception):
    """The registry could not say whether it has the image: unreachable, or access refused."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --- credentials ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """A user name and password for one registry. The password never appears in a repr."""

    username: str
    password: str = field(repr=False)

    def basic_authorization(self) -> str:
        """The value of an `Authorization: Basic ...` header."""
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


def registry_hostname(key: str) -> str:
    """The host[:port] a docker config key or a registry name stands for, as Docker matches
    them: without scheme and path, lowercase, and every Docker Hub alias as `docker.io`."""
    host = key.strip()
    for scheme in ("https://", "http://"):
        if host.lower().startswith(scheme):
            host = host[len(scheme) :]
    host = host.split("/", 1)[0].lower()
    return DOCKER_HUB if host in _DOCKER_HUB_HOSTS else host


class DockerConfig:
    """The registry credentials of a pull Secret (`.dockerconfigjson`, or the legacy
    `.dockercfg`), by registry host."""

    def __init__(self, auths: Mapping[str, Credentials] | None = None) -> None:
        self._by_host: dict[str, Credentials] = {}
        for key, credentials in (auths or {}).items():
            host = registry_hostname(key)
            # Like Docker, a key that is the host itself wins over one written as a URL.
            if host not in self._by_host or key == host:
                self._by_host[host] = credentials

    @classmethod
    def from_json(cls, text: str | bytes) -> DockerConfig:
        """Read `{"auths": {host: {"auth": base64("user:pass")} | {"username", "password"}}}`,
        or the legacy shape without `auths`. Entries with no credentials (e.g. only a
        credential helper's) are skipped. Raises ValueError, never quoting the content."""
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ValueError(f"the docker config is not JSON ({error})") from None
        if not isinstance(data, dict):
            raise ValueError("the docker config is not a JSON object")
        entries = data.get("auths", data)
        if not isinstance(entries, dict):
            raise ValueError("the docker config's 'auths' is not an object")
        auths: dict[str, Credentials] = {}
        for key, entry in entries.items():
            credentials = _entry_credentials(key, entry)
            if credentials is not None:
                auths[key] = credentials
        return cls(auths)

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str]) -> DockerConfig:
        """Read a Kubernetes Secret's `data` (base64 values): its `.dockerconfigjson`, or the
        legacy `.dockercfg`."""
        for key in (".dockerconfigjson", ".dockercfg"):
            if key in data:
                try:
                    raw = base64.b64decode(data[key], validate=True)
                except (binascii.Error, ValueError):
                    raise ValueError(f"the Secret's {key} is not base64") from None
                return cls.from_json(raw)
        raise ValueError("the Secret has neither .dockerconfigjson nor .dockercfg")

    @property
    def registries(self) -> tuple[str, ...]:
        """The hosts that have credentials (`docker.io` for Docker Hub)."""
        return tuple(sorted(self._by_host))

    def credentials_for(self, registry_host: str) -> Credentials | None:
        """The credentials for `registry_host` (host[:port], with or without scheme)."""
        return self._by_host.get(registry_hostname(registry_host))

    def __repr__(self) -> str:
        return f"DockerConfig(registries={list(self.registries)!r})"

    __str__ = __repr__


def _entry_credentials(key: str, entry: Any) -> Credentials | None:
    if not isinstance(entry, dict):
        raise ValueError(f"the docker config's entry for {key!r} is not an object")
    auth = entry.get("auth")
    if auth:
        if not isinstance(auth, str):
            raise ValueError(f"the docker config's auth for {key!r} is not a string")
        try:
            pair = base64.b64decode(auth, validate=True).decode()
        except (binascii.Error, ValueError):
            raise ValueError(
                f"the docker config's auth for {key!r} is not base64 of user:password"
            ) from None
        username, colon, password = pair.partition(":")
        if not colon:
            raise ValueError(f"the docker config's auth for {key!r} has no ':' in it")
        return Credentials(username, password)
    user, secret = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(secret, str) and user:
        return Credentials(user, secret)
    return None


# --- challenges -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    """One challenge of a `WWW-Authenticate` header: its scheme (lowercase) and parameters
    (names lowercase; `realm`, `service`, `scope` for a registry's Bearer challenge)."""

    scheme: str
    params: Mapping[str, str]


# RFC 7230 calls a run of these characters a token (a scheme, a parameter name, a bare value).
_TCHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
# A scheme is a token standing alone (followed by a space, a comma or the end, not by "=").
_SCHEME = re.compile(rf"[\s,]*({_TCHARS})(?=\s|,|$)(?!\s*=)\s*")
_PARAM = re.compile(rf"[\s,]*({_TCHARS})\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|([^\s,\"]*))\s*")
_SKIP_ITEM = re.compile(r"[^,]*,?")


def parse_challenges(header: str) -> list[Challenge]:
    """The challenges of a `WWW-Authenticate` value, in order (RFC 7235's syntax; a server that
    sent several headers has them joined with commas, which this reads too)."""
    challenges: list[Challenge] = []
    position = 0
    while position < len(header):
        scheme = _SCHEME.match(header, position)
        if scheme is None:  # a token68 or garbage: skip to the next comma
            skipped = _SKIP_ITEM.match(header, position)
            position = skipped.end() if skipped and skipped.end() > position else len(header)
            continue
        position = scheme.end()
        params: dict[str, str] = {}
        while (param := _PARAM.match(header, position)) is not None:
            quoted, bare = param[2], param[3]
            params[param[1].lower()] = re.sub(r"\\(.)", r"\1", quoted) if quoted else bare or ""
            position = param.end()
        challenges.append(Challenge(scheme[1].lower(), params))
    return challenges


def pull_scope(repository: str) -> str:
    """The token scope that lets a client read `repository`."""
    return f"repository:{repository}:pull"


# --- the client -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    """What a request got back: the status, the headers (case-insensitive) and the body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class _Transient(Exception):
    """A failure worth another attempt: the connection, a timeout, 429 or 5xx."""


class _Exchange:
    """One question to one registry: the image, and the Authorization it earned on the way."""

    def __init__(self, ref: ImageReference, credentials: Credentials | None) -> None:
        self.ref = ref
        self.credentials = credentials
        self.authorization: str | None = None
        self.where = f"registry {ref.api_host}"

    def refused(self, status: int, by: str = "") -> RegistryError:
        if self.credentials is not None:
            sent = f"credentials for {self.ref.registry} were sent"
        else:
            sent = f"no credentials were sent: none are configured for {self.ref.registry}"
        return RegistryError(
            f"registry {self.ref.api_host} refused access to repository "
            f"{self.ref.repository!r}{by} (HTTP {status}); {sent}"
        )


class RegistryClient:
    """Asks registries for manifests over the OCI Distribution API. Thread-safe."""

    def __init__(
        self,
        config: DockerConfig | None = None,
        *,
        plain_http: bool = False,
        timeout: float = 10.0,
        attempts: int = 3,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._config = config or DockerConfig()
        self._scheme = "http" if plain_http else "https"
        self._timeout = timeout
        self._attempts = attempts
        self._pool = urllib3.PoolManager()

    def manifest_digest(self, ref: ImageReference) -> str | None:
        """The digest of `ref`'s manifest (`sha256:...`), or None when the registry does not
        have it (no such tag, digest or repository). Raises RegistryError when the registry
        refuses access or cannot be reached."""
        exchange = _Exchange(ref, self._config.credentials_for(ref.registry))
        url = (
            f"{self._scheme}://{ref.api_host}/v2/{ref.repository}/manifests/"
            f"{ref.manifest_reference}"
        )
        answer = self._authorized(exchange, "HEAD", url)
        if answer.status == 200 and not answer.headers.get(DIGEST_HEADER):
            # A registry need not send the header; the digest is then the body's sha256.
            answer = self._authorized(exchange, "GET", url)
            if answer.status == 200:
                return "sha256:" + hashlib.sha256(answer.body).hexdigest()
        if answer.status == 200:
            return _checked_digest(exchange, answer.headers[DIGEST_HEADER])
        if answer.status == 404:
            return None
        if answer.status in (401, 403):
            raise exchange.refused(answer.status)
        raise RegistryError(
            f"registry {ref.api_host} answered HTTP {answer.status} to the manifest of {ref}"
        )

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RegistryClient({self._config!r}, scheme={self._scheme!r})"

    # -- authentication ---------------------------------------------------------------------

    def _authorized(self, exchange: _Exchange, method: str, url: str) -> _Answer:
        """The answer to `method url`, after meeting one challenge if the registry makes one."""
        answer = self._send(method, url, exchange.where, _manifest_headers(exchange.authorization))
        if answer.status != 401 or exchange.authorization is not None:
            return answer
        authorization = self._meet(exchange, answer.headers.get("WWW-Authenticate", ""))
        if authorization is None:
            return answer
        exchange.authorization = authorization
        return self._send(method, url, exchange.where, _manifest_headers(authorization))

    def _meet(self, exchange: _Exchange, header: str) -> str | None:
        """The Authorization value that answers the registry's challenge, if we have one."""
        challenges = {c.scheme: c for c in parse_challenges(header)}
        if "bearer" in challenges:
            return "Bearer " + self._token(exchange, challenges["bearer"])
        if "basic" in challenges and exchange.credentials is not None:
            return exchange.credentials.basic_authorization()
        return None

    def _token(self, exchange: _Exchange, challenge: Challenge) -> str:
        """A token from the challenge's token service (the realm), for the challenge's scope or
        else pulling the repository."""
        realm = challenge.params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise RegistryError(
                f"registry {exchange.ref.api_host} asked for a token without a usable realm "
                f"({realm!r})"
            )
        query = {"scope": challenge.params.get("scope") or pull_scope(exchange.ref.repository)}
        if "service" in challenge.params:
            query["service"] = challenge.params["service"]
        joiner = "&" if "?" in realm else "?"
        url = realm + joiner + urllib.parse.urlencode(query)
        service = urllib3.util.parse_url(realm).netloc or realm
        where = f"token service {service} of registry {exchange.ref.api_host}"
        log.debug("asking %s for a token for %s", where, query["scope"])
        headers = {"Accept": "application/json"}
        if exchange.credentials is not None:
            headers["Authorization"] = exchange.credentials.basic_authorization()
        answer = self._send("GET", url, where, headers)
        if answer.status in (401, 403):
            raise exchange.refused(answer.status, by=f" through its token service {service}")
        if answer.status != 200:
            raise RegistryError(f"{where} answered HTTP {answer.status}")
        return _token_from(answer.body, where)

    # -- transport ---------------------------------------------------------------------------

    def _send(self, method: str, url: str, where: str, headers: Mapping[str, str]) -> _Answer:
        """One request, with the timeout, retried while it fails transiently."""

        def attempt() -> _Answer:
            return self._attempt(method, url, where, headers)

        retrying = Retrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_random_exponential(multiplier=BACKOFF_INITIAL_SEC, max=BACKOFF_MAX_SEC),
            retry=retry_if_exception_type(_Transient),
            before_sleep=_log_retry(where, self._attempts),
            reraise=True,
        )
        try:
            return retrying(attempt)
        except _Transient as error:
            raise RegistryError(f"{where} cannot be reached: {error}") from None

    def _attempt(self, method: str, url: str, where: str, headers: Mapping[str, str]) -> _Answer:
        timeout = urllib3.Timeout(connect=self._timeout, read=self._timeout)
        try:
            response = self._pool.request(
                method,
                url,
                headers={"User-Agent": USER_AGENT, **headers},
                timeout=timeout,
                retries=False,
            )
        except urllib3.exceptions.SSLError as error:
            # Not transient: a TLS handshake with a plain-HTTP server fails the same every time.
            raise RegistryError(
                f"{where} cannot be reached: the TLS handshake failed ({_cause(error)}); "
                "does it serve plain HTTP?"
            ) from None
        except urllib3.exceptions.HTTPError as error:
            raise _Transient(self._describe(error)) from None
        if response.status == 429 or response.status >= 500:
            raise _Transient(f"HTTP {response.status}")
        return _Answer(response.status, response.headers, response.data)

    def _describe(self, error: urllib3.exceptions.HTTPError) -> str:
        """The reason a request failed, without urllib3's object reprs."""
        if isinstance(error, urllib3.exceptions.NewConnectionError):
            return f"connection failed ({_cause(error)})"
        if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
            return f"no connection within {self._timeout:g} s"
        if isinstance(error, urllib3.exceptions.ReadTimeoutError):
            return f"no answer within {self._timeout:g} s"
        if isinstance(error, urllib3.exceptions.ProtocolError):
            return f"the connection broke ({_cause(error)})"
        return str(error)


def _cause(error: BaseException) -> str:
    """The OS- or TLS-level reason under a urllib3 error."""
    cause = error.__cause__ or error.__context__
    if isinstance(error, urllib3.exceptions.ProtocolError) and len(error.args) > 1:
        cause = error.args[1]
    return str(cause) if cause is not None else str(error)


def _manifest_headers(authorization: str | None) -> dict[str, str]:
    headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


def _log_retry(where: str, attempts: int) -> Callable[[RetryCallState], None]:
    def log_retry(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s: attempt %d of %d failed (%s); retrying in %.2f s",
            where,
            state.attempt_number,
            attempts,
            error,
            state.upcoming_sleep,
        )

    return log_retry


def _token_from(body: bytes, where: str) -> str:
    """The token of a token service's JSON answer (`token`, or OAuth2's `access_token`)."""
    try:
        data = json.loads(body)
    except ValueError:
        raise RegistryError(f"{where} answered with no JSON") from None
    token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise RegistryError(f"{where} answered without a token")
    return token


def _checked_digest(exchange: _Exchange, digest: str) -> str:
    try:
        exchange.ref.with_digest(digest)
    except ValueError:
        raise RegistryError(
            f"registry {exchange.ref.api_host} answered with a malformed digest {digest[:80]!r}"
        ) from None
    return digest
