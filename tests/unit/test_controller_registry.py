"""The registry client's pure parts: pull Secrets' docker configs (credentials matched to a
registry as Docker matches them, passwords never shown) and WWW-Authenticate challenges."""

from __future__ import annotations

import base64
import json

import pytest

from rollout.controller.registry import (
    Challenge,
    Credentials,
    DockerConfig,
    RegistryClient,
    parse_challenges,
    pull_scope,
    registry_hostname,
)

PASSWORD = "s3cr3t-never-shown"


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- DockerConfig -----------------------------------------------------------------------------


def test_dockerconfigjson_entries_give_credentials_by_host() -> None:
    config = DockerConfig.from_json(
        json.dumps(
            {
                "auths": {
                    "ghcr.io": {"auth": _auth("octo", PASSWORD)},
                    "registry.example.com:5000": {"username": "ci", "password": "pw:with:colons"},
                    "https://index.docker.io/v1/": {"auth": _auth("hubuser", "hubpw")},
                },
                "credsStore": "desktop",
            }
        )
    )
    assert config.credentials_for("ghcr.io") == Credentials("octo", PASSWORD)
    assert config.credentials_for("registry.example.com:5000") == Credentials(
        "ci", "pw:with:colons"
    )
    assert config.credentials_for("registry.example.com") is None  # another port, another host
    assert config.registries == ("docker.io", "ghcr.io", "registry.example.com:5000")


@pytest.mark.parametrize(
    "asked", ["docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/"]
)
@pytest.mark.parametrize(
    "key", ["https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io"]
)
def test_docker_hub_credentials_match_each_of_its_names(key: str, asked: str) -> None:
    config = DockerConfig.from_json(json.dumps({"auths": {key: {"auth": _auth("u", "p")}}}))
    assert config.credentials_for(asked) == Credentials("u", "p")


@pytest.mark.parametrize(
    "key",
    ["ghcr.io", "https://ghcr.io", "http://ghcr.io/", "https://ghcr.io/v2/", "GHCR.io"],
)
def test_a_key_matches_its_host_with_or_without_scheme_and_path(key: str) -> None:
    config = DockerConfig.from_json(json.dumps({"auths": {key: {"auth": _auth("u", "p")}}}))
    assert config.credentials_for("ghcr.io") == Credentials("u", "p")
    assert config.credentials_for("https://ghcr.io/") == Credentials("u", "p")
    assert config.credentials_for("quay.io") is None


def test_a_key_that_is_the_host_itself_wins_over_one_written_as_a_url() -> None:
    entries = {
        "https://ghcr.io/v1/": {"auth": _auth("url", "p1")},
        "ghcr.io": {"auth": _auth("bare", "p2")},
    }
    config = DockerConfig.from_json(json.dumps({"auths": entries}))
    assert config.credentials_for("ghcr.io") == Credentials("bare", "p2")


def test_the_legacy_dockercfg_shape_has_no_auths_key() -> None:
    config = DockerConfig.from_json(
        json.dumps({"quay.io": {"auth": _auth("legacy", "pw"), "email": "x@example.com"}})
    )
    assert config.credentials_for("quay.io") == Credentials("legacy", "pw")


def test_entries_without_credentials_are_skipped() -> None:
    config = DockerConfig.from_json(
        json.dumps({"auths": {"ghcr.io": {}, "quay.io": {"identitytoken": "t"}}})
    )
    assert config.registries == ()
    assert config.credentials_for("ghcr.io") is None


