"""registry.json datasets for real: local files, a loopback HTTP server, and git repositories.

The repositories are real ones made in a temporary directory and fetched with the real git, over
file:// URLs and over dumb HTTP from a loopback server (which cannot fetch shallowly, so it takes
the full-fetch fallback).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_kit import git

from rollout.api.dataset import Registry, RegistryDataset, find_registry_dataset, parse_registry
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.taskdir import task_content_hash
from rollout.datasets.registry import fetch_registry_dataset, load_registry

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "registry"


# --- Helpers --------------------------------------------------------------------------------


def write_task(root: Path, instruction: str) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "instruction.md").write_text(instruction)
    (root / "task.toml").write_text('[agent]\ntimeout_sec = 60.0\n[environment]\nmemory = "1G"\n')
    (root / "environment" / "Dockerfile").write_text("FROM alpine:3.20\n")
    (root / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (root / "tests" / "test.sh").chmod(0o755)
    return root


class TaskRepo:
    """A git repository with tasks/alpha and tasks/beta; the second commit changes alpha."""

    def __init__(self, root: Path) -> None:
        self.path = root / "tasks-repo"
        self.path.mkdir()
        git("init", "--quiet", "--initial-branch=main", cwd=self.path)
        write_task(self.path / "tasks" / "alpha", "Alpha, first version.\n")
        write_task(self.path / "tasks" / "beta", "Beta.\n")
        (self.path / "broken").mkdir()
        (self.path / "broken" / "instruction.md").write_text("No task.toml here.\n")
        git("add", "-A", cwd=self.path)
        git("commit", "--quiet", "-m", "first", cwd=self.path)
        self.first = git("rev-parse", "HEAD", cwd=self.path)
        (self.path / "tasks" / "alpha" / "instruction.md").write_text("Alpha, second version.\n")
        git("commit", "--quiet", "-am", "second", cwd=self.path)
        self.second = git("rev-parse", "HEAD", cwd=self.path)
        self.url = self.path.as_uri()


@pytest.fixture
def repo(tmp_path: Path) -> TaskRepo:
    return TaskRepo(tmp_path)


def entry(*tasks: dict[str, Any], name: str = "mine", version: str = "1.0") -> RegistryDataset:
    return RegistryDataset.model_validate({"name": name, "version": version, "tasks": list(tasks)})


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """A real HTTP server on loopback serving `directory`; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- registry.json --------------------------------------------------------------------------


def test_the_seed_registry_example_parses() -> None:
    registry = load_registry(DATA / "seed-registry.json")
    assert [(d.name, d.version) for d in registry.datasets] == [
        ("hello-world", "head"),
        ("terminal-bench", "2.0"),
    ]
    hello = find_registry_dataset(registry, "hello-world", "head")
    (task,) = hello.tasks
    assert task.git_url == "https://github.com/laude-institute/harbor.git"
    assert task.git_commit_id is None
    assert task.path == "examples/tasks/hello-world"
    tb = find_registry_dataset(registry, "terminal-bench", "2.0")
    assert [t.name for t in tb.tasks] == ["adaptive-rejection-sampler", "bn-fit-modify"]
    assert {t.git_commit_id for t in tb.tasks} == {"69671fbaac6d67a7ef0dfec016cc38a64ef7a77c"}
    assert tb.description.startswith("Version 2.0 of Terminal-Bench")


def test_the_seed_multi_version_example_parses() -> None:
    registry = load_registry(str(DATA / "seed-multi-version.json"))
    name = "example multi version dataset"
    assert [d.version for d in registry.datasets] == ["1.0", "2.0", "alpha"]
    assert find_registry_dataset(registry, name, "alpha").version == "alpha"
    assert find_registry_dataset(registry, name, "2.0") is registry.datasets[1]


def test_an_unknown_dataset_lists_what_exists() -> None:
    registry = load_registry(DATA / "seed-registry.json")
    with pytest.raises(InvalidInput) as caught:
        find_registry_dataset(registry, "swe-bench", "1.0")
    (problem,) = caught.value.problems
    assert problem.file == str(DATA / "seed-registry.json")
    assert problem.field == "name"
    assert problem.message == (
        "no dataset named 'swe-bench'; the registry has: "
        "'hello-world' (versions head); 'terminal-bench' (versions 2.0)"
    )


