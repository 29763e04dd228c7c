"""The shim itself: its text, its protocol files, and its fallbacks on images that lack tools.

The shim runs as PID 1 of a fake container (see fakecontainer.py); these tests write requests by
hand where the protocol is the point, and use ShimEnvironment where behaviour is.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import pytest

from fakecontainer import (
    FakeContainer,
    busybox_missing_reason,
    eventually,
    fake_container,
    requires_fake_container,
    shell_params,
)
from rollout.api.wire import shim
from rollout_runner.shim_environment import ShimEnvironment
from rollout_runner.shim_requests import wake_shim

pytestmark = pytest.mark.integration

GRACE_SEC = 0.3


async def ready_env(container: FakeContainer) -> ShimEnvironment:
    environment = ShimEnvironment(container.control_dir, kill_grace_sec=GRACE_SEC)
    await environment.wait_ready(timeout_sec=20)
    return environment


def submit(
    control_dir: Path, request_id: str, line: str, files: Mapping[str, str] | None = None
) -> Path:
    """Write a request the way the protocol says: files first, then `go` by a rename."""
    request = control_dir / "req" / request_id
    request.mkdir(parents=True)
    for name, text in (files or {}).items():
        (request / name).write_text(text)
    (request / "go.tmp").write_text(line + "\n")
    os.rename(request / "go.tmp", request / "go")
    return request


def answered(request: Path) -> bool:
    """Whether the shim wrote the request's `rc` (protocol 3: one write, empty until then)."""
    try:
        return (request / "rc").stat().st_size > 0
    except FileNotFoundError:
        return False


# -- the text ------------------------------------------------------------------------------------


def test_the_shim_is_small_enough_to_pass_inline() -> None:
    assert len(shim.SHIM_TEXT.encode()) < 8 * 1024
    assert shim.shim_command() == ["/bin/sh", "-c", shim.SHIM_TEXT, "rollout-shim", "/rollout"]
    assert shim.shim_command("/ctl")[-1] == "/ctl"


@pytest.mark.parametrize(
    "shell", [["dash"], ["bash", "--posix"], ["busybox", "sh"]], ids=["dash", "bash", "busybox"]
)
def test_every_shell_parses_the_shim(shell: list[str]) -> None:
    if shutil.which(shell[0]) is None:
        pytest.skip(f"{shell[0]} is not installed")
    checked = subprocess.run([*shell, "-n", "-c", shim.SHIM_TEXT], capture_output=True, check=False)
    assert checked.returncode == 0, checked.stderr.decode()
    assert checked.stderr == b""


# -- the protocol, by hand -----------------------------------------------------------------------


@requires_fake_container()
async def test_ready_file_and_a_hand_written_request(container: FakeContainer) -> None:
    ready = container.control_dir / "ready"
    await eventually(ready.exists, "the shim writes ready")
    fields = dict(line.split("=", 1) for line in ready.read_text().splitlines())
    assert fields["version"] == str(shim.PROTOCOL_VERSION)
    assert fields["pid"] == "1"
    assert fields["dir"] == "/rollout"
    assert fields["cwd"] == "/app"
    assert fields["setsid"] == "setsid"
    assert fields["su"] == "su"
    assert not (container.control_dir / ".ready").exists()

    # The command prints its own session id: the shim's `pid` file must name that session.
    command = "read -r l </proc/self/stat; set -- ${l##*) }; echo $4; echo oops >&2; exit 4"
    request = submit(container.control_dir, "00000001-aaaaaa", "run", {"cmd": command})
    await eventually(lambda: answered(request), "the shim answers")
    # Protocol 3: claimed by creating `taken` (no rename, no process started), `go` left.
    assert (request / "go").read_text() == "run\n"
    assert (request / "taken").read_text() == ""
    session = (request / "pid").read_text().strip()
    assert (request / "out").read_text() == session + "\n"
    assert (request / "err").read_text() == "oops\n"
    assert (request / "rc").read_text() == "4\n"
    assert not (request / "rc.t").exists()


@requires_fake_container()
async def test_unknown_requests_and_kills_of_unknown_ids_are_answered(
    container: FakeContainer,
) -> None:
    await eventually((container.control_dir / "ready").exists, "the shim writes ready")
    unknown = submit(container.control_dir, "00000001-bbbbbb", "dance")
    await eventually(lambda: answered(unknown), "the shim answers the unknown request")
    assert (unknown / "rc").read_text() == "2\n"
    assert "unknown request dance" in (unknown / "err").read_text()

    kill = submit(container.control_dir, "00000002-bbbbbb", "kill 99999999-nothing 100")
    await eventually(lambda: answered(kill), "the shim answers the kill")
    assert (kill / "rc").read_text() == "0\n"


