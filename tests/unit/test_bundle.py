"""Task archives (deterministic, safe to extract) and dataset manifests."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
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
from rollout.api.manifest import DatasetManifest, canonical_json, manifest_digest
from rollout.api.taskdir import task_content_hash
from rollout.datasets.bundle import build_manifest, task_archive
from rollout_runner.archive import extract_task_archive

HELLO_WORLD = HARBOR / "hello-world"


def _copy_with_mtime(source: Path, dest: Path, mtime: int) -> Path:
    shutil.copytree(source, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # the shared samples are read-only
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return dest


def _tree(root: Path) -> dict[str, tuple[str, bool, bytes]]:
    """What a tree holds: per relative path its kind, exec bit and bytes (or link target)."""
    out: dict[str, tuple[str, bool, bytes]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", False, os.readlink(path).encode())
        elif path.is_dir():
            out[rel] = ("dir", False, b"")
        else:
            out[rel] = ("file", bool(path.stat().st_mode & 0o100), path.read_bytes())
    return out


# --- Archives -------------------------------------------------------------------------------


def test_the_same_task_gives_the_same_bytes(tmp_path: Path) -> None:
    one = _copy_with_mtime(HELLO_WORLD, tmp_path / "a" / "hello-world", 1_000_000)
    two = _copy_with_mtime(HELLO_WORLD, tmp_path / "elsewhere" / "copy", 1_700_000_000)
    (two / "instruction.md").chmod(0o600)  # other permission bits are not content either
    assert task_archive(one) == task_archive(two) == task_archive(HELLO_WORLD)


def test_a_changed_task_gives_different_bytes(tmp_path: Path) -> None:
    task = _copy_with_mtime(HELLO_WORLD, tmp_path / "t", 0)
    before = task_archive(task)
    (task / "solution" / "solve.sh").chmod(0o644)
    assert task_archive(task) != before


def test_archive_members_are_normalised() -> None:
    data = task_archive(HELLO_WORLD)
    assert data[:2] == b"\x1f\x8b"
    assert data[4:8] == b"\0\0\0\0"  # gzip header mtime
    assert data[3] & 0x08 == 0  # no file name in the gzip header
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert names == [
        "environment",
        "environment/Dockerfile",
        "instruction.md",
        "solution",
        "solution/solve.sh",
        "task.toml",
        "tests",
        "tests/test.sh",
        "tests/test_state.py",
    ]
    for member in members:
        assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (
            0,
            0,
            0,
            "",
            "",
        )
    modes = {m.name: m.mode for m in members}
    assert modes["environment"] == 0o755
    assert modes["instruction.md"] == 0o644
    assert modes["solution/solve.sh"] == 0o755  # r-xr-xr-x in the source: the exec bit counts
    assert modes["task.toml"] == 0o644  # r--r--r-- in the source


def test_an_archive_extracts_to_the_same_tree(tmp_path: Path) -> None:
    task = _copy_with_mtime(HELLO_WORLD, tmp_path / "src", 5)
    (task / "environment" / "nested" / "deeper").mkdir(parents=True)
    (task / "environment" / "nested" / "deeper" / "data.bin").write_bytes(bytes(range(256)))
    (task / "environment" / "empty").mkdir()
    (task / "environment" / "alias").symlink_to("Dockerfile")
    (task / "environment" / "nested" / "up").symlink_to("../Dockerfile")
    dest = tmp_path / "out"
    extract_task_archive(task_archive(task), dest)
    assert _tree(dest) == _tree(task)
    assert task_content_hash(dest) == task_content_hash(task)
    assert (dest / "environment" / "alias").read_bytes() == (
        task / "environment" / "Dockerfile"
    ).read_bytes()
    assert os.readlink(dest / "environment" / "nested" / "up") == "../Dockerfile"


def test_every_task_round_trips(tmp_path: Path) -> None:
    tasks = task_dirs(HARBOR) + task_dirs(TERMINAL_BENCH) + shared_task_dirs()
    assert len(tasks) >= 5
    for index, task_dir in enumerate(tasks):
        dest = tmp_path / f"{index}-{task_dir.name}"  # names repeat across the datasets
        extract_task_archive(task_archive(task_dir), dest)
        assert task_content_hash(dest) == task_content_hash(task_dir)


def test_extracting_into_an_empty_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    extract_task_archive(task_archive(HELLO_WORLD), tmp_path / "dest")
    assert (tmp_path / "dest" / "task.toml").read_bytes() == (
        HELLO_WORLD / "task.toml"
    ).read_bytes()


def test_extracting_over_something_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "old").write_text("x")
    with pytest.raises(InvalidInput, match="extraction needs a missing or empty directory"):
        extract_task_archive(task_archive(HELLO_WORLD), tmp_path / "dest")


def test_a_task_linking_outside_itself_cannot_be_archived(tmp_path: Path) -> None:
    task = _copy_with_mtime(HELLO_WORLD, tmp_path / "t", 0)
    (task / "environment" / "secrets").symlink_to("../../../etc/passwd")
    with pytest.raises(InvalidInput, match="points outside the task") as caught:
        task_archive(task)
    assert caught.value.problems[0].file == str(task / "environment" / "secrets")


# --- Hostile archives -----------------------------------------------------------------------


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"pwned\n") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


HOSTILE = {
    "parent": ([_file("../evil.txt")], "../evil.txt", "leaves the task directory"),
    "deep parent": ([_file("a/../../evil.txt")], "a/../../evil.txt", "leaves the task"),
    "absolute": ([_file("/tmp/evil.txt")], "/tmp/evil.txt", "absolute path"),
    "absolute link": (
        [_special("l", tarfile.SYMTYPE, "/etc/passwd")],
        "l",
        "leaves the task directory",
    ),
    "escaping link": (
        [_special("sub/l", tarfile.SYMTYPE, "../../outside")],
        "sub/l",
        "leaves the task directory",
    ),
    "through a link": (
        [_special("l", tarfile.SYMTYPE, "sub"), _file("l/x")],
        "l/x",
        "written through a symbolic link",
    ),
    "link chain": (
        [_special("a", tarfile.SYMTYPE, "."), _special("b", tarfile.SYMTYPE, "a/..")],
        "b",
        "leaves the task",
    ),
    "hard link": ([_file("f"), _special("h", tarfile.LNKTYPE, "f")], "h", "hard links"),
    "device": ([_special("dev", tarfile.CHRTYPE)], "dev", "devices, FIFOs"),
    "fifo": ([_special("fifo", tarfile.FIFOTYPE)], "fifo", "devices, FIFOs"),
    "duplicate": ([_file("x"), _file("./x")], "./x", "appears twice"),
    "the root as a file": ([_file(".")], ".", "names the task directory itself"),
}


@pytest.mark.parametrize(("members", "name", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_archives_are_refused(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], name: str, message: str
) -> None:
    (tmp_path / "box").mkdir()
    dest = tmp_path / "box" / "dest"
    with pytest.raises(InvalidInput) as caught:
        extract_task_archive(_archive(*members), dest)
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == ("task archive", name)
    assert message in problem.message
    assert caught.value.error_type is ErrorType.TASK_INVALID
    # Nothing was left behind, inside or outside.
    assert not dest.exists() or not any(dest.iterdir())
    assert sorted(p.name for p in tmp_path.rglob("*")) in (["box"], ["box", "dest"])


def test_an_archive_made_by_tar_itself(tmp_path: Path) -> None:
    # `tar -czf - -C dir .` names the root "./" and everything "./x": accepted as it is.
    info = tarfile.TarInfo("./")
    info.type = tarfile.DIRTYPE
    sub = tarfile.TarInfo("./sub")
    sub.type = tarfile.DIRTYPE
    data = _archive((info, None), (sub, None), _file("./sub/file.txt", b"data\n"))
    extract_task_archive(data, tmp_path / "dest")
    assert _tree(tmp_path / "dest") == {
        "sub": ("dir", False, b""),
        "sub/file.txt": ("file", False, b"data\n"),
    }


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a gzip",
        gzip.compress(b"not a tar" * 100),
        task_archive(HELLO_WORLD)[:300],  # cut short in transfer
    ],
    ids=["empty", "not gzip", "not tar", "truncated"],
)
def test_garbage_is_not_an_archive(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(InvalidInput, match=r"not a valid tar\.gz"):
        extract_task_archive(data, tmp_path / "dest")


# --- Manifests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "image_owner"),
    [
        (TERMINAL_BENCH, "rollout-tests"),
        pytest.param(
            SHARED_TASKS / "terminal-bench-2-sample", "alexgshaw", marks=requires_shared_tasks
        ),
    ],
)
def test_manifest_of_a_dataset(directory: Path, image_owner: str) -> None:
    dataset = load_local_dataset(directory)
    manifest = build_manifest(dataset)
    assert manifest.name == directory.name
    assert [t.name for t in manifest.tasks] == [t.name for t in dataset.tasks]
    for entry, task in zip(manifest.tasks, dataset.tasks, strict=True):
        assert entry.content_hash == task_content_hash(task.path)
        assert len(entry.content_hash) == 64
        assert entry.has_solution is True
        assert entry.config["environment"]["docker_image"] == f"{image_owner}/{task.name}:20251031"
        assert entry.task_config() == task.config


def test_manifest_digest_is_stable_and_content_addressed(tmp_path: Path) -> None:
    for name in ("hello-user", "hello-world"):
        _copy_with_mtime(HARBOR / name, tmp_path / "ds" / name, 7)
    first = build_manifest(load_local_dataset(tmp_path / "ds"))
    shutil.copytree(tmp_path / "ds", tmp_path / "copy" / "ds")
    again = build_manifest(load_local_dataset(tmp_path / "copy" / "ds"))
    assert manifest_digest(first) == manifest_digest(again)
    assert len(manifest_digest(first)) == 64
    (tmp_path / "ds" / "hello-user" / "instruction.md").write_text("Something else.\n")
    changed = build_manifest(load_local_dataset(tmp_path / "ds"))
    assert manifest_digest(changed) != manifest_digest(first)
    assert changed.tasks[1] == first.tasks[1]
    assert changed.tasks[0].content_hash != first.tasks[0].content_hash


def test_manifest_json_is_canonical_and_reads_back() -> None:
    manifest = build_manifest(load_local_dataset(HARBOR))
    raw = canonical_json(manifest)
    data = json.loads(raw)
    assert raw == json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    assert list(data) == sorted(data)
    assert list(data["tasks"][0]["config"]) == sorted(data["tasks"][0]["config"])
    again = DatasetManifest.model_validate_json(raw)
    assert again == manifest
    assert manifest_digest(again) == manifest_digest(manifest)


def test_a_manifest_with_unknown_keys_is_refused() -> None:
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        DatasetManifest.model_validate({"name": "x", "tasks": [], "surprise": 1})


def test_a_broken_task_is_listed_with_its_error_and_no_archive(tmp_path: Path) -> None:
    _copy_with_mtime(HELLO_WORLD, tmp_path / "ds" / "good", 7)
    broken = _copy_with_mtime(HELLO_WORLD, tmp_path / "ds" / "broken", 7)
    (broken / "task.toml").write_text("version = \n")
    manifest = build_manifest(load_local_dataset(tmp_path / "ds"))
    data = json.loads(canonical_json(manifest))
    bad, good = data["tasks"]
    assert bad["name"] == "broken"
    assert set(bad) == {"name", "has_solution", "error"}
    assert bad["error"]["type"] == "task_invalid"
    assert bad["error"]["message"].startswith("Task 'broken' is invalid: task.toml: not valid TOML")
    # A runnable task's entry has the keys it always had: no `"error": null`, so a dataset
    # without broken tasks keeps its digest.
    assert set(good) == {"name", "content_hash", "environment_hash", "config", "has_solution"}
    assert DatasetManifest.model_validate_json(canonical_json(manifest)) == manifest
    # The same broken dataset elsewhere has the same digest (its message names no local path).
    shutil.copytree(tmp_path / "ds", tmp_path / "moved" / "ds", symlinks=True)
    moved = build_manifest(load_local_dataset(tmp_path / "moved" / "ds"))
    assert manifest_digest(moved) == manifest_digest(manifest)


def test_a_manifest_written_before_task_errors_reads_and_keeps_its_bytes() -> None:
    old = (
        b'{"name":"ds","tasks":[{"config":{"version":"1.0"},"content_hash":"'
        + b"a" * 64
        + b'","has_solution":true,"name":"t"}]}'
    )
    manifest = DatasetManifest.model_validate_json(old)
    assert manifest.tasks[0].error is None
    assert canonical_json(manifest) == old


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "t", "config": {}, "has_solution": False}, "needs its content_hash and config"),
        (
            {"name": "t", "error": {"type": "verifier_failed", "message": "m"}},
            "task_invalid or task_not_found",
        ),
        (
            {
                "name": "t",
                "content_hash": "a" * 64,
                "error": {"type": "task_invalid", "message": "m"},
            },
            "has no archive",
        ),
    ],
    ids=["no hash", "not a task error", "broken with an archive"],
)
def test_a_manifest_task_is_runnable_or_broken(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DatasetManifest.model_validate({"name": "ds", "tasks": [entry]})