def test_an_unknown_version_lists_the_versions() -> None:
    registry = load_registry(DATA / "seed-multi-version.json")
    with pytest.raises(InvalidInput) as caught:
        find_registry_dataset(registry, "example multi version dataset", "3.0")
    (problem,) = caught.value.problems
    assert problem.field == "version"
    assert problem.message == (
        "dataset 'example multi version dataset' has no version '3.0'; "
        "its versions: '1.0', '2.0', 'alpha'"
    )


def test_a_version_is_needed_only_when_there_are_several() -> None:
    registry = load_registry(DATA / "seed-multi-version.json")
    with pytest.raises(InvalidInput, match="has several versions"):
        find_registry_dataset(registry, "example multi version dataset")
    single = load_registry(DATA / "seed-registry.json")
    assert find_registry_dataset(single, "terminal-bench").version == "2.0"


GOOD_TASK = {"name": "t", "git_url": "https://example.com/r.git", "path": "t"}
MALFORMED = {
    "one dataset": ({"name": "x", "tasks": []}, None, "is one dataset (name, version, tasks)"),
    "an object": ({"name": "x"}, None, "must be a JSON list of datasets, found an object"),
    "a string": ("datasets", None, "must be a JSON list of datasets, found str"),
    "an item that is not an object": (["x"], "[0]", "valid dictionary"),
    "no name": ([{"version": "1", "tasks": []}], "[0].name", "Field required"),
    "no version": ([{"name": "x", "tasks": []}], "[0].version", "Field required"),
    "tasks not a list": ([{"name": "x", "version": "1", "tasks": {}}], "[0].tasks", "valid list"),
    "a task without git_url": (
        [{"name": "x", "version": "1", "tasks": [GOOD_TASK, {"name": "u", "path": "u"}]}],
        "[0].tasks[1].git_url",
        "Field required",
    ),
    "a task without name": (
        [{"name": "x", "version": "1", "tasks": [{"git_url": "https://e/r.git"}]}],
        "[0].tasks[0].name",
        "Field required",
    ),
    "an absolute path": (
        [{"name": "x", "version": "1", "tasks": [{**GOOD_TASK, "path": "/etc"}]}],
        "[0].tasks[0].path",
        "must be a relative path inside the repository",
    ),
    "a path leaving the repo": (
        [{"name": "x", "version": "1", "tasks": [{**GOOD_TASK, "path": "a/../../b"}]}],
        "[0].tasks[0].path",
        "must be a relative path inside the repository",
    ),
    "an option as URL": (
        [{"name": "x", "version": "1", "tasks": [{**GOOD_TASK, "git_url": "--upload-pack=sh"}]}],
        "[0].tasks[0].git_url",
        "is not a git URL or commit",
    ),
    "a numeric version": ([{"name": "x", "version": 2.0, "tasks": []}], "[0].version", "string"),
}


@pytest.mark.parametrize(("data", "field", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_registry(tmp_path: Path, data: Any, field: str | None, message: str) -> None:
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInput) as caught:
        load_registry(path)
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == (str(path), field)
    assert message in problem.message


def test_every_registry_problem_is_reported() -> None:
    data = [
        {"name": "a", "version": "1", "tasks": [{"name": "t"}]},
        {"name": "b", "tasks": []},
    ]
    with pytest.raises(InvalidInput) as caught:
        parse_registry(data, "reg.json")
    assert [p.field for p in caught.value.problems] == ["[0].tasks[0].git_url", "[1].version"]


def test_a_registry_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text('[\n  {"name": "x",\n   "version" "1"}\n]\n')
    with pytest.raises(InvalidInput) as caught:
        load_registry(path)
    assert str(caught.value) == (
        f"{path}: not valid JSON: Expecting ':' delimiter (line 3, column 14)"
    )


def test_a_missing_registry_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="registry file does not exist"):
        load_registry(tmp_path / "registry.json")


# --- Over HTTP ------------------------------------------------------------------------------


def test_a_registry_by_url(tmp_path: Path) -> None:
    shutil.copy(DATA / "seed-registry.json", tmp_path / "registry.json")
    with serve(tmp_path) as base:
        registry = load_registry(f"{base}/registry.json")
    assert registry.source == f"{base}/registry.json"
    assert registry.datasets == load_registry(DATA / "seed-registry.json").datasets