@requires_fake_container()
async def test_a_request_cancelled_before_the_shim_takes_it_never_runs(
    container: FakeContainer,
) -> None:
    environment = await ready_env(container)
    (container.control_dir / "req").mkdir(exist_ok=True)
    request = submit(container.control_dir, "00000001-cccccc", "run", {"cmd": "touch /logs/ran"})
    try:  # protocol 3: whoever creates `taken` first has the request
        os.close(os.open(request / "taken", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pytest.skip("the shim took the request first")
    # A later request is served, so the shim has looked at the queue since.
    assert (await environment.run("true", timeout_sec=10)).exit_code == 0
    assert not (container.logs_dir / "ran").exists()
    assert not (request / "rc").exists()


# -- waiting for requests: the wake FIFO (protocols 2 and 3) --------------------------------------


@requires_fake_container()
@pytest.mark.parametrize("shell", shell_params())
async def test_the_shim_waits_on_its_wake_fifo_and_its_ticker_survives_kill_all(
    shell: str, tmp_path: Path
) -> None:
    with fake_container(tmp_path, shell) as container:
        environment = await ready_env(container)
        assert environment.info is not None
        assert environment.info.version == 3
        wake = container.control_dir / shim.WAKE_FIFO
        assert stat.S_ISFIFO(wake.stat().st_mode)
        assert stat.S_IMODE(wake.stat().st_mode) == 0o600
        # The shim (PID 1) holds it open on fd 3 (read-write: a wake is never lost), and no
        # command it runs inherits that descriptor.
        init = container.init_host_pid()
        assert init is not None
        assert os.readlink(f"/proc/{init}/fd/3").endswith(f"/{shim.WAKE_FIFO}")
        inherited = await environment.run("readlink /proc/$$/fd/3 || echo none", timeout_sec=10)
        assert inherited.stdout == b"none\n"

        # kill-all spares the ticker (in the shim's group), and requests go on being served.
        await environment.kill_all()
        again = await environment.run("echo alive", timeout_sec=10)
        assert again.stdout == b"alive\n"


@requires_fake_container()
async def test_a_request_nobody_wakes_the_shim_for_is_taken_by_the_next_tick(
    container: FakeContainer,
) -> None:
    """A runner that cannot write the FIFO (or an older one that never does) still gets its
    answer: the shim's ticker wakes it every second."""
    await eventually((container.control_dir / "ready").exists, "the shim writes ready")
    request = submit(container.control_dir, "00000001-cccccc", "run", {"cmd": "echo ticked"})
    await eventually(lambda: answered(request), "the shim answers on its ticker", within=10)
    assert (request / "out").read_text() == "ticked\n"


@requires_fake_container()
async def test_without_mkfifo_the_shim_speaks_protocol_1_and_polls(tmp_path: Path) -> None:
    with fake_container(tmp_path, "/bin/sh", hide=["mkfifo"]) as container:
        environment = await ready_env(container)
        assert environment.info is not None
        assert environment.info.version == 1
        assert not (container.control_dir / shim.WAKE_FIFO).exists()
        result = await environment.run("echo polled", timeout_sec=10)
        assert result.stdout == b"polled\n"
        # Protocol 1 claims by renaming `go` to `taken`, and answers by renaming rc.t to rc.
        request = submit(container.control_dir, "99999999-ffffff", "run", {"cmd": "exit 3"})
        await eventually(lambda: answered(request), "the polling shim answers", within=10)
        assert (request / "taken").read_text() == "run\n"
        assert not (request / "go").exists()
        assert (request / "rc").read_text() == "3\n"
        # It polls for requests, but the runner's done FIFO needs no mkfifo of the image's: the
        # shim announces its answers all the same.
        assert environment.waits_on_done_fifo
        assert environment.stats.notifications == 1


# -- answers announced: the runner's done FIFO ----------------------------------------------------


def read_ids(fd: int) -> list[str]:
    try:
        return os.read(fd, 4096).decode().split()
    except BlockingIOError:
        return []


def shim_processes(container: FakeContainer) -> list[int]:
    """The shim and its subshells (handlers, ticker): processes with the shim's own argv."""
    return [p.pid for p in container.processes() if shim.SHIM_NAME in p.argv and p.state != "Z"]


@requires_fake_container()
async def test_the_shim_writes_the_id_of_each_ended_request_to_the_done_fifo(
    container: FakeContainer,
) -> None:
    ready = container.control_dir / shim.READY_FILE
    await eventually(ready.exists, "the shim writes ready")
    assert "done=1" in ready.read_text().splitlines()
    done = container.control_dir / shim.DONE_FIFO
    os.mkfifo(done, 0o600)
    fd = os.open(done, os.O_RDWR | os.O_NONBLOCK)
    try:
        ran = submit(container.control_dir, "00000001-dddddd", "run", {"cmd": "echo one"})
        unknown = submit(container.control_dir, "00000002-dddddd", "dance")
        wake_shim(container.control_dir / shim.WAKE_FIFO)
        ids: list[str] = []

        def both_ended() -> bool:
            ids.extend(read_ids(fd))
            return len(ids) >= 2

        await eventually(both_ended, "two ids in the FIFO")
        assert sorted(ids) == ["00000001-dddddd", "00000002-dddddd"]
        # Each line came once its request's rc was there.
        assert (ran / "rc").read_text() == "0\n"
        assert (unknown / "rc").read_text() == "2\n"
    finally:
        os.close(fd)


@requires_fake_container()
async def test_a_done_fifo_nobody_reads_holds_no_handler_up(container: FakeContainer) -> None:
    """Opened read-write, the FIFO never blocks the shim's handlers, reader or none."""
    await eventually((container.control_dir / shim.READY_FILE).exists, "the shim writes ready")
    os.mkfifo(container.control_dir / shim.DONE_FIFO, 0o600)
    for number in range(1, 4):
        request = submit(container.control_dir, f"0000000{number}-eeeeee", "run", {"cmd": "true"})
        wake_shim(container.control_dir / shim.WAKE_FIFO)
        await eventually(partial(answered, request), f"the shim answers request {number}")
    # Left: the shim and its ticker (protocol 3), no handler blocked on the FIFO.
    await eventually(lambda: len(shim_processes(container)) == 2, "every handler ends")


# -- fallbacks on images without the usual tools --------------------------------------------------


@requires_fake_container()
@pytest.mark.parametrize("shell", shell_params())
async def test_without_setsid_kills_still_reach_the_whole_tree(shell: str, tmp_path: Path) -> None:
    with fake_container(tmp_path, shell, hide=["setsid"]) as container:
        environment = await ready_env(container)
        assert environment.info is not None
        assert not environment.info.has_setsid
        assert environment.info.version == 1  # the wake FIFO's ticker needs setsid: polling
        command = "sh -c 'trap \"\" TERM; exec sleep 4321' & (sleep 4322 &) ; sleep 4323"
        result = await environment.run(command, timeout_sec=1)
        assert result.timed_out
        for marker in ("4321", "4323"):
            assert container.processes_running(marker) == [], marker

        # Whatever escaped the tree (an orphan, re-parented to the shim) goes with kill_all,
        # which spares the shim's own polling (never a survivor: each one would fail).
        await environment.kill_all()
        assert container.processes_running("4322") == []
        await environment.kill_all()
        await environment.kill_all()
        again = await environment.run("echo alive", timeout_sec=10)
        assert again.stdout == b"alive\n"


@requires_fake_container()
@pytest.mark.parametrize(
    ("hide", "tool"),
    [(["su"], "runuser"), (["su", "runuser"], "setpriv")],
    ids=["runuser", "setpriv"],
)
async def test_other_tools_switch_user_where_su_is_missing(
    hide: list[str], tool: str, tmp_path: Path
) -> None:
    with fake_container(tmp_path, "/bin/sh", hide=hide) as container:
        environment = await ready_env(container)
        assert environment.info is not None
        assert environment.info.user_switch == tool
        result = await environment.run(
            'whoami; echo "$SECRET"', user="agent", env={"SECRET": "s3"}, timeout_sec=10
        )
        assert result.stdout == b"agent\ns3\n", result.stderr


@requires_fake_container()
async def test_no_tool_to_switch_user_fails_the_command_clearly(tmp_path: Path) -> None:
    with fake_container(tmp_path, "/bin/sh", hide=["su", "runuser", "setpriv"]) as container:
        environment = await ready_env(container)
        result = await environment.run("whoami", user="agent", timeout_sec=10)
        assert result.exit_code == 126
        assert b"no su, runuser or setpriv to run as agent" in result.stderr
        assert (await environment.run("whoami", timeout_sec=10)).stdout == b"root\n"


@requires_fake_container()
async def test_the_shim_runs_under_bash_posix(tmp_path: Path) -> None:
    with fake_container(tmp_path, "/bin/bash") as container:
        environment = await ready_env(container)
        assert [p.argv[:2] for p in container.processes() if p.pid == 1] == [
            ["/bin/bash", "--posix"]
        ]
        result = await environment.run("echo $0; exit 5", env={"A": "b"}, timeout_sec=10)
        assert (result.stdout, result.exit_code) == (b"/bin/sh\n", 5)
        timed_out = await environment.run("(setsid sleep 3456 &); sleep 3457", timeout_sec=0.5)
        assert timed_out.timed_out
        assert container.processes_running("3457") == []
        await environment.kill_all()
        assert container.processes_running("3456") == []
        await environment.stop(9)
        assert container.wait_exit(timeout=10) == 9


def test_busybox_variant_is_skipped_with_a_reason_when_missing() -> None:
    reason = busybox_missing_reason()
    assert (reason is None) == (shutil.which("busybox") is not None)
    if reason is not None:
        assert "apt-get install busybox" in reason
