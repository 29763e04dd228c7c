"""An image reference (`registry/repository[:tag][@digest]`), read the way Docker reads one.

Before the operator builds an environment image it asks the registry whether
`<registry>/<repository>:<tag>` is already there, so it needs to know from a reference which
host to ask, which repository and which manifest. The grammar is distribution/reference's (the
one Docker, containerd and the registry share):

- a name is `[registry/]path`, a path is components of lowercase letters and digits joined by
  one `.`, one or two `_`, or any number of `-`, and separated by `/`;
- the first component is the registry only when it contains `.` or `:` or is `localhost`;
  otherwise the image is on Docker Hub (`docker.io`, whose API is at `registry-1.docker.io`),
  where a one-component name is an official image under `library/`;
- a tag is up to 128 word characters, `.` and `-`, not starting with `.` or `-`;
- a digest is `algorithm:hex` (sha256 or sha512, lowercase hex of the algorithm's length).

Pure: no I/O, so the CLI, the operator and the tests can all use it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
"""Docker Hub's name in references (`docker.io/library/ubuntu`)."""

DOCKER_HUB_API_HOST = "registry-1.docker.io"
"""Where Docker Hub's registry API answers: `docker.io` itself does not serve /v2/."""

LEGACY_DOCKER_HUB = "index.docker.io"
"""Docker Hub's old name, still accepted in references and read as `docker.io`."""

OFFICIAL_PREFIX = "library/"
"""The namespace of Docker Hub's official images: `ubuntu` is `docker.io/library/ubuntu`."""

DEFAULT_TAG = "latest"
"""The tag a registry is asked for when a reference names neither tag nor digest."""

NAME_MAX_LENGTH = 255
"""The longest `registry/repository` distribution/reference accepts."""

DIGEST_HEX_LENGTHS = {"sha256": 64, "sha512": 128}
"""The digest algorithms registries use (OCI image-spec's registered ones) and their hex sizes."""

_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"[a-z0-9]+(?:{_SEPARATOR}[a-z0-9]+)*"
_PATH = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_REGISTRY = re.compile(rf"{_HOST}(?::[0-9]+)?")
_TAG = re.compile(r"\w[\w.-]{0,127}", re.ASCII)
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")

_PATH_RULE = (
    "path components are lowercase letters and digits, separated inside a component by one "
    "'.', one or two '_' or dashes, and joined by '/'"
)
_TAG_RULE = "a tag is 1 to 128 letters, digits, '_', '.' and '-', and starts with no '.' or '-'"


@dataclass(frozen=True)
class ImageReference:
    """One image: a registry host, a repository in it, and a tag, a digest, or both.

    Constructing one checks every part (ValueError naming the part); `parse_image_reference`
    reads the written form, with Docker Hub's defaults filled in.
    """

    registry: str
    """host[:port] as written in references (`docker.io` for Docker Hub)."""
    repository: str
    """The repository's path in the registry (`library/ubuntu`)."""
    tag: str | None = None
    digest: str | None = None
    """`sha256:<64 hex>` (or sha512): the manifest's content address."""

    def __post_init__(self) -> None:
        _check_registry(self.registry)
        _check_repository(self.repository)
        name = self.name
        if len(name) > NAME_MAX_LENGTH:
            raise ValueError(
                f"image name {name[:40]}... is {len(name)} characters long; "
                f"at most {NAME_MAX_LENGTH} are allowed"
            )
        if self.tag is not None:
            _check_tag(self.tag)
        if self.digest is not None:
            _check_digest(self.digest)

    @property
    def name(self) -> str:
        """`registry/repository`, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def api_host(self) -> str:
        """host[:port] to send the registry's HTTP requests to."""
        return DOCKER_HUB_API_HOST if self.registry == DOCKER_HUB else self.registry

    @property
    def manifest_reference(self) -> str:
        """What `/v2/<repository>/manifests/<...>` asks for: the digest when there is one (it
        pins the content), else the tag, else `latest`."""
        return self.digest or self.tag or DEFAULT_TAG

    def with_digest(self, digest: str) -> ImageReference:
        """This image pinned to `digest` (`registry/repository@sha256:...`), without its tag."""
        return dataclasses.replace(self, tag=None, digest=digest)

    def with_tag(self, tag: str) -> ImageReference:
        """This repository at `tag`, without a digest (it would name other content)."""
        return dataclasses.replace(self, tag=tag, digest=None)

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


def parse_image_reference(text: str) -> ImageReference:
    """The reference `text` names, in canonical form (`ubuntu` is `docker.io/library/ubuntu`).

    Raises ValueError naming the reference and saying which part of it is wrong.
    """
    if not text:
        raise ValueError("the image reference is empty")
    try:
        return _parse(text)
    except ValueError as error:
        raise ValueError(f"image reference {text!r}: {error}") from None


def _parse(text: str) -> ImageReference:
    if text != text.strip():
        raise ValueError("it has spaces around it")
    if _IMAGE_ID.fullmatch(text):
        raise ValueError("this is an image ID, not a reference: name the image (repository[:tag])")
    name, at, digest = text.partition("@")
    if at and not digest:
        raise ValueError("it has '@' but no digest after it")
    name, tag = _split_tag(name)
    registry, repository = _split_registry(name)
    return ImageReference(registry, repository, tag, digest or None)


def _split_tag(name: str) -> tuple[str, str | None]:
    """`name[:tag]` split at the colon after the last `/` (one before it is a port's)."""
    colon = name.find(":", name.rfind("/") + 1)
    if colon < 0:
        return name, None
    tag = name[colon + 1 :]
    if not tag:
        raise ValueError("it has ':' but no tag after it")
    return name[:colon], tag


def _split_registry(name: str) -> tuple[str, str]:
    """(registry, repository) of a name, with Docker Hub's defaults."""
    if not name:
        raise ValueError("it has no repository name")
    first, slash, rest = name.partition("/")
    if slash and (first == "localhost" or "." in first or ":" in first):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if repository != repository.lower():
        raise ValueError(f"repository name {repository!r} must be lowercase")
    if registry == LEGACY_DOCKER_HUB:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repository:
        repository = OFFICIAL_PREFIX + repository
    return registry, repository


def _check_registry(registry: str) -> None:
    if not _REGISTRY.fullmatch(registry):
        raise ValueError(
            f"registry {registry!r} is not a host[:port] (letters, digits, '-' and '.', "
            "or an IPv6 address in brackets, then an optional ':port')"
        )


def _check_repository(repository: str) -> None:
    if not repository:
        raise ValueError("the repository name is empty")
    if repository != repository.lower():
        raise ValueError(f"repository name {repository!r} must be lowercase")
    if not _PATH.fullmatch(repository):
        raise ValueError(f"repository name {repository!r} is not valid: {_PATH_RULE}")


def _check_tag(tag: str) -> None:
    if not _TAG.fullmatch(tag):
        raise ValueError(f"tag {tag!r} is not valid: {_TAG_RULE}")


def _check_digest(digest: str) -> None:
    algorithm, colon, hex_part = digest.partition(":")
    if not colon:
        raise ValueError(f"digest {digest!r} is not valid: a digest is algorithm:hex")
    length = DIGEST_HEX_LENGTHS.get(algorithm)
    if length is None:
        known = " or ".join(DIGEST_HEX_LENGTHS)
        raise ValueError(f"digest {digest!r} is not valid: its algorithm must be {known}")
    if len(hex_part) != length or not re.fullmatch(r"[0-9a-f]+", hex_part):
        raise ValueError(
            f"digest {digest!r} is not valid: a {algorithm} digest has {length} lowercase "
            "hex digits"
        )