def test_a_registry_url_that_is_not_there(tmp_path: Path) -> None:
    with serve(tmp_path) as base, pytest.raises(InvalidInput) as caught:
        load_registry(f"{base}/missing.json")
    assert str(caught.value) == (
        f"{base}/missing.json: cannot download the registry: HTTP 404 File not found"
    )


def test_an_unreachable_registry_url() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no server now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(InvalidInput, match=r"cannot download the registry: .*refused"):
        load_registry(f"http://127.0.0.1:{port}/registry.json")


def test_a_registry_server_that_never_answers() -> None:
    with socket.socket() as sock:  # listens, so connections are accepted, but never replies
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/registry.json"
        with pytest.raises(InvalidInput) as caught:
            load_registry(url, timeout_sec=0.3)
    assert str(caught.value) == (
        f"{url}: cannot download the registry: no answer within 0.3 seconds"
    )


# --- Fetching tasks with git ----------------------------------------------------------------


def test_fetch_a_pinned_commit(repo: TaskRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    wanted = entry(
        {"name": "second", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/beta"},
        {"name": "first", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/alpha"},
    )
    dataset = fetch_registry_dataset(wanted, cache)
    assert dataset.name == "mine"
    assert dataset.version == "1.0"
    assert [t.name for t in dataset.tasks] == ["second", "first"]  # registry order, registry names
    assert dataset.tasks[1].instruction == "Alpha, first version.\n"
    assert dataset.tasks[1].config.environment.memory_bytes == 10**9
    tree = cache / hashlib.sha256(repo.url.encode()).hexdigest()[:16] / repo.first
    assert dataset.tasks[0].path == tree / "tasks" / "beta"
    # The checkout is the task as committed, exec bit included, and nothing of git inside it.
    assert (tree / "tasks" / "beta" / "tests" / "test.sh").stat().st_mode & 0o100
    assert task_content_hash(tree / "tasks" / "beta") == task_content_hash(
        repo.path / "tasks" / "beta"
    )
    assert not (tree / ".git").exists()


def test_a_pinned_commit_is_reused_from_the_cache(repo: TaskRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    task = {"name": "a", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/alpha"}
    fetch_registry_dataset(entry(task), cache)
    shutil.rmtree(repo.path)  # no repository any more: only the cache can answer
    dataset = fetch_registry_dataset(entry(task), cache)
    assert dataset.tasks[0].instruction == "Alpha, first version.\n"


def test_head_is_the_latest_commit(repo: TaskRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    dataset = fetch_registry_dataset(
        entry({"name": "a", "git_url": repo.url, "path": "tasks/alpha"}), cache
    )
    assert dataset.tasks[0].instruction == "Alpha, second version.\n"
    assert dataset.tasks[0].path.parent.parent.name == repo.second


def test_a_missing_commit(repo: TaskRepo, tmp_path: Path) -> None:
    missing = "0123456789abcdef0123456789abcdef01234567"
    task = {"name": "a", "git_url": repo.url, "git_commit_id": missing, "path": "tasks/alpha"}
    with pytest.raises(InvalidInput) as caught:
        fetch_registry_dataset(entry(task), tmp_path / "cache")
    assert str(caught.value) == (
        f"{repo.url}: git_commit_id {missing} is not a commit in the repository"
    )


def test_an_unreachable_repository(tmp_path: Path) -> None:
    url = (tmp_path / "no-such-repo").as_uri()
    with pytest.raises(InvalidInput) as caught:
        fetch_registry_dataset(entry({"name": "a", "git_url": url}), tmp_path / "cache")
    (problem,) = caught.value.problems
    assert problem.file == url
    assert problem.message.startswith("cannot fetch the repository: ")
    assert "does not appear to be a git repository" in problem.message


def test_a_path_not_in_the_repository_is_a_task_not_found(repo: TaskRepo, tmp_path: Path) -> None:
    task = {"name": "a", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/gamma"}
    good = {"name": "b", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/alpha"}
    dataset = fetch_registry_dataset(entry(task, good), tmp_path / "cache")
    assert [t.name for t in dataset.tasks] == ["a", "b"]
    (missing,) = dataset.broken
    assert missing.error_type is ErrorType.TASK_NOT_FOUND
    (problem,) = missing.problems
    assert (problem.file, problem.field) == (f"{repo.url} at {repo.first}", "tasks[0].path")
    assert problem.message == "no directory 'tasks/gamma' in the repo"
    assert missing.message == (
        f"Task 'a' was not found: {repo.url} at {repo.first}: tasks[0].path: "
        "no directory 'tasks/gamma' in the repo"
    )


def test_a_broken_task_in_the_repository_is_kept_beside_the_good_one(
    repo: TaskRepo, tmp_path: Path
) -> None:
    broken = {"name": "b", "git_url": repo.url, "git_commit_id": repo.first, "path": "broken"}
    good = {"name": "a", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/alpha"}
    dataset = fetch_registry_dataset(entry(good, broken), tmp_path / "cache")
    assert [type(t).__name__ for t in dataset.tasks] == ["Task", "BrokenTask"]
    (task,) = dataset.broken
    assert task.error_type is ErrorType.TASK_INVALID
    messages = [(Path(p.file).name, p.message.split(" (")[0]) for p in task.problems]
    assert messages == [("task.toml", "missing"), ("environment", "missing"), ("tests", "missing")]
    assert task.message.startswith("Task 'b' is invalid: task.toml: missing (")
    assert str(tmp_path) not in task.message  # the cache's path is this machine's


def test_a_task_name_twice(repo: TaskRepo, tmp_path: Path) -> None:
    task = {"name": "a", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/alpha"}
    with pytest.raises(InvalidInput) as caught:
        fetch_registry_dataset(entry(task, {**task, "path": "tasks/beta"}), tmp_path / "cache")
    (problem,) = caught.value.problems
    assert (problem.field, problem.message) == ("tasks[1].name", "'a' appears twice")


def test_dumb_http_falls_back_to_a_full_fetch(repo: TaskRepo, tmp_path: Path) -> None:
    # A static file server cannot fetch shallowly or by commit id: the full fetch must find the
    # first commit, which no branch points at any more.
    served = tmp_path / "www"
    served.mkdir()
    git("clone", "--quiet", "--bare", repo.url, str(served / "tasks.git"), cwd=tmp_path)
    git("update-server-info", cwd=served / "tasks.git")
    with serve(served) as base:
        url = f"{base}/tasks.git"
        task = {"name": "a", "git_url": url, "git_commit_id": repo.first, "path": "tasks/alpha"}
        dataset = fetch_registry_dataset(entry(task), tmp_path / "cache")
        head = fetch_registry_dataset(
            entry({"name": "a", "git_url": url, "path": "tasks/alpha"}), tmp_path / "cache"
        )
    assert dataset.tasks[0].instruction == "Alpha, first version.\n"
    assert head.tasks[0].instruction == "Alpha, second version.\n"


def test_a_registry_by_url_then_its_tasks(repo: TaskRepo, tmp_path: Path) -> None:
    # The whole path a job takes: download registry.json, pick the dataset, fetch its tasks.
    www = tmp_path / "www"
    www.mkdir()
    registry_data = [
        {
            "name": "local-bench",
            "version": "head",
            "description": "two tasks",
            "tasks": [
                {"name": "alpha", "git_url": repo.url, "path": "tasks/alpha"},
                {"name": "beta", "git_url": repo.url, "path": "tasks/beta"},
            ],
        }
    ]
    (www / "registry.json").write_text(json.dumps(registry_data))
    with serve(www) as base:
        registry: Registry = load_registry(f"{base}/registry.json")
    dataset = fetch_registry_dataset(
        find_registry_dataset(registry, "local-bench", "head"), tmp_path / "cache"
    )
    assert [t.name for t in dataset.tasks] == ["alpha", "beta"]
    assert "local-bench" in dataset.source


def test_an_older_commit_after_a_shallow_fetch(
    repo: TaskRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # First a shallow fetch of HEAD leaves history cut off at the second commit. Then, speaking
    # git protocol v0 (whose servers refuse unadvertised commit ids, as many servers do), the
    # first commit can only come from a full fetch that also removes the cut.
    cache = tmp_path / "cache"
    fetch_registry_dataset(entry({"name": "a", "git_url": repo.url, "path": "tasks/alpha"}), cache)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    task = {"name": "a", "git_url": repo.url, "git_commit_id": repo.first, "path": "tasks/alpha"}
    dataset = fetch_registry_dataset(entry(task), cache)
    assert dataset.tasks[0].instruction == "Alpha, first version.\n"
