"""The runner's half of claiming a request and reading its answer (`rollout_runner.shim_requests`),
on request directories alone: a shim of protocol 3 claims by creating `taken` and writes `rc` in
one write; one of protocols 1 and 2 claims by renaming `go` and writes `rc` by a rename."""

from __future__ import annotations

from pathlib import Path

from rollout.api.wire import shim
from rollout_runner.shim_requests import cancel_unstarted, request_file_exists


def request(tmp_path: Path) -> Path:
    directory = tmp_path / "req" / "00000001-aaaaaa"
    directory.mkdir(parents=True)
    (directory / "go").write_text("run\n")
    return directory


def test_protocol_3_a_request_is_the_first_creators_of_taken(tmp_path: Path) -> None:
    unstarted = request(tmp_path)
    assert cancel_unstarted(unstarted, 3)
    assert (unstarted / "taken").read_text() == "cancelled\n"
    assert (unstarted / "go").exists()  # the shim skips a request with `taken`
    assert not cancel_unstarted(unstarted, 3)  # once

    started = request(tmp_path / "other")
    (started / "taken").write_text("")  # the shim's claim
    assert not cancel_unstarted(started, 3)
    assert (started / "taken").read_text() == ""


def test_protocols_1_and_2_a_request_is_the_first_renamers_of_go(tmp_path: Path) -> None:
    for version in (1, 2):
        unstarted = request(tmp_path / str(version))
        assert cancel_unstarted(unstarted, version)
        assert not (unstarted / "go").exists()
        assert (unstarted / shim.CANCELLED_FILE).read_text() == "run\n"
        assert not cancel_unstarted(unstarted, version)

    started = request(tmp_path / "taken")
    (started / "go").rename(started / "taken")  # the shim's claim
    assert not cancel_unstarted(started, 2)


def test_an_empty_rc_is_not_an_answer_yet(tmp_path: Path) -> None:
    rc = request(tmp_path) / "rc"
    assert not request_file_exists(rc)
    rc.write_text("")  # protocol 3: created, not written yet
    assert not request_file_exists(rc)
    rc.write_text("0\n")
    assert request_file_exists(rc)
