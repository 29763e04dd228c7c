"""Task directories and local datasets: loading, every problem reported, stable content hashes."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from paths import (
    HARBOR,
    SHARED_TASKS,
    TERMINAL_BENCH,
    requires_shared_tasks,
    shared_task_dirs,
    task_dirs,
)
from rollout.api.dataset import load_local_dataset
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.taskdir import (
    environment_hash,
    load_task,
    require_oracle_solution,
    task_content_hash,
    tree_hash,
)

TASK_DIRS = [
    *[pytest.param(d, id=d.name) for d in task_dirs(HARBOR) + task_dirs(TERMINAL_BENCH)],
    *[
        pytest.param(d, id=f"shared-{d.name}", marks=requires_shared_tasks)
        for d in shared_task_dirs()
    ],
]


def make_task(root: Path, name: str = "task-a") -> Path:
    """A small valid task of our own, writable (the shared tasks are read-only)."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "instruction.md").write_text(f"Do the thing called {name}.\n")
    (task / "task.toml").write_text("[verifier]\ntimeout_sec = 30.0\n[environment]\ncpus = 2\n")
    (task / "environment" / "Dockerfile").write_text("FROM alpine:3.20\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (task / "tests" / "test.sh").chmod(0o755)
    (task / "solution" / "solve.sh").write_text("#!/bin/sh\ntrue\n")
    (task / "solution" / "solve.sh").chmod(0o755)
    return task


# --- Loading --------------------------------------------------------------------------------


@pytest.mark.parametrize("task_dir", TASK_DIRS)
def test_every_task_loads(task_dir: Path) -> None:
    task = load_task(task_dir)
    assert task.name == task_dir.name
    assert task.path == task_dir
    assert task.has_solution
    assert task.instruction == (task_dir / "instruction.md").read_text()
    assert task.instruction.strip()
    assert task.config.verifier.timeout_sec in (120.0, 900.0)
    assert task.dockerfile.is_file()


def test_a_loaded_task(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path), name="registry-name")
    assert task.name == "registry-name"
    assert task.instruction == "Do the thing called task-a.\n"
    assert task.config.verifier.timeout_sec == 30.0
    assert task.config.environment.cpus == "2"
    require_oracle_solution(task)  # has solution/solve.sh: no error


def test_the_task_name_is_the_directory_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_task(tmp_path, "named-by-dir")
    monkeypatch.chdir(tmp_path / "named-by-dir")
    assert load_task(".").name == "named-by-dir"
    assert load_task(Path("..") / "named-by-dir").name == "named-by-dir"