def test_a_secrets_data_is_read_from_base64() -> None:
    text = json.dumps({"auths": {"ghcr.io": {"auth": _auth("u", "p")}}})
    assert DockerConfig.from_secret_data({".dockerconfigjson": _b64(text)}).credentials_for(
        "ghcr.io"
    ) == Credentials("u", "p")
    legacy = json.dumps({"ghcr.io": {"auth": _auth("old", "p")}})
    assert DockerConfig.from_secret_data({".dockercfg": _b64(legacy)}).credentials_for(
        "ghcr.io"
    ) == Credentials("old", "p")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "the docker config is not JSON"),
        ("[]", "not a JSON object"),
        ('{"auths": []}', "'auths' is not an object"),
        ('{"auths": {"ghcr.io": "x"}}', "entry for 'ghcr.io' is not an object"),
        ('{"auths": {"ghcr.io": {"auth": "%%%"}}}', "auth for 'ghcr.io' is not base64"),
        ('{"auths": {"ghcr.io": {"auth": 5}}}', "auth for 'ghcr.io' is not a string"),
        (json.dumps({"auths": {"ghcr.io": {"auth": _b64("nocolon")}}}), "has no ':'"),
    ],
)
def test_a_broken_config_is_a_value_error_that_quotes_no_content(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        DockerConfig.from_json(text)
    assert "nocolon" not in str(raised.value)
    assert "%%%" not in str(raised.value)


def test_a_secret_without_a_docker_config_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"neither \.dockerconfigjson nor \.dockercfg"):
        DockerConfig.from_secret_data({"token": _b64("x")})
    with pytest.raises(ValueError, match=r"\.dockerconfigjson is not base64"):
        DockerConfig.from_secret_data({".dockerconfigjson": "not base64!"})


def test_no_repr_or_str_shows_a_password() -> None:
    config = DockerConfig.from_json(
        json.dumps({"auths": {"ghcr.io": {"username": "octo", "password": PASSWORD}}})
    )
    credentials = config.credentials_for("ghcr.io")
    assert credentials is not None
    client = RegistryClient(config)
    shown = [repr(config), str(config), repr(credentials), str(credentials), repr(client)]
    for text in shown:
        assert PASSWORD not in text
        assert base64.b64encode(f"octo:{PASSWORD}".encode()).decode() not in text
    assert "ghcr.io" in repr(config)
    assert credentials.basic_authorization() == "Basic " + _auth("octo", PASSWORD)


@pytest.mark.parametrize(
    ("key", "host"),
    [
        ("https://index.docker.io/v1/", "docker.io"),
        ("http://localhost:5000/", "localhost:5000"),
        ("Quay.IO", "quay.io"),
        ("[::1]:5000", "[::1]:5000"),
    ],
)
def test_registry_hostname(key: str, host: str) -> None:
    assert registry_hostname(key) == host


# --- challenges -------------------------------------------------------------------------------


def test_a_registry_bearer_challenge_gives_realm_service_and_scope() -> None:
    header = (
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/ubuntu:pull"'
    )
    assert parse_challenges(header) == [
        Challenge(
            "bearer",
            {
                "realm": "https://auth.docker.io/token",
                "service": "registry.docker.io",
                "scope": "repository:library/ubuntu:pull",
            },
        )
    ]


def test_a_scope_with_commas_inside_quotes_stays_whole() -> None:
    header = 'Bearer realm="https://t/token",scope="repository:a/b:pull,push",error="x"'
    [challenge] = parse_challenges(header)
    assert challenge.params["scope"] == "repository:a/b:pull,push"
    assert challenge.params["error"] == "x"


def test_basic_and_case_spacing_and_bare_values() -> None:
    assert parse_challenges('Basic realm="Registry Realm"') == [
        Challenge("basic", {"realm": "Registry Realm"})
    ]
    assert parse_challenges("BEARER  Realm = https://t/token , Service=reg") == [
        Challenge("bearer", {"realm": "https://t/token", "service": "reg"})
    ]
    assert parse_challenges("Basic") == [Challenge("basic", {})]


def test_several_challenges_in_one_header_are_all_read_in_order() -> None:
    header = 'Basic realm="r1", Bearer realm="https://t/token",service="s", Negotiate'
    assert [c.scheme for c in parse_challenges(header)] == ["basic", "bearer", "negotiate"]
    assert parse_challenges(header)[1].params == {"realm": "https://t/token", "service": "s"}


def test_escaped_quotes_in_a_quoted_value_are_unescaped() -> None:
    [challenge] = parse_challenges(r'Bearer realm="a\"b\\c"')
    assert challenge.params["realm"] == 'a"b\\c'


@pytest.mark.parametrize("header", ["", "   ", ",,,", '="x"'])
def test_no_challenge_in_an_empty_or_broken_header(header: str) -> None:
    assert [c for c in parse_challenges(header) if c.scheme in ("basic", "bearer")] == []


def test_the_default_scope_pulls_the_repository() -> None:
    assert pull_scope("team/app") == "repository:team/app:pull"


def test_attempts_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        RegistryClient(attempts=0)
