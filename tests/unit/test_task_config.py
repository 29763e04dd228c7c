"""task.toml: the seed's fields and defaults, Harbor's newer keys, and clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paths import (
    DATA,
    HARBOR,
    SHARED_TASKS,
    TERMINAL_BENCH,
    requires_shared_tasks,
    shared_task_dirs,
    task_dirs,
)
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.task import TaskConfig, load_task_config, parse_task_config

GB = 10**9
MIB = 2**20

SHARED_TERMINAL_BENCH = task_dirs(SHARED_TASKS / "terminal-bench-2-sample")
SHARED_HARBOR = task_dirs(SHARED_TASKS / "harbor-examples")


def shared(dirs: list[Path]) -> list[Any]:
    return [pytest.param(d, id=f"shared-{d.name}", marks=requires_shared_tasks) for d in dirs]


TERMINAL_BENCH_TASKS = [
    *[pytest.param(d, "rollout-tests", id=d.name) for d in task_dirs(TERMINAL_BENCH)],
    *[
        pytest.param(d, "alexgshaw", id=f"shared-{d.name}", marks=requires_shared_tasks)
        for d in SHARED_TERMINAL_BENCH
    ],
]
HARBOR_TASKS = [*task_dirs(HARBOR), *shared(SHARED_HARBOR)]


def test_the_tasks_of_each_format_are_there() -> None:
    assert [p.name for p in task_dirs(TERMINAL_BENCH) + task_dirs(HARBOR)] == [
        "count-lines",
        "sum-column",
        "hello-user",
        "hello-workdir",
        "hello-world",
    ]


@requires_shared_tasks
def test_the_shared_tasks_are_there() -> None:
    names = [p.name for p in SHARED_TERMINAL_BENCH + SHARED_HARBOR]
    assert names == [
        "fix-git",
        "kv-store-grpc",
        "log-summary-date-ranges",
        "openssl-selfsigned-cert",
        "regex-log",
        "hello-alpine",
        "hello-user",
        "hello-workdir",
        "hello-world",
    ]


@pytest.mark.parametrize(("task_dir", "image_owner"), TERMINAL_BENCH_TASKS)
def test_terminal_bench_task_toml(task_dir: Path, image_owner: str) -> None:
    config = load_task_config(task_dir / "task.toml")
    assert config.version == "1.0"
    assert config.environment.docker_image == f"{image_owner}/{task_dir.name}:20251031"
    assert config.verifier.timeout_sec == 900.0
    assert config.agent.timeout_sec == 900.0
    assert config.agent.install_timeout_sec == 300.0  # not in the file: the seed's default
    assert config.environment.build_timeout_sec == 600.0
    assert config.environment.cpus == "1"  # written as the number 1
    assert config.environment.cpu_millicores == 1000
    assert config.environment.memory == "2G"
    assert config.environment.memory_bytes == 2 * GB
    assert config.environment.storage_bytes == 10 * GB
    assert config.environment.memory_mb is None
    assert config.metadata["tags"]
    assert isinstance(config.metadata["expert_time_estimate_min"], float)


@pytest.mark.parametrize("task_dir", HARBOR_TASKS, ids=lambda p: p.name)
def test_harbor_example_task_toml(task_dir: Path) -> None:
    config = load_task_config(task_dir / "task.toml")
    assert config.schema_version in ("1.1", "1.4")
    assert config.task is not None
    assert config.task.name == f"harbor/{task_dir.name}"
    assert config.environment.docker_image is None
    assert config.verifier.timeout_sec == 120.0
    assert config.agent.timeout_sec == 120.0
    assert config.environment.memory_mb == 2048
    assert config.environment.memory == "2048Mi"  # memory_mb wins over the default "2G"
    assert config.environment.memory_bytes == 2048 * MIB
    assert config.environment.storage == "10240Mi"
    assert config.environment.storage_bytes == 10240 * MIB
    assert config.environment.gpus == 0
    assert config.environment.mcp_servers == []
    assert config.verifier.env == {}
    assert config.solution.env == {}


@pytest.mark.parametrize(
    "harbor", [HARBOR, pytest.param(SHARED_TASKS / "harbor-examples", marks=requires_shared_tasks)]
)
def test_harbor_specific_values(harbor: Path) -> None:
    user = load_task_config(harbor / "hello-user/task.toml")
    assert user.agent.user == "agent"
    assert user.verifier.user is None
    workdir = load_task_config(harbor / "hello-workdir/task.toml")
    assert workdir.environment.workdir == "/custom-workdir"
    world = load_task_config(harbor / "hello-world/task.toml")
    assert world.schema_version == "1.4"
    assert world.task is not None
    assert world.task.version == "1.0.0"


def test_the_seed_example_task_toml() -> None:
    config = load_task_config(DATA / "seed-task" / "task.toml")
    assert config.version == "1.0"
    assert config.metadata == {
        "author_name": "Steve Jobs",
        "author_email": "steve@apple.com",
        "difficulty": "easy",
        "category": "programming",
        "tags": ["trivial"],
    }
    assert config.verifier.timeout_sec == 120.0
    assert config.agent.install_timeout_sec == 300.0
    assert config.agent.timeout_sec == 120.0
    assert config.environment.build_timeout_sec == 600.0
    assert config.environment.docker_image == "some-org/some-name:some-tag"
    assert config.environment.cpus == "1"
    assert config.environment.memory == "2048Mi"  # "2048" means 2048 MiB
    assert config.environment.memory_bytes == 2048 * MIB
    assert config.environment.storage == "10240Mi"
    assert config.environment.storage_bytes == 10240 * MIB


def test_an_empty_task_toml_has_the_seed_defaults(tmp_path: Path) -> None:
    path = tmp_path / "task.toml"
    path.write_text("")
    config = load_task_config(path)
    assert config.version == "1.0"
    assert config.metadata == {}
    assert config.verifier.timeout_sec == 600.0
    assert config.agent.install_timeout_sec == 300.0
    assert config.agent.timeout_sec == 600.0
    assert config.environment.build_timeout_sec == 600.0
    assert config.environment.docker_image is None
    assert config.environment.cpus == "1"
    assert config.environment.memory == "2G"
    assert config.environment.storage == "10G"
    assert config.environment.gpus == 0
    assert config.source is None
    assert config.schema_version is None
    assert config.task is None


def test_unknown_keys_are_kept_everywhere() -> None:
    config = parse_task_config(
        {
            "future_key": 1,
            "environment": {"sandbox_flavour": "x", "cpus": 2},
            "verifier": {"new_thing": {"a": "b"}, "env": {"X": "1"}},
            "brand_new_table": {"k": "v"},
            "task": {"name": "x/y", "license": "MIT"},
        }
    )
    assert config.model_extra == {"future_key": 1, "brand_new_table": {"k": "v"}}
    assert config.environment.model_extra == {"sandbox_flavour": "x"}
    assert config.verifier.model_extra == {"new_thing": {"a": "b"}}
    assert config.task is not None
    assert config.task.model_extra == {"license": "MIT"}
    assert config.verifier.env == {"X": "1"}
    again = parse_task_config(config.to_dict())
    assert again == config
    assert again.to_dict()["brand_new_table"] == {"k": "v"}


def test_fractional_cpus_normalise() -> None:
    config = parse_task_config({"environment": {"cpus": 0.5}})
    assert config.environment.cpus == "500m"
    assert config.environment.cpu_millicores == 500


def test_memory_and_memory_mb_that_agree() -> None:
    config = parse_task_config({"environment": {"memory": "2Gi", "memory_mb": 2048}})
    assert config.environment.memory_bytes == 2 * 2**30
    assert parse_task_config(config.to_dict()) == config


def test_round_trip_of_every_task() -> None:
    tasks = task_dirs(TERMINAL_BENCH) + task_dirs(HARBOR) + shared_task_dirs()
    assert len(tasks) >= 5
    for task_dir in tasks:
        config = load_task_config(task_dir / "task.toml")
        assert isinstance(config, TaskConfig)
        assert parse_task_config(config.to_dict()) == config


MALFORMED = [
    ('[environment]\nmemory = "lots"\n', "environment.memory", "'lots' is not a quantity"),
    ('[environment]\nstorage = ""\n', "environment.storage", "empty string is not a quantity"),
    ('[environment]\ncpus = "abc"\n', "environment.cpus", "'abc' is not a quantity"),
    ("[environment]\ncpus = -1\n", "environment.cpus", "-1 is negative"),
    ('[environment]\nmemory = "512m"\n', "environment.memory", "fraction of a byte"),
    ("[environment]\nmemory_mb = 0\n", "environment.memory_mb", "greater than 0"),
    ("[environment]\ngpus = -1\n", "environment.gpus", "greater than or equal to 0"),
    (
        '[environment]\nmemory = "4G"\nmemory_mb = 2048\n',
        "environment",
        "environment.memory = '4G' and environment.memory_mb = 2048 disagree",
    ),
    ("[verifier]\ntimeout_sec = -5\n", "verifier.timeout_sec", "greater than 0"),
    ("[agent]\ntimeout_sec = 0\n", "agent.timeout_sec", "greater than 0"),
    ("[agent]\ninstall_timeout_sec = true\n", "agent.install_timeout_sec", "got true"),
    ("[environment]\nbuild_timeout_sec = inf\n", "environment.build_timeout_sec", "finite"),
    ('[agent]\ntimeout_sec = "soon"\n', "agent.timeout_sec", "valid number"),
    ("[verifier.env]\nTOKEN = 3\n", "verifier.env.TOKEN", "valid string"),
    ("verifier = 5\n", "verifier", "valid dictionary"),
    ("version = 1.0\n", "version", "valid string"),
    ('[environment]\nmcp_servers = "none"\n', "environment.mcp_servers", "valid list"),
]


@pytest.mark.parametrize(("text", "field", "message"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_task_toml(tmp_path: Path, text: str, field: str, message: str) -> None:
    path = tmp_path / "task.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput) as caught:
        load_task_config(path)
    err = caught.value
    assert err.error_type is ErrorType.TASK_INVALID
    assert [(p.file, p.field) for p in err.problems] == [(str(path), field)]
    assert message in err.problems[0].message
    assert str(err).startswith(f"{path}: {field}: ")


def test_every_problem_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "task.toml"
    path.write_text('[environment]\nmemory = "lots"\ncpus = "abc"\n[verifier]\ntimeout_sec = -1\n')
    with pytest.raises(InvalidInput) as caught:
        load_task_config(path)
    fields = sorted(p.field or "" for p in caught.value.problems)
    assert fields == ["environment.cpus", "environment.memory", "verifier.timeout_sec"]


def test_unparseable_toml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "task.toml"
    path.write_text('version = "1.0"\n\n[agent]\ntimeout_sec = = 3\n')
    with pytest.raises(InvalidInput) as caught:
        load_task_config(path)
    (problem,) = caught.value.problems
    assert problem.file == str(path)
    assert problem.message.startswith("not valid TOML: ")
    assert "line 4" in problem.message
    assert caught.value.error_type is ErrorType.TASK_INVALID


def test_task_toml_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"task\.toml: file is missing"):
        load_task_config(tmp_path / "task.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(InvalidInput, match=r"dir\.toml: is a directory"):
        load_task_config(tmp_path / "dir.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'version = "\xff"\n')
    with pytest.raises(InvalidInput, match=r"binary\.toml: not UTF-8 text"):
        load_task_config(binary)


def test_parse_task_config_names_the_given_file() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_task_config({"environment": {"cpus": "abc"}}, "manifest task x")
    assert str(caught.value).startswith("manifest task x: environment.cpus: 'abc' is not")


# --- network access (allow_internet, network_mode, allowed_hosts) ----------------------------


@pytest.mark.parametrize(
    ("environment", "restricted", "hosts"),
    [
        ({}, False, []),
        ({"allow_internet": True}, False, []),
        ({"allow_internet": False}, True, []),
        ({"network_mode": "public"}, False, []),
        ({"network_mode": "no-network"}, True, []),
        ({"network_mode": "none"}, True, []),  # Docker's spelling
        ({"network_mode": "allowlist"}, True, []),  # no hosts: nothing but what trials need
        (
            {"network_mode": "allowlist", "allowed_hosts": ["pypi.org", "10.1.2.0/24", "pypi.org"]},
            True,
            ["10.1.2.0/24", "pypi.org"],
        ),
        ({"allow_internet": False, "allowed_hosts": ["pypi.org"]}, True, ["pypi.org"]),
        ({"network_mode": "no-network", "allow_internet": False}, True, []),
    ],
)
def test_a_tasks_network_keys_give_its_trials_egress(
    environment: dict[str, Any], restricted: bool, hosts: list[str]
) -> None:
    egress = parse_task_config({"environment": environment}).environment.egress
    assert (egress.restricted, egress.allowed_hosts) == (restricted, hosts)
    assert (egress.label_value is not None) == restricted


def test_one_set_of_allowed_hosts_has_one_label_however_written() -> None:
    def label(hosts: list[str]) -> str | None:
        toml = {"environment": {"network_mode": "allowlist", "allowed_hosts": hosts}}
        return parse_task_config(toml).environment.egress.label_value

    assert label(["a.example", "b.example"]) == label(["b.example", "a.example", "a.example"])
    assert label(["a.example"]) != label(["b.example"])
    assert label([]) == "restricted"


@pytest.mark.parametrize(
    ("environment", "says"),
    [
        ({"network_mode": "public", "allow_internet": False}, "disagree"),
        ({"network_mode": "no-network", "allow_internet": True}, "disagree"),
        ({"network_mode": "bridge"}, "'public', 'no-network' or 'allowlist'"),
        ({"allowed_hosts": [""]}, "at least 1 character"),
    ],
)
def test_network_keys_that_cannot_be_honoured_make_the_task_invalid(
    environment: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_task_config({"environment": environment})
    assert raised.value.error_type == ErrorType.TASK_INVALID
    assert any(says in problem.message for problem in raised.value.problems), raised.value


def test_network_keys_read_back_the_same_from_a_manifest() -> None:
    for environment in (
        {"network_mode": "allowlist", "allowed_hosts": ["pypi.org"]},
        {"network_mode": "none"},
        {"allow_internet": False},
    ):
        config = parse_task_config({"environment": environment})
        again = parse_task_config(config.to_dict())
        assert again.environment.egress == config.environment.egress, environment
