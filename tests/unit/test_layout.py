"""Object storage keys and local paths: the seed's layout, exactly, and nothing that escapes."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from rollout.api import layout
from rollout.api.layout import (
    check_relative_path,
    dataset_manifest_key,
    job_config_key,
    job_prefix,
    job_result_key,
    local_job_dir,
    local_trial_dir,
    normalize_prefix,
    parse_s3_uri,
    s3_uri,
    task_archive_key,
    trial_path,
    trial_prefix,
)


@pytest.mark.parametrize(
    ("prefix", "normal"),
    [
        ("", ""),
        ("/", ""),
        ("a/b", "a/b/"),
        ("a/b/", "a/b/"),
        ("/a//b/", "a/b/"),
        ("results", "results/"),
    ],
)
def test_prefixes_are_normalised(prefix: str, normal: str) -> None:
    assert normalize_prefix(prefix) == normal
    assert job_config_key(prefix, "run") == f"{normal}jobs/run/config.json"


def test_job_keys() -> None:
    assert job_prefix("", "my-eval-run") == "jobs/my-eval-run/"
    assert job_config_key("", "my-eval-run") == "jobs/my-eval-run/config.json"
    assert job_result_key("a/b", "my-eval-run") == "a/b/jobs/my-eval-run/result.json"
    assert job_result_key("a/b/", "2025-01-15__10-30-00") == (
        "a/b/jobs/2025-01-15__10-30-00/result.json"
    )


def test_trial_keys() -> None:
    trial = trial_prefix("a/b", "my-eval-run", "cpe", "terminal-bench", "hello-world", 2)
    assert trial == "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/"
    files = [
        layout.RESULT_JSON,
        layout.ERROR_TXT,
        layout.SETUP_STDOUT,
        layout.SETUP_STDERR,
        layout.COMMAND_STDOUT,
        layout.COMMAND_STDERR,
        f"{layout.LOGS_DIR}/verifier/reward.txt",
    ]
    assert [trial + f for f in files] == [
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/result.json",
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/error.txt",
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/setup/stdout.txt",
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/setup/stderr.txt",
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/command/stdout.txt",
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/command/stderr.txt",
        "a/b/jobs/my-eval-run/cpe/terminal-bench/hello-world__2/logs/verifier/reward.txt",
    ]
    assert trial_prefix("", "j", "oracle", "d", "t", 1) == "jobs/j/oracle/d/t__1/"


def test_dataset_bundle_keys() -> None:
    assert dataset_manifest_key("", "sha256-abc") == "datasets/sha256-abc.json"
    assert task_archive_key("p/", "0123abcd") == "p/tasks/0123abcd.tar.gz"


def test_local_layout_matches_storage_layout(tmp_path: Path) -> None:
    trial = local_trial_dir(tmp_path, "my-eval-run", "cpe", "terminal-bench", "hello-world", 1)
    assert trial == tmp_path / "my-eval-run" / "cpe" / "terminal-bench" / "hello-world__1"
    assert local_job_dir(tmp_path, "my-eval-run") == tmp_path / "my-eval-run"
    # The same relative part under the job, locally and in the bucket.
    relative = trial.relative_to(local_job_dir(tmp_path, "my-eval-run"))
    key = trial_prefix("x", "my-eval-run", "cpe", "terminal-bench", "hello-world", 1)
    assert key == job_prefix("x", "my-eval-run") + relative.as_posix() + "/"
    assert trial_path("cpe", "terminal-bench", "hello-world", 1) == PurePosixPath(
        "cpe/terminal-bench/hello-world__1"
    )


BAD_COMPONENTS = ["", ".", "..", "a/b", "/", "a\0b", "a\\b"]


@pytest.mark.parametrize("bad", BAD_COMPONENTS)
def test_components_that_could_escape_are_refused(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="job name"):
        job_prefix("", bad)
    with pytest.raises(ValueError, match="agent name"):
        trial_prefix("", "j", bad, "d", "t", 1)
    with pytest.raises(ValueError, match="dataset name"):
        trial_prefix("", "j", "a", bad, "t", 1)
    with pytest.raises(ValueError, match="task name"):
        local_trial_dir(tmp_path, "j", "a", "d", bad, 1)
    with pytest.raises(ValueError, match="job name"):
        local_job_dir(tmp_path, bad)
    with pytest.raises(ValueError, match="manifest digest"):
        dataset_manifest_key("", bad)
    with pytest.raises(ValueError, match="content hash"):
        task_archive_key("", bad)


def test_names_with_dots_and_spaces_are_kept_verbatim() -> None:
    assert trial_prefix("", "j", "My Agent", "tb@2.0", "..hidden", 1) == (
        "jobs/j/My Agent/tb@2.0/..hidden__1/"
    )


@pytest.mark.parametrize("prefix", ["a/../b", "./a", "a/\0"])
def test_prefix_segments_that_could_escape_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        normalize_prefix(prefix)


def test_attempt_must_be_positive() -> None:
    with pytest.raises(ValueError, match="attempt"):
        trial_path("a", "d", "t", 0)


def test_relative_paths() -> None:
    assert check_relative_path("logs/verifier/reward.txt") == PurePosixPath(
        "logs/verifier/reward.txt"
    )
    for bad in ["../x", "/etc/passwd", "a//b", "a/./b", "logs/..", "", "logs/"]:
        with pytest.raises(ValueError, match="path"):
            check_relative_path(bad)


def test_s3_uris() -> None:
    key = job_result_key("a/b", "run")
    assert s3_uri("results", key) == "s3://results/a/b/jobs/run/result.json"
    assert parse_s3_uri("s3://results/a/b/jobs/run/result.json") == (
        "results",
        "a/b/jobs/run/result.json",
    )
    assert parse_s3_uri("s3://bucket") == ("bucket", "")
    with pytest.raises(ValueError, match="slash"):
        s3_uri("results", "/jobs/run/result.json")
    with pytest.raises(ValueError, match="bucket"):
        s3_uri("", "k")
    with pytest.raises(ValueError, match="s3://"):
        parse_s3_uri("https://results/k")


def test_names_too_long_for_a_file_name_are_cut_with_a_hash() -> None:
    """255 bytes is the limit of a path component on ext4, XFS, btrfs, APFS and NTFS: a longer
    name would make `rollout download` fail with ENAMETOOLONG."""
    long_task, other_task = "t" * 300, "t" * 299 + "u"
    trial = trial_path("a" * 256, "d" * 300, long_task, 12)
    assert [len(part.encode()) for part in trial.parts[:2]] == [255, 255]
    assert len(trial.name.encode()) <= 255
    assert trial.name.endswith("__12")
    assert trial.name.startswith("t" * 200)
    assert trial_path("a", "d", other_task, 12).name != trial.name
    assert trial_path("a", "d", long_task, 1).name.removesuffix("__1") == trial.name.removesuffix(
        "__12"
    )
    # the rule is the same for a job's own directory
    assert len(job_prefix("", "j" * 300).split("/")[1].encode()) == 255
    assert local_job_dir(Path("jobs"), "j" * 300).name == job_prefix("", "j" * 300).split("/")[1]


def test_names_that_fit_are_kept_and_multibyte_names_are_cut_between_characters() -> None:
    fits = "é" * 125  # 250 bytes, and "__1" makes 253
    assert trial_path("a", "d", fits, 1).name == f"{fits}__1"
    cut = trial_path("a", "d", "é" * 200, 1).name
    assert len(cut.encode()) <= 255
    assert cut.startswith("é" * 100)
    # a cut name is itself a name that fits: naming a trial by its directory finds the same one
    assert trial_path("a", "d", cut.removesuffix("__1"), 1).name == cut
