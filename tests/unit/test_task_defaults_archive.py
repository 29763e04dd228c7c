"""dataset.toml's defaults travel in a task's archive (`rollout.api.taskdir.DEFAULTS_FILE`), so
that the runner, which loads the task from its archive, sees the config the manifest holds; a task
without defaults keeps its archive and content hash as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout.api.dataset import Dataset, load_dataset_path
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.job import JobDataset
from rollout.api.layout import task_archive_key
from rollout.api.taskdir import (
    DEFAULTS_FILE,
    BrokenTask,
    Task,
    encode_defaults,
    load_archived_task,
    load_task,
    load_task_or_broken,
    task_content_hash,
    task_tree,
    tree_hash,
    walk_tree,
)
from rollout.cli.prepare import prepare_dataset
from rollout.cli.publish import publish_datasets
from rollout.datasets.bundle import build_manifest, task_archive
from rollout.storage import DirectoryStore
from rollout_runner.archive import extract_task_archive

DEFAULTS_TOML = (
    "[verifier]\ntimeout_sec = 45\n"
    '[verifier.env]\nJUDGE = "strict"\n'
    '[environment]\nworkdir = "/work"\n'
    '[environment.env]\nGREETING = "from the dataset"\nSHARED = "dataset"\n'
)


def make_task(root: Path, name: str, task_toml: str = "") -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text(f"Do {name}.\n")
    (task / "task.toml").write_text(task_toml)
    (task / "environment" / "Dockerfile").write_text("FROM alpine:3.20\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (task / "tests" / "test.sh").chmod(0o755)
    return task


def make_dataset(root: Path, dataset_toml: str | None, *tasks: tuple[str, str]) -> Path:
    root.mkdir(parents=True)
    if dataset_toml is not None:
        (root / "dataset.toml").write_text(dataset_toml)
    for name, task_toml in tasks:
        make_task(root, name, task_toml)
    return root


def only_task(dataset: Dataset) -> Task:
    (task,) = dataset.tasks
    assert isinstance(task, Task), task
    return task


def unpacked(data: bytes, dest: Path) -> Path:
    extract_task_archive(data, dest)
    return dest


# --- What a task carries ---------------------------------------------------------------------


def test_a_task_without_defaults_keeps_its_archive_and_hash(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", 'name = "plain"\n', ("t", "[agent]\ntimeout_sec = 5\n"))
    task = only_task(load_dataset_path(root))
    assert task.defaults_json is None
    assert task_tree(task) == walk_tree(task.path)
    assert task_content_hash(task) == tree_hash(task.path) == task_content_hash(task.path)
    assert task_archive(task) == task_archive(task.path)
    assert build_manifest(load_dataset_path(root)).tasks[0].content_hash == tree_hash(task.path)


def test_defaults_that_change_nothing_are_not_carried(tmp_path: Path) -> None:
    own = '[verifier]\ntimeout_sec = 45\n[verifier.env]\nJUDGE = "strict"\n'
    dataset_toml = "[verifier]\ntimeout_sec = 45\n"
    root = make_dataset(tmp_path / "ds", dataset_toml, ("t", own))
    task = only_task(load_dataset_path(root))
    assert task.defaults_json is None
    assert task_archive(task) == task_archive(task.path)


def test_inherited_defaults_travel_in_the_archive(tmp_path: Path) -> None:
    root = make_dataset(
        tmp_path / "ds", DEFAULTS_TOML, ("t", '[environment.env]\nSHARED = "task"\n')
    )
    before = tree_hash(root / "t")
    dataset = load_dataset_path(root)
    task = only_task(dataset)
    defaults = dataset.config.task_defaults()
    assert task.defaults_json == encode_defaults(defaults)
    assert json.loads(task.defaults_json) == defaults

    entry = build_manifest(dataset).tasks[0]
    assert entry.content_hash == task_content_hash(task) != before
    copy = unpacked(task_archive(task), tmp_path / "runner" / "task")
    # The runner's check: the unpacked archive's tree is what its name says.
    assert tree_hash(copy) == entry.content_hash
    assert (copy / DEFAULTS_FILE).read_text(encoding="utf-8") == task.defaults_json
    assert DEFAULTS_FILE in [e.path for e in walk_tree(copy)]  # a file like any other

    loaded = load_archived_task(copy, name="t")
    assert loaded.config == task.config
    assert loaded.config.to_dict() == entry.config
    assert loaded.config.environment.env == {"GREETING": "from the dataset", "SHARED": "task"}
    assert loaded.config.verifier.env == {"JUDGE": "strict"}
    assert (loaded.config.verifier.timeout_sec, loaded.config.environment.workdir) == (45, "/work")
    # Unpacked and archived again, it is the same archive; the author's directory is untouched.
    assert task_archive(loaded) == task_archive(task)
    assert task_content_hash(loaded) == entry.content_hash
    assert tree_hash(root / "t") == before
    assert not (root / "t" / DEFAULTS_FILE).exists()


def test_without_its_defaults_file_the_runner_would_see_another_config(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", DEFAULTS_TOML, ("t", ""))
    task = only_task(load_dataset_path(root))
    copy = unpacked(task_archive(task.path), tmp_path / "old" / "task")  # as before the fix
    assert load_archived_task(copy).config.environment.env == {}
    assert task.config.environment.env == {"GREETING": "from the dataset", "SHARED": "dataset"}


def test_the_defaults_file_does_not_depend_on_key_order(tmp_path: Path) -> None:
    one = make_dataset(tmp_path / "one", DEFAULTS_TOML, ("t", ""))
    reordered = (
        '[environment.env]\nSHARED = "dataset"\nGREETING = "from the dataset"\n'
        '[environment]\nworkdir = "/work"\n'
        '[verifier]\ntimeout_sec = 45\n[verifier.env]\nJUDGE = "strict"\n'
    )
    two = make_dataset(tmp_path / "two", reordered, ("t", ""))
    other = make_dataset(tmp_path / "other", "[agent]\ntimeout_sec = 9\n", ("t", ""))
    hashes = [task_content_hash(only_task(load_dataset_path(d))) for d in (one, two, other)]
    assert hashes[0] == hashes[1] != hashes[2]
    assert tree_hash(one / "t") == tree_hash(two / "t") == tree_hash(other / "t")


def test_publishing_uploads_the_archive_the_manifest_names(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", DEFAULTS_TOML, ("a", ""), ("b", "[agent]\nuser = 'me'\n"))
    prepared = prepare_dataset(JobDataset(path=str(root)), tmp_path / "cache")
    (tmp_path / "store").mkdir()
    store = DirectoryStore(tmp_path / "store")
    (report,) = publish_datasets(store, [prepared], workers=2, build_contexts=False)
    assert report.archives_uploaded == 2
    for index, entry in enumerate(prepared.manifest.tasks):
        assert entry.content_hash is not None
        data = store.get_bytes(task_archive_key(store.prefix, entry.content_hash))
        copy = unpacked(data, tmp_path / "runner" / str(index))
        assert tree_hash(copy) == entry.content_hash
        assert load_archived_task(copy, name=entry.name).config.to_dict() == entry.config


# --- What an author may not do ----------------------------------------------------------------


def test_an_authors_defaults_file_is_refused(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "sneaky")
    smuggled = {"environment": {"env": {"SECRET_MODE": "on"}}}
    (task_dir / DEFAULTS_FILE).write_text(json.dumps(smuggled))
    with pytest.raises(InvalidInput) as caught:
        load_task(task_dir)
    assert caught.value.error_type is ErrorType.TASK_INVALID
    (problem,) = caught.value.problems
    assert problem.file == str(task_dir / DEFAULTS_FILE)
    assert "is reserved" in problem.message
    assert "dataset.toml" in problem.message

    broken = load_task_or_broken(task_dir, defaults={"agent": {"timeout_sec": 3}})
    assert isinstance(broken, BrokenTask)
    assert broken.error_type is ErrorType.TASK_INVALID
    assert broken.message.startswith(f"Task 'sneaky' is invalid: {DEFAULTS_FILE}: is reserved")


def test_a_dataset_with_a_smuggled_defaults_file_keeps_the_task_broken(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", DEFAULTS_TOML, ("good", ""), ("sneaky", ""))
    (root / "sneaky" / DEFAULTS_FILE).write_text("{}")
    good, sneaky = load_dataset_path(root).tasks
    assert isinstance(good, Task)
    assert isinstance(sneaky, BrokenTask)
    assert build_manifest(load_dataset_path(root)).tasks[1].content_hash is None


def test_an_archived_task_without_a_defaults_file_loads_as_it_is(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "t", "[agent]\ntimeout_sec = 5\n")
    task = load_archived_task(task_dir)
    assert task.defaults_json is None
    assert task.config == load_task(task_dir).config


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "is not a defaults file as rollout writes it: Expecting"),
        (b'["environment"]', "a JSON object of tables (verifier, agent, environment)"),
        (b'{"metadata": {"x": 1}}', "a JSON object of tables (verifier, agent, environment)"),
        (b'{"agent": 5}', "a JSON object of tables (verifier, agent, environment)"),
        (b"\xff", "is not a defaults file as rollout writes it: 'utf-8' codec"),
    ],
    ids=["not json", "a list", "another table", "not a table", "not utf-8"],
)
def test_a_bad_carried_defaults_file_is_task_invalid(
    tmp_path: Path, content: bytes, message: str
) -> None:
    task_dir = make_task(tmp_path, "t")
    (task_dir / DEFAULTS_FILE).write_bytes(content)
    with pytest.raises(InvalidInput) as caught:
        load_archived_task(task_dir)
    assert caught.value.error_type is ErrorType.TASK_INVALID
    (problem,) = caught.value.problems
    assert problem.file == str(task_dir / DEFAULTS_FILE)
    assert message in problem.message


def test_a_carried_defaults_file_that_is_a_directory_is_task_invalid(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "t")
    (task_dir / DEFAULTS_FILE).mkdir()
    with pytest.raises(InvalidInput) as caught:
        load_archived_task(task_dir)
    (problem,) = caught.value.problems
    assert problem.message.endswith("it is a directory")


def test_a_default_json_cannot_carry_makes_the_task_invalid(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", "[environment]\nsince = 1979-05-27\n", ("t", ""))
    (task,) = load_dataset_path(root).tasks
    assert isinstance(task, BrokenTask)
    assert task.error_type is ErrorType.TASK_INVALID
    assert task.message == (
        "Task 't' is invalid: its dataset.toml's defaults cannot travel in its archive (as JSON, "
        "for the runner): datetime.date(1979, 5, 27) is a TOML date, which JSON cannot carry"
    )
    # A task that sets the key itself inherits nothing JSON cannot carry.
    own = '[environment]\nsince = "x"\n'
    overridden = make_dataset(tmp_path / "ds2", "[environment]\nsince = 1979-05-27\n", ("t", own))
    assert only_task(load_dataset_path(overridden)).defaults_json is None