def test_a_task_without_a_solution(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    shutil.rmtree(task_dir / "solution")
    task = load_task(task_dir)
    assert not task.has_solution
    with pytest.raises(InvalidInput) as caught:
        require_oracle_solution(task)
    (problem,) = caught.value.problems
    assert problem.file == str(task_dir)
    assert problem.message == (
        "the oracle agent needs solution/solve.sh (or, as in seed 004, solve.sh at the task "
        "root), and the task has neither"
    )
    assert caught.value.error_type is ErrorType.TASK_INVALID


def test_a_solve_sh_at_the_task_root_is_the_oracle_s_solution(tmp_path: Path) -> None:
    # Seed 004: solve.sh at the root, where solution/solve.sh is absent.
    task_dir = make_task(tmp_path)
    shutil.rmtree(task_dir / "solution")
    (task_dir / "solve.sh").write_text("#!/bin/sh\ntrue\n")
    task = load_task(task_dir)
    assert task.solution == "solve.sh"
    require_oracle_solution(task)
    # Both: solution/solve.sh is the one (the seed's own layout).
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/sh\ntrue\n")
    assert load_task(task_dir).solution == "solution/solve.sh"


def test_a_solve_sh_at_the_root_that_is_not_a_file_is_invalid(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    (task_dir / "solve.sh").mkdir()
    with pytest.raises(InvalidInput) as caught:
        load_task(task_dir)
    assert str(caught.value) == f"{task_dir / 'solve.sh'}: is a directory, expected a file"
    assert caught.value.error_type is ErrorType.TASK_INVALID


def test_a_missing_task_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        load_task(tmp_path / "nope")
    assert caught.value.error_type is ErrorType.TASK_NOT_FOUND
    assert str(caught.value) == f"{tmp_path / 'nope'}: task directory does not exist"


def test_a_file_is_not_a_task(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="is not a directory") as caught:
        load_task(tmp_path / "file")
    assert caught.value.error_type is ErrorType.TASK_NOT_FOUND


def _remove(rel: str) -> Callable[[Path], None]:
    def change(task: Path) -> None:
        target = task / rel
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    return change


def _replace_with_dir(rel: str) -> Callable[[Path], None]:
    def change(task: Path) -> None:
        _remove(rel)(task)
        (task / rel).mkdir()

    return change


def _replace_with_file(rel: str) -> Callable[[Path], None]:
    def change(task: Path) -> None:
        _remove(rel)(task)
        (task / rel).write_text("not a directory\n")

    return change


def _write(rel: str, data: bytes) -> Callable[[Path], None]:
    def change(task: Path) -> None:
        (task / rel).write_bytes(data)

    return change


def _dangling_link(rel: str) -> Callable[[Path], None]:
    def change(task: Path) -> None:
        _remove(rel)(task)
        (task / rel).symlink_to("does-not-exist")

    return change


BROKEN_TASKS = [
    ("missing instruction.md", _remove("instruction.md"), "instruction.md", "missing"),
    ("empty instruction.md", _write("instruction.md", b" \n\n"), "instruction.md", "is empty"),
    ("instruction.md is a dir", _replace_with_dir("instruction.md"), "instruction.md", "directory"),
    ("binary instruction.md", _write("instruction.md", b"\xff\xfe"), "instruction.md", "UTF-8"),
    ("dangling instruction.md", _dangling_link("instruction.md"), "instruction.md", "broken"),
    ("missing task.toml", _remove("task.toml"), "task.toml", "missing"),
    ("bad TOML", _write("task.toml", b"[agent\n"), "task.toml", "not valid TOML"),
    ("missing environment/", _remove("environment"), "environment", "missing"),
    ("environment is a file", _replace_with_file("environment"), "environment", "is a file"),
    ("missing tests/", _remove("tests"), "tests", "missing"),
    ("tests is a file", _replace_with_file("tests"), "tests", "is a file, expected a directory"),
    ("missing tests/test.sh", _remove("tests/test.sh"), "tests/test.sh", "missing"),
    ("test.sh is a dir", _replace_with_dir("tests/test.sh"), "tests/test.sh", "a directory"),
    ("solve.sh is a dir", _replace_with_dir("solution/solve.sh"), "solution/solve.sh", "directory"),
]


@pytest.mark.parametrize(
    ("change", "rel", "message"), [b[1:] for b in BROKEN_TASKS], ids=[b[0] for b in BROKEN_TASKS]
)
def test_a_broken_task(
    tmp_path: Path, change: Callable[[Path], None], rel: str, message: str
) -> None:
    task_dir = make_task(tmp_path)
    change(task_dir)
    with pytest.raises(InvalidInput) as caught:
        load_task(task_dir)
    assert caught.value.error_type is ErrorType.TASK_INVALID
    (problem,) = caught.value.problems
    assert problem.file == str(task_dir / rel)
    assert message in problem.message
    assert str(caught.value).startswith(str(task_dir / rel))


def test_a_bad_field_in_task_toml_is_named(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    (task_dir / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(InvalidInput) as caught:
        load_task(task_dir)
    assert str(caught.value) == (
        f"{task_dir / 'task.toml'}: environment.memory: 'lots' is not a quantity "
        "(expected a number of MiB such as 2048, or a quantity such as '2G', '512Mi')"
    )


def test_every_problem_of_a_task_is_reported(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    (task_dir / "instruction.md").unlink()
    shutil.rmtree(task_dir / "environment")
    (task_dir / "tests" / "test.sh").unlink()
    (task_dir / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n")
    with pytest.raises(InvalidInput) as caught:
        load_task(task_dir)
    assert [
        (Path(p.file).relative_to(task_dir).as_posix(), p.field) for p in caught.value.problems
    ] == [
        ("instruction.md", None),
        ("task.toml", "verifier.timeout_sec"),
        ("environment", None),
        ("tests/test.sh", None),
    ]


# --- Content hashes -------------------------------------------------------------------------


def test_the_same_tree_in_two_places_hashes_the_same(tmp_path: Path) -> None:
    first = make_task(tmp_path / "one")
    second = make_task(tmp_path / "two")
    assert task_content_hash(first) == task_content_hash(second)
    assert environment_hash(first) == environment_hash(second)
    # A copy with other mtimes (and, from the read-only shared samples, other modes): same hash.
    for source in [TERMINAL_BENCH / "count-lines", *shared_task_dirs()[:1]]:
        copy = tmp_path / "copies" / source.name
        shutil.copytree(source, copy)
        assert task_content_hash(copy) == task_content_hash(source)


def test_a_known_tree_has_a_known_hash(tmp_path: Path) -> None:
    # Pins the hash format: a change here changes every image tag and bundle name in use.
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "sub" / "run.sh").chmod(0o755)
    (root / "data.txt").write_bytes(b"hello\n")
    (root / "link").symlink_to("sub/run.sh")
    # The format, written out: a version line, then per entry in path order the kind, the path,
    # and for files the exec flag and sha256 of the bytes, for links the target; each field
    # prefixed by its length as 8 bytes big-endian.

    def field(data: bytes) -> bytes:
        return len(data).to_bytes(8, "big") + data

    def sha(data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    stream = b"rollout-tree-v1\n"
    stream += field(b"f") + field(b"data.txt") + field(b"-") + field(sha(b"hello\n"))
    stream += field(b"l") + field(b"link") + field(b"sub/run.sh")
    stream += field(b"d") + field(b"sub")
    stream += field(b"f") + field(b"sub/run.sh") + field(b"x") + field(sha(b"#!/bin/sh\n"))
    expected = hashlib.sha256(stream).hexdigest()
    assert tree_hash(root) == expected
    assert expected == "ffeb51f31cccb1481b23623d53d23ebc283ae6313efb425a05625912f29ea446"


def _hash_after(tmp_path: Path, change: Callable[[Path], None]) -> tuple[str, str]:
    task = make_task(tmp_path)
    before = task_content_hash(task)
    change(task)
    return before, task_content_hash(task)


@pytest.mark.parametrize(
    "change",
    [
        _write("environment/Dockerfile", b"FROM alpine:3.21\n"),
        lambda t: (t / "tests" / "test.sh").rename(t / "tests" / "test2.sh"),
        lambda t: (t / "solution" / "solve.sh").chmod(0o644),
        lambda t: (t / "environment" / "empty-dir").mkdir(),
        lambda t: (t / "environment" / "link").symlink_to("Dockerfile"),
        lambda t: (t / "environment" / "extra").write_bytes(b""),
    ],
    ids=["a byte", "a name", "the exec bit", "an empty directory", "a symlink", "an empty file"],
)
def test_any_content_change_changes_the_hash(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    before, after = _hash_after(tmp_path, change)
    assert before != after


def test_a_symlink_target_is_content(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    (task / "environment" / "link").symlink_to("Dockerfile")
    before = task_content_hash(task)
    (task / "environment" / "link").unlink()
    (task / "environment" / "link").symlink_to("../instruction.md")
    assert task_content_hash(task) != before


@pytest.mark.parametrize(
    "change",
    [
        lambda t: os.utime(t / "instruction.md", (1, 1)),
        lambda t: os.utime(t / "environment", (2_000_000_000, 2_000_000_000)),
        lambda t: (t / "instruction.md").chmod(0o600),  # not the exec bit: not content
        lambda t: (t / "tests" / "test.sh").chmod(0o700),  # exec bit unchanged
    ],
    ids=["mtime of a file", "mtime of a directory", "read bits", "group exec bits"],
)
def test_metadata_is_not_content(tmp_path: Path, change: Callable[[Path], None]) -> None:
    before, after = _hash_after(tmp_path, change)
    assert before == after


def test_framing_keeps_different_trees_apart(tmp_path: Path) -> None:
    # Naive concatenation of name and bytes would make these equal: "a" + "bc" == "ab" + "c".
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "a").write_bytes(b"bc")
    (two / "ab").write_bytes(b"c")
    assert tree_hash(one) != tree_hash(two)
    # A file and a symlink with the same name and "content".
    three, four = tmp_path / "three", tmp_path / "four"
    three.mkdir()
    four.mkdir()
    (three / "x").write_bytes(b"target")
    (four / "x").symlink_to("target")
    assert tree_hash(three) != tree_hash(four)


def test_environment_hash_covers_environment_only(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    env_before, all_before = environment_hash(task), task_content_hash(task)
    (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n")
    assert environment_hash(task) == env_before
    assert task_content_hash(task) != all_before
    (task / "environment" / "Dockerfile").write_text("FROM alpine:3.21\n")
    assert environment_hash(task) != env_before


def test_special_files_are_refused(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    os.mkfifo(task / "environment" / "pipe")
    with pytest.raises(InvalidInput, match="pipe: is not a regular file, directory or symbolic"):
        task_content_hash(task)


# --- Local datasets -------------------------------------------------------------------------


def test_datasets_load_in_name_order() -> None:
    tb = load_local_dataset(TERMINAL_BENCH)
    assert tb.name == "terminal-bench"
    assert [t.name for t in tb.tasks] == ["count-lines", "sum-column"]
    harbor = load_local_dataset(HARBOR)
    assert [t.name for t in harbor.tasks] == ["hello-user", "hello-workdir", "hello-world"]
    assert str(HARBOR) in harbor.source


@requires_shared_tasks
def test_the_shared_datasets_load_in_name_order() -> None:
    tb = load_local_dataset(SHARED_TASKS / "terminal-bench-2-sample")
    assert tb.name == "terminal-bench-2-sample"
    assert [t.name for t in tb.tasks] == [
        "fix-git",
        "kv-store-grpc",
        "log-summary-date-ranges",
        "openssl-selfsigned-cert",
        "regex-log",
    ]
    harbor = load_local_dataset(SHARED_TASKS / "harbor-examples")
    assert [t.name for t in harbor.tasks] == [
        "hello-alpine",
        "hello-user",
        "hello-workdir",
        "hello-world",
    ]
    assert str(SHARED_TASKS / "harbor-examples") in harbor.source


def test_order_does_not_depend_on_creation_order(tmp_path: Path) -> None:
    for name in ("zeta", "alpha", "Mid", "beta-2", "beta-10"):
        make_task(tmp_path, name)
    dataset = load_local_dataset(tmp_path)
    assert [t.name for t in dataset.tasks] == ["Mid", "alpha", "beta-10", "beta-2", "zeta"]


def test_hidden_entries_plain_files_and_other_directories_are_ignored(tmp_path: Path) -> None:
    make_task(tmp_path, "real")
    (tmp_path / "README.md").write_text("# my dataset\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "task.toml").write_text("")
    make_task(tmp_path, ".hidden-task")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "make.py").write_text("")
    dataset = load_local_dataset(tmp_path)
    assert [t.name for t in dataset.tasks] == ["real"]


def test_dataset_toml_names_the_dataset(tmp_path: Path) -> None:
    make_task(tmp_path / "dir", "t")
    (tmp_path / "dir" / "dataset.toml").write_text(
        'name = "my-bench"\ndescription = "mine"\ndefault_sandbox = "docker"\n'
    )
    dataset = load_local_dataset(tmp_path / "dir")
    assert dataset.name == "my-bench"
    assert dataset.config.description == "mine"
    assert dataset.config.model_extra == {"default_sandbox": "docker"}


def test_broken_tasks_are_kept_in_their_places_and_the_others_load(tmp_path: Path) -> None:
    make_task(tmp_path, "good")
    (make_task(tmp_path, "bad-one") / "instruction.md").unlink()
    (make_task(tmp_path, "bad-two") / "task.toml").write_text("[environment]\ncpus = 'abc'\n")
    (tmp_path / "half-task").mkdir()
    (tmp_path / "half-task" / "instruction.md").write_text("only this\n")
    (tmp_path / "moved").symlink_to(Path("elsewhere") / "moved")
    # Files that could be neither hashed nor archived break their task only.
    os.mkfifo(make_task(tmp_path, "with-fifo") / "pipe")
    (make_task(tmp_path, "with-escape") / "secrets").symlink_to("../../etc")
    dataset = load_local_dataset(tmp_path)
    assert [(t.name, type(t).__name__) for t in dataset.tasks] == [
        ("bad-one", "BrokenTask"),
        ("bad-two", "BrokenTask"),
        ("good", "Task"),
        ("half-task", "BrokenTask"),
        ("moved", "BrokenTask"),
        ("with-escape", "BrokenTask"),
        ("with-fifo", "BrokenTask"),
    ]
    broken = {t.name: t for t in dataset.broken}
    assert {name: t.error_type for name, t in broken.items()} == {
        "bad-one": ErrorType.TASK_INVALID,
        "bad-two": ErrorType.TASK_INVALID,
        "half-task": ErrorType.TASK_INVALID,
        "moved": ErrorType.TASK_NOT_FOUND,
        "with-escape": ErrorType.TASK_INVALID,
        "with-fifo": ErrorType.TASK_INVALID,
    }
    # Every problem, naming files on this machine, as `rollout validate DATASET` reports them.
    found = [(Path(p.file).relative_to(tmp_path).as_posix(), p.field) for p in dataset.problems()]
    assert found == [
        ("bad-one/instruction.md", None),
        ("bad-two/task.toml", "environment.cpus"),
        ("half-task/task.toml", None),
        ("half-task/environment", None),
        ("half-task/tests", None),
        ("moved", None),
        ("with-escape/secrets", None),
        ("with-fifo/pipe", None),
    ]
    # The trials' messages name no path of this machine (they go into the manifest).
    assert broken["bad-one"].message == (
        "Task 'bad-one' is invalid: instruction.md: missing (the agent's instruction)"
    )
    assert broken["bad-two"].message.startswith(
        "Task 'bad-two' is invalid: task.toml: environment.cpus: "
    )
    assert broken["with-escape"].message == (
        "Task 'with-escape' is invalid: secrets: symbolic link to '../../etc' points outside the "
        "task"
    )
    assert broken["with-fifo"].message == (
        "Task 'with-fifo' is invalid: pipe: is not a regular file, directory or symbolic link"
    )
    assert broken["half-task"].message.startswith(
        "Task 'half-task' is invalid: task.toml: missing (the task's configuration); "
        "environment: missing"
    )
    assert broken["moved"].message == (
        "Task 'moved' was not found: is a symbolic link to 'elsewhere/moved', which does not exist"
    )
    assert all(str(tmp_path) not in t.message for t in dataset.broken)


def test_a_dataset_of_broken_tasks_only_still_loads(tmp_path: Path) -> None:
    (make_task(tmp_path, "only") / "tests" / "test.sh").unlink()
    dataset = load_local_dataset(tmp_path)
    (task,) = dataset.broken
    assert task.message == "Task 'only' is invalid: tests/test.sh: missing (the verifier runs it)"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no tasks found"),
        (lambda d: (d / "README.md").write_text("x"), "no tasks found"),
        (lambda d: _data_without_rows(d), "nor does data/ hold rows"),
    ],
    ids=["empty", "only files", "data without rows"],
)
def test_a_directory_without_tasks(
    tmp_path: Path, setup: Callable[[Path], object], message: str
) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    setup(root)
    with pytest.raises(InvalidInput) as caught:
        load_local_dataset(root)
    (problem,) = caught.value.problems
    assert problem.file == str(root)
    assert message in problem.message


def _data_without_rows(root: Path) -> None:
    # Data rows (test_dataset_shapes.py) and a task directory given as a dataset (a dataset of
    # that one task) load now; a data/ holding no rows file is still no dataset.
    (root / "data").mkdir()
    (root / "data" / "test.parquet").write_bytes(b"PAR1")


def test_a_missing_dataset_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="dataset directory does not exist"):
        load_local_dataset(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidInput, match="is not a directory"):
        load_local_dataset(tmp_path / "file")


def test_a_broken_dataset_toml(tmp_path: Path) -> None:
    make_task(tmp_path, "t")
    (tmp_path / "dataset.toml").write_text("name = \n")
    with pytest.raises(InvalidInput) as caught:
        load_local_dataset(tmp_path)
    (problem,) = caught.value.problems
    assert problem.file == str(tmp_path / "dataset.toml")
    assert "not valid TOML" in problem.message
    (tmp_path / "dataset.toml").write_text("name = 3\n")
    with pytest.raises(InvalidInput) as caught:
        load_local_dataset(tmp_path)
    assert [(p.file, p.field) for p in caught.value.problems] == [
        (str(tmp_path / "dataset.toml"), "name")
    ]


# --- Dockerfile lifts (seed 004) --------------------------------------------------------------


def test_a_dockerfile_of_only_settings_lifts_into_the_tasks_config() -> None:
    config = load_task(HARBOR / "hello-world").config.environment
    assert (config.docker_image, config.workdir) == ("ubuntu:24.04", "/app")


def test_task_toml_wins_over_what_the_dockerfile_sets(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    (task / "environment" / "Dockerfile").write_text(
        "FROM alpine:3.20\nWORKDIR /srv\nENV A=from-dockerfile B=kept\n"
    )
    (task / "task.toml").write_text(
        '[environment]\nworkdir = "/mine"\n[environment.env]\nA = "from-task"\n'
    )
    config = load_task(task).config.environment
    assert (config.docker_image, config.workdir) == ("alpine:3.20", "/mine")
    assert config.env == {"A": "from-task", "B": "kept"}
    # A task that names its image never reads its Dockerfile.
    (task / "task.toml").write_text('[environment]\ndocker_image = "mine:1"\n')
    (task / "environment" / "Dockerfile").write_text("not a dockerfile at all\n")
    assert load_task(task).config.environment.docker_image == "mine:1"


def test_a_dockerfile_that_needs_a_build_lifts_nothing(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    (task / "environment" / "Dockerfile").write_text("FROM alpine:3.20\nRUN apk add git\n")
    config = load_task(task).config.environment
    assert (config.docker_image, config.workdir) == (None, None)


def test_a_dockerfile_docker_would_refuse_makes_the_task_invalid(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    (task / "environment" / "Dockerfile").write_text("ARG BASE\nFROM $BASE\n")
    with pytest.raises(InvalidInput) as caught:
        load_task(task)
    assert caught.value.error_type is ErrorType.TASK_INVALID
    assert "is not a valid Dockerfile" in str(caught.value)
    assert "an ARG with no default before FROM" in str(caught.value)
