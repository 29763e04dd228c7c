"""Image references read as distribution/reference reads them: Docker Hub's defaults, which
first component is a registry, and a ValueError naming the part that is wrong."""

from __future__ import annotations

import re

import pytest

from rollout.api.imageref import ImageReference, parse_image_reference

DIGEST = "sha256:" + "ab" * 32
OTHER_DIGEST = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("ubuntu", "docker.io", "library/ubuntu", None, None),
        ("ubuntu:24.04", "docker.io", "library/ubuntu", "24.04", None),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu", None, None),
        ("index.docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
        ("bitnami/redis:7", "docker.io", "bitnami/redis", "7", None),
        ("ghcr.io/org/team/app:v1.2_rc-3", "ghcr.io", "org/team/app", "v1.2_rc-3", None),
        ("localhost/app", "localhost", "app", None, None),
        ("localhost:5000/a/b:t", "localhost:5000", "a/b", "t", None),
        ("registry:5000/app", "registry:5000", "app", None, None),
        ("127.0.0.1:5000/app@" + DIGEST, "127.0.0.1:5000", "app", None, DIGEST),
        ("[::1]:5000/app:t", "[::1]:5000", "app", "t", None),
        ("Example.COM/app", "Example.COM", "app", None, None),
        ("quay.io/a/b:t@" + DIGEST, "quay.io", "a/b", "t", DIGEST),
        # The first component without '.', ':' or "localhost" is a Docker Hub namespace.
        ("myregistry/app", "docker.io", "myregistry/app", None, None),
        ("a__b/c.d/e--f_g", "docker.io", "a__b/c.d/e--f_g", None, None),
        # A lone name never is a registry: this is library/localhost at tag 5000.
        ("localhost:5000", "docker.io", "library/localhost", "5000", None),
    ],
)
def test_a_reference_is_read_into_its_parts(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_image_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("ubuntu", "docker.io/library/ubuntu"),
        ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
        ("index.docker.io/user/app", "docker.io/user/app"),
        ("localhost:5000/a/b:t", "localhost:5000/a/b:t"),
        ("quay.io/a/b:t@" + DIGEST, "quay.io/a/b:t@" + DIGEST),
    ],
)
def test_str_writes_the_canonical_form_which_reads_back_the_same(text: str, written: str) -> None:
    ref = parse_image_reference(text)
    assert str(ref) == written
    assert parse_image_reference(str(ref)) == ref


def test_docker_hub_is_asked_at_its_api_host_and_other_registries_at_their_own() -> None:
    assert parse_image_reference("ubuntu").api_host == "registry-1.docker.io"
    assert parse_image_reference("docker.io/user/app").api_host == "registry-1.docker.io"
    assert parse_image_reference("ghcr.io/org/app").api_host == "ghcr.io"
    assert parse_image_reference("127.0.0.1:5000/app").api_host == "127.0.0.1:5000"


def test_the_manifest_asked_for_is_the_digest_then_the_tag_then_latest() -> None:
    assert parse_image_reference("app").manifest_reference == "latest"
    assert parse_image_reference("app:v1").manifest_reference == "v1"
    assert parse_image_reference(f"app:v1@{DIGEST}").manifest_reference == DIGEST


def test_with_digest_pins_the_image_and_drops_its_tag() -> None:
    ref = parse_image_reference("localhost:5000/rollout-env:abc")
    pinned = ref.with_digest(DIGEST)
    assert str(pinned) == f"localhost:5000/rollout-env@{DIGEST}"
    assert pinned.tag is None
    assert str(pinned.with_digest(OTHER_DIGEST)) == f"localhost:5000/rollout-env@{OTHER_DIGEST}"


def test_with_tag_names_another_tag_of_the_repository_and_drops_the_digest() -> None:
    ref = parse_image_reference(f"ghcr.io/org/app:v1@{DIGEST}")
    assert str(ref.with_tag("v2")) == "ghcr.io/org/app:v2"


def test_with_tag_and_with_digest_check_what_they_are_given() -> None:
    ref = parse_image_reference("ghcr.io/org/app")
    with pytest.raises(ValueError, match="tag '-x' is not valid"):
        ref.with_tag("-x")
    with pytest.raises(ValueError, match="digest 'sha256:abc' is not valid"):
        ref.with_digest("sha256:abc")


def test_a_reference_built_from_parts_is_checked_too() -> None:
    assert str(ImageReference("127.0.0.1:5000", "base/busybox", "v1")) == (
        "127.0.0.1:5000/base/busybox:v1"
    )
    with pytest.raises(ValueError, match="registry 'bad_host' is not a host"):
        ImageReference("bad_host", "app")
    with pytest.raises(ValueError, match="repository name 'App' must be lowercase"):
        ImageReference("ghcr.io", "App")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the image reference is empty"),
        (" ubuntu", "has spaces around it"),
        ("Ubuntu", "repository name 'Ubuntu' must be lowercase"),
        ("ghcr.io/Org/app", "repository name 'Org/app' must be lowercase"),
        ("MyOrg/app", "repository name 'MyOrg/app' must be lowercase"),
        ("ghcr.io/", "the repository name is empty"),
        ("@" + DIGEST, "it has no repository name"),
        ("ghcr.io//app", "repository name '/app' is not valid"),
        ("app-/x", "repository name 'app-/x' is not valid"),
        ("a...b", "repository name 'library/a...b' is not valid"),
        ("bad_host:5000/app", "registry 'bad_host:5000' is not a host"),
        ("app:", "has ':' but no tag"),
        ("app:.hidden", "tag '.hidden' is not valid"),
        ("app:" + "t" * 129, f"tag '{'t' * 129}' is not valid"),
        ("app:tåg", "tag 'tåg' is not valid"),
        ("app@", "has '@' but no digest"),
        ("app@sha256:abc", "a sha256 digest has 64 lowercase hex digits"),
        ("app@sha256:" + "AB" * 32, "a sha256 digest has 64 lowercase hex digits"),
        ("app@md5:" + "ab" * 16, "its algorithm must be sha256 or sha512"),
        ("app@" + "ab" * 32, "a digest is algorithm:hex"),
        ("ab" * 32, "is an image ID, not a reference"),
        ("ghcr.io/" + "a" * 250, "at most 255 are allowed"),
    ],
)
def test_bad_input_is_a_value_error_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        parse_image_reference(text)
    if text:
        assert str(raised.value).startswith(f"image reference {text!r}: ")


def test_a_sha512_digest_is_accepted() -> None:
    digest = "sha512:" + "0f" * 64
    assert parse_image_reference(f"ghcr.io/a@{digest}").digest == digest
