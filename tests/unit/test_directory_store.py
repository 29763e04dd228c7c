"""`DirectoryStore`: a bucket's keys as files under a directory, with ObjectStore's semantics."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.layout import task_archive_key
from rollout.storage import (
    DirectoryStore,
    InvalidKey,
    ObjectNotFound,
    StorageError,
    directory_from_env,
)
from rollout.storage.directory import TEMP_DIR

RESULT = "jobs/j1/oracle/offline/hello__1/result.json"


@pytest.fixture
def store(tmp_path: Path) -> DirectoryStore:
    root = tmp_path / "store"
    root.mkdir()
    return DirectoryStore(root)


def test_a_key_is_a_file_under_the_root(store: DirectoryStore) -> None:
    store.put_bytes(RESULT, b"{}")
    assert (store.root / RESULT).read_bytes() == b"{}"
    assert store.get_bytes(RESULT) == b"{}"
    assert store.exists(RESULT)
    assert store.uri(RESULT) == f"file://{store.root}/{RESULT}"


def test_the_prefix_is_kept_as_a_location_keeps_it(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "/runs/a/")
    assert store.prefix == "runs/a"
    assert store.key("tasks", "h.tar.gz") == "runs/a/tasks/h.tar.gz"
    assert task_archive_key(store.prefix, "h") == "runs/a/tasks/h.tar.gz"
    assert DirectoryStore(tmp_path).key("jobs/j1", "result.json") == "jobs/j1/result.json"


def test_a_missing_object_is_object_not_found(store: DirectoryStore) -> None:
    store.put_bytes("jobs/j1/config.json", b"{}")
    for missing in ("jobs/j1/result.json", "jobs/j1", "jobs/j1/config.json/x", "tasks/h.tar.gz"):
        with pytest.raises(ObjectNotFound, match="no such object"):
            store.get_bytes(missing)
        assert not store.exists(missing)


def test_an_upload_copies_the_file_and_replaces_an_object(
    store: DirectoryStore, tmp_path: Path
) -> None:
    source = tmp_path / "result.json"
    source.write_bytes(b"new")
    store.put_bytes(RESULT, b"old")
    store.upload_file(source, RESULT)
    assert store.get_bytes(RESULT) == b"new"


def test_a_missing_source_file_is_its_os_error_and_writes_nothing(
    store: DirectoryStore, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        store.upload_file(tmp_path / "gone.txt", RESULT)
    assert store.list_keys("") == []


def test_put_new_never_replaces_an_object(store: DirectoryStore) -> None:
    assert store.put_new("jobs/j1/config.json", b"first") is True
    assert store.put_new("jobs/j1/config.json", b"second") is False
    assert store.get_bytes("jobs/j1/config.json") == b"first"


def test_of_writers_racing_with_put_new_exactly_one_wins(store: DirectoryStore) -> None:
    start = threading.Barrier(8)
    won: list[bytes] = []

    def write(n: int) -> None:
        start.wait()
        if store.put_new("jobs/j1/config.json", f"writer {n}".encode()):
            won.append(f"writer {n}".encode())

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert store.get_bytes("jobs/j1/config.json") == won[0]


def test_a_failed_write_leaves_the_old_object_and_no_temporary_file(
    store: DirectoryStore, tmp_path: Path
) -> None:
    store.put_bytes(RESULT, b"old and whole")
    unreadable = tmp_path / "a-directory"
    unreadable.mkdir()
    with pytest.raises(IsADirectoryError):
        store.upload_file(unreadable, RESULT)  # a source that cannot be read is its OSError
    with pytest.raises(StorageError):
        store.put_bytes(f"{RESULT}/inner", b"x")  # fails once its temporary file is written
    assert store.get_bytes(RESULT) == b"old and whole"
    assert list((store.root / TEMP_DIR).iterdir()) == []
    assert store.list_keys("") == [RESULT]


def test_a_written_file_never_holds_part_of_an_object(store: DirectoryStore) -> None:
    # The object's file is another inode with each write (rename): a reader holding the old
    # one keeps reading all of the old content.
    store.put_bytes(RESULT, b"A" * 100_000)
    with (store.root / RESULT).open("rb") as reader:
        store.put_bytes(RESULT, b"B" * 100_000)
        assert reader.read() == b"A" * 100_000
    assert store.get_bytes(RESULT) == b"B" * 100_000


def test_keys_are_listed_in_s3_order_by_utf8_bytes(store: DirectoryStore) -> None:
    keys = ["jobs/j1/b", "jobs/j1/a/z", "jobs/j1/a-b", "jobs/j1/é", "jobs/j1/Z", "jobs/j10/x"]
    for key in keys:
        store.put_bytes(key, b"")
    assert store.list_keys("jobs/j1") == sorted(keys, key=lambda k: k.encode())
    # "jobs/j1/a-b" before "jobs/j1/a/z" ('-' < '/'), unlike a walk's directory order.
    assert store.list_keys("jobs/j1/") == [
        "jobs/j1/Z",
        "jobs/j1/a-b",
        "jobs/j1/a/z",
        "jobs/j1/b",
        "jobs/j1/é",
    ]
    assert store.list_keys("jobs/j1/a") == ["jobs/j1/a-b", "jobs/j1/a/z"]
    assert store.list_keys("nothing/") == []


def test_symlinks_and_special_files_are_no_objects(store: DirectoryStore) -> None:
    store.put_bytes("jobs/j1/real", b"x")
    (store.root / "jobs/j1/link").symlink_to(store.root / "jobs/j1/real")
    os.mkfifo(store.root / "jobs/j1/fifo")
    assert store.list_keys("jobs/") == ["jobs/j1/real"]
    for other in ("jobs/j1/fifo", "jobs/j1/link"):
        with pytest.raises(ObjectNotFound):
            store.get_bytes(other)  # and never blocks on the FIFO
        assert not store.exists(other)


@pytest.mark.parametrize(
    "key",
    ["/etc/passwd", "../outside", "jobs/../../outside", "jobs//x", "jobs/./x", "a\\b", "", "jobs/"],
)
def test_a_key_that_could_leave_the_root_is_refused(store: DirectoryStore, key: str) -> None:
    with pytest.raises(InvalidKey, match="refused"):
        store.put_bytes(key, b"x")
    with pytest.raises(InvalidKey):
        store.get_bytes(key)
    assert not (store.root.parent / "outside").exists()


def test_the_temporary_directory_is_no_key(store: DirectoryStore) -> None:
    with pytest.raises(InvalidKey, match=TEMP_DIR):
        store.put_bytes(f"{TEMP_DIR}/x", b"x")


def test_no_write_goes_through_a_symlink_out_of_the_root(
    store: DirectoryStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.root / "jobs").symlink_to(outside)
    with pytest.raises(StorageError, match="symlink"):
        store.put_bytes("jobs/j1/result.json", b"x")
    assert list(outside.iterdir()) == []


def test_a_failure_on_the_stores_side_is_a_storage_error(store: DirectoryStore) -> None:
    store.put_bytes("jobs/j1/result.json", b"x")
    # S3 can have both; a directory cannot.
    with pytest.raises(StorageError) as caught:
        store.put_bytes("jobs/j1/result.json/inner", b"y")
    assert not isinstance(caught.value, ObjectNotFound)
    assert caught.value.operation == "put_bytes"
    assert str(store.root) in str(caught.value)


def test_it_needs_no_credentials(store: DirectoryStore) -> None:
    assert store.secrets() == []


@pytest.mark.parametrize("root", ["relative/dir", "/no/such/directory"])
def test_the_root_must_be_an_absolute_directory(root: str) -> None:
    with pytest.raises(ValueError, match=r"absolute path|not a directory"):
        DirectoryStore(root)


# Chosen from the environment.


def test_without_rollout_storage_dir_storage_is_a_bucket() -> None:
    assert directory_from_env({"ROLLOUT_STORAGE_BUCKET": "b"}) is None
    assert directory_from_env({"ROLLOUT_STORAGE_DIR": ""}) is None


def test_rollout_storage_dir_names_the_directory_and_needs_nothing_else(tmp_path: Path) -> None:
    store = directory_from_env(
        {"ROLLOUT_STORAGE_DIR": str(tmp_path), "ROLLOUT_STORAGE_PREFIX": "p"}
    )
    assert store is not None
    assert store.root == tmp_path.resolve()
    assert store.prefix == "p"


@pytest.mark.parametrize(
    ("value", "said"),
    [("relative/dir", "is not an absolute path"), ("/no/such/directory", "is not a directory")],
)
def test_a_bad_rollout_storage_dir_is_refused_by_name(value: str, said: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        directory_from_env({"ROLLOUT_STORAGE_DIR": value})
    assert "ROLLOUT_STORAGE_DIR" in str(caught.value)
    assert said in str(caught.value)


def test_a_file_is_no_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(InvalidInput, match=r"ROLLOUT_STORAGE_DIR.*is not a directory"):
        directory_from_env({"ROLLOUT_STORAGE_DIR": str(tmp_path / "f")})


def test_a_directory_and_a_bucket_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="ROLLOUT_STORAGE_BUCKET both name"):
        directory_from_env({"ROLLOUT_STORAGE_DIR": str(tmp_path), "ROLLOUT_STORAGE_BUCKET": "b"})


def test_a_bad_prefix_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="ROLLOUT_STORAGE_PREFIX"):
        directory_from_env(
            {"ROLLOUT_STORAGE_DIR": str(tmp_path), "ROLLOUT_STORAGE_PREFIX": "a/../b"}
        )


# --- jobs_dir: a job's objects in another directory ------------------------------------------


@pytest.fixture
def split(tmp_path: Path) -> DirectoryStore:
    (tmp_path / "cache").mkdir()
    (tmp_path / "jobs-here").mkdir()
    return DirectoryStore(tmp_path / "cache", jobs_dir=tmp_path / "jobs-here")


def test_with_jobs_dir_a_jobs_key_is_a_file_under_it_and_other_keys_stay_under_the_root(
    split: DirectoryStore, tmp_path: Path
) -> None:
    split.put_bytes(RESULT, b"{}")
    split.put_bytes(task_archive_key("", "abc"), b"tar")
    assert (tmp_path / "jobs-here/j1/oracle/offline/hello__1/result.json").read_bytes() == b"{}"
    assert not (tmp_path / "cache/jobs").exists()
    assert (tmp_path / "cache/tasks/abc.tar.gz").read_bytes() == b"tar"
    assert split.get_bytes(RESULT) == b"{}"
    assert split.uri(RESULT).endswith("/jobs-here/j1/oracle/offline/hello__1/result.json")
    # Each tree writes through a temporary directory of its own (no rename across filesystems).
    assert (tmp_path / "jobs-here" / TEMP_DIR).is_dir()


def test_with_jobs_dir_keys_are_listed_from_both_trees_under_their_keys(
    split: DirectoryStore, tmp_path: Path
) -> None:
    split.put_bytes(RESULT, b"{}")
    split.put_bytes("jobs/j2/config.json", b"{}")
    split.put_bytes(task_archive_key("", "abc"), b"tar")
    (tmp_path / "cache/jobs").mkdir()
    (tmp_path / "cache/jobs/stray.json").write_text("not an object: jobs/ is in jobs_dir")
    assert split.list_keys("jobs/j1/") == [RESULT]
    assert split.list_keys("jobs/") == [
        "jobs/j1/oracle/offline/hello__1/result.json",
        "jobs/j2/config.json",
    ]
    assert split.list_keys("") == [
        "jobs/j1/oracle/offline/hello__1/result.json",
        "jobs/j2/config.json",
        "tasks/abc.tar.gz",
    ]
    assert split.list_keys("tasks/") == ["tasks/abc.tar.gz"]


def test_with_jobs_dir_the_temporary_directory_there_is_no_key(split: DirectoryStore) -> None:
    with pytest.raises(InvalidKey):
        split.put_bytes(f"jobs/{TEMP_DIR}/x", b"")


def test_rollout_storage_jobs_dir_places_the_jobs_and_needs_rollout_storage_dir(
    tmp_path: Path,
) -> None:
    (tmp_path / "results").mkdir()
    store = directory_from_env(
        {
            "ROLLOUT_STORAGE_DIR": str(tmp_path),
            "ROLLOUT_STORAGE_JOBS_DIR": str(tmp_path / "results"),
        }
    )
    assert store is not None
    assert store.path(RESULT) == tmp_path.resolve() / "results" / RESULT.removeprefix("jobs/")
    with pytest.raises(InvalidInput, match=r"ROLLOUT_STORAGE_JOBS_DIR.*needs ROLLOUT_STORAGE_DIR"):
        directory_from_env({"ROLLOUT_STORAGE_JOBS_DIR": str(tmp_path)})
