"""ShimEnvironment against the real shim, PID 1 of a fake container, under dash and busybox sh."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from pathlib import Path

import pytest

from fakecontainer import (
    AGENT_UID,
    FakeContainer,
    eventually,
    fake_container,
    requires_fake_container,
)
from rollout.api.wire.shim import (
    CONTROL_DIR,
    DONE_FIFO,
    PROTOCOL_VERSION,
    READY_FILE,
    SHIM_NAME,
    SHIM_TEXT,
    shim_command,
)
from rollout_runner.environment import EnvironmentFailure, FileTransferError
from rollout_runner.shim_environment import ShimEnvironment, ShimNotReady

pytestmark = [pytest.mark.integration, requires_fake_container()]

GRACE_SEC = 0.3


@pytest.fixture
async def env(container: FakeContainer) -> ShimEnvironment:
    environment = ShimEnvironment(container.control_dir, kill_grace_sec=GRACE_SEC)
    await environment.wait_ready(timeout_sec=20)
    return environment


async def test_ready_reports_the_shim_as_pid_1(env: ShimEnvironment) -> None:
    assert env.info is not None
    assert env.info.pid == 1
    assert env.info.control_dir == "/rollout"
    assert env.info.cwd == "/app"
    assert env.info.has_setsid
    assert env.info.uid == 0
    assert stat.S_IMODE(env.control_dir.stat().st_mode) == 0o700


async def test_ready_at_is_when_the_shim_wrote_its_ready_file(env: ShimEnvironment) -> None:
    """The environment's start as the runner reports it (its termination message's runner
    times): the ready file's own time, not when the runner got round to reading it."""
    written = (env.control_dir / READY_FILE).stat().st_mtime_ns
    assert env.ready_at is not None
    assert env.ready_at.tzinfo is not None
    assert abs(env.ready_at.timestamp() * 1e9 - written) < 1_000  # float rounding only


async def test_output_and_exit_code_come_back_exactly(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    blob = os.urandom(3 * 1024 * 1024) + bytes(range(256))
    (container.logs_dir / "out.bin").write_bytes(blob)
    (container.logs_dir / "err.bin").write_bytes(blob[::-1])
    result = await env.run("cat /logs/out.bin; cat /logs/err.bin >&2; exit 7", timeout_sec=30)
    assert result.exit_code == 7
    assert not result.timed_out
    assert result.stdout == blob
    assert result.stderr == blob[::-1]
    assert result.duration_sec > 0


async def test_latency_of_a_trivial_command(env: ShimEnvironment) -> None:
    # A figure for the curious (pytest -s), never asserted.
    started = time.monotonic()
    for _ in range(10):
        assert (await env.run("true", timeout_sec=10)).exit_code == 0
    print(f"\nshim round trip: {(time.monotonic() - started) / 10 * 1000:.1f} ms per command")


async def test_a_command_runs_with_sh_c_semantics(env: ShimEnvironment) -> None:
    script = (
        'set -e\nf() { echo "in f: $1"; }\nf "a b"\nfor i in 1 2; do echo $i; done\nfalse\necho x'
    )
    result = await env.run(script, timeout_sec=10)
    assert result.stdout == b"in f: a b\n1\n2\n"
    assert result.exit_code == 1


# With the heredoc's four other lines: 5, 8 (the most the shim reads itself), 9 (read by cat), 34.
@pytest.mark.parametrize("lines", [1, 4, 5, 30])
async def test_a_command_reaches_its_shell_as_written_whatever_its_length(
    env: ShimEnvironment, lines: int
) -> None:
    text = "".join(f"  line {i}\t\\ $HOME `x` 'q' \"d\"\n" for i in range(lines))
    command = f"cat <<'END'\n{text}END\n\n\n"  # trailing newlines go, as $(cat) drops them
    result = await env.run(command, timeout_sec=10)
    assert (result.exit_code, result.stdout, result.stderr) == (0, text.encode(), b"")


async def test_env_values_reach_the_command_and_the_env_file_is_emptied(
    env: ShimEnvironment, container: FakeContainer, caplog: pytest.LogCaptureFixture
) -> None:
    values = {
        "API_KEY": "sk-secret-'quoted' \"double\" $HOME `uname` \\ end",
        "MULTI_LINE": "line 1\nline 2\n",
        "EMPTY": "",
        "UNICODE": "héllo ✓",
        "HOME": "/custom/home",
    }
    caplog.set_level(logging.DEBUG)
    names = "API_KEY MULTI_LINE EMPTY UNICODE HOME"
    command = (
        f'for n in {names}; do eval "printf \'%s|\' \\"\\$$n\\""; done;'
        " cat /rollout/req/*/env 2>/dev/null | wc -c"
    )
    result = await env.run(command, env=values, timeout_sec=10)
    assert result.exit_code == 0, result.stderr
    expected = "|".join(values[n] for n in names.split())
    printed, env_files = result.stdout.decode().rsplit("|", 1)
    assert printed == expected
    assert env_files.strip() == "0"  # emptied before the command started
    assert not list(container.control_dir.rglob("env"))
    assert "sk-secret" not in caplog.text


async def test_the_runner_writes_the_env_file_for_the_shim_only(tmp_path: Path) -> None:
    # No shim serves this directory, so the request stays put for us to inspect.
    environment = ShimEnvironment(tmp_path, kill_grace_sec=0)
    run = asyncio.create_task(environment.run("true", env={"K": "secret"}, timeout_sec=60))
    await eventually(lambda: bool(_env_files(tmp_path)), "the env file is written")
    [(mode, text)] = _env_files(tmp_path)
    assert mode == 0o600
    assert text == "export K=secret\n"
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert _env_files(tmp_path) == []  # the cancelled request was taken back and removed


async def test_cwd_defaults_to_the_containers_working_directory(env: ShimEnvironment) -> None:
    assert (await env.run("pwd", timeout_sec=10)).stdout == b"/app\n"
    assert (await env.run("pwd", cwd="/tmp", timeout_sec=10)).stdout == b"/tmp\n"
    missing = await env.run("pwd", cwd="/no/such/dir", timeout_sec=10)
    assert missing.exit_code == 126
    assert b"/no/such/dir" in missing.stderr
    assert missing.stdout == b""


async def test_runs_as_another_user_with_its_env(env: ShimEnvironment) -> None:
    result = await env.run(
        'whoami; id -u; echo "$HOME $TOKEN"; pwd; touch /root/x',
        user="agent",
        env={"TOKEN": "t0k", "HOME": "/tmp/agent-home"},
        timeout_sec=10,
    )
    lines = result.stdout.decode().splitlines()
    assert lines == ["agent", str(AGENT_UID), "/tmp/agent-home t0k", "/app"]
    assert result.exit_code != 0  # /root is not the agent's
    root = await env.run("whoami", user="root", timeout_sec=10)
    assert root.stdout == b"root\n"


async def test_an_agent_user_cannot_reach_the_control_directory(env: ShimEnvironment) -> None:
    # Whoever can write requests there runs commands as the shim's user (root here).
    result = await env.run(
        "ls /rollout; touch /rollout/req/forged && echo forged", user="agent", timeout_sec=10
    )
    assert result.exit_code != 0
    assert b"forged" not in result.stdout
    assert b"Permission denied" in result.stderr
    assert not (env.control_dir / "req" / "forged").exists()


async def test_timeout_kills_the_command_and_a_child_that_ignores_term(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    command = "echo started; sh -c 'trap \"\" TERM; exec sleep 4321' & sleep 4322"
    result = await env.run(command, timeout_sec=1)
    assert result.timed_out
    assert result.exit_code is None
    assert result.stdout == b"started\n"
    # The kill is complete before run() returns.
    assert container.processes_running("4321") == []
    assert container.processes_running("4322") == []
    # And the container sees it the same way from inside.
    listing = await env.run(
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f; echo; done", timeout_sec=10
    )
    assert b"sleep 4321" not in listing.stdout
    assert b"sleep 4322" not in listing.stdout
    # PID 1 reaps what it inherited.
    await eventually(lambda: container.zombies() == [], "no zombie is left")


async def test_a_daemon_survives_a_plain_kill_but_not_kill_all(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    command = (
        "(setsid sh -c 'trap \"\" TERM; exec sleep 5678' &) ; nohup sleep 5679 >/dev/null 2>&1 &"
        " sleep 5680"
    )
    result = await env.run(command, timeout_sec=1)
    assert result.timed_out
    assert container.processes_running("5680") == []
    assert container.processes_running("5679") == []  # nohup stays in the command's session
    assert len(container.processes_running("5678")) == 1  # setsid left it: a daemon

    await env.kill_all()
    assert container.processes_running("5678") == []
    shim = [p for p in container.processes() if p.pid == 1]
    assert len(shim) == 1
    assert shim[0].state != "Z"
    after = await env.run("echo still here", timeout_sec=10)
    assert after.stdout == b"still here\n"
    await eventually(lambda: container.zombies() == [], "no zombie is left")


async def test_kill_all_spares_a_command_handlers_so_its_run_still_returns(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    running = asyncio.create_task(env.run("sleep 6543", timeout_sec=30))
    await eventually(lambda: container.processes_running("6543") != [], "the command starts")
    await env.kill_all()
    result = await running
    assert not result.timed_out
    assert result.exit_code == 128 + 15  # TERM from kill-all, reported by its own run()


async def test_two_commands_run_concurrently(env: ShimEnvironment) -> None:
    # Each waits for the other: run serially, both would time out.
    first = env.run(
        "touch /tmp/first; while [ ! -e /tmp/second ]; do sleep 0.01; done; echo first",
        timeout_sec=20,
    )
    second = env.run(
        "while [ ! -e /tmp/first ]; do sleep 0.01; done; touch /tmp/second; echo second",
        timeout_sec=20,
    )
    results = await asyncio.gather(first, second)
    assert [r.stdout for r in results] == [b"first\n", b"second\n"]
    assert not any(r.timed_out for r in results)


async def test_cancelling_a_run_kills_its_command(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    running = asyncio.create_task(env.run("sleep 7654", timeout_sec=60))
    await eventually(lambda: container.processes_running("7654") != [], "the command starts")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert container.processes_running("7654") == []
    assert list((container.control_dir / "req").iterdir()) == []


async def test_a_zero_timeout_never_leaves_the_command_running(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    result = await env.run("sleep 8765", timeout_sec=0)
    assert result.timed_out
    assert container.processes_running("8765") == []


async def test_stop_makes_the_container_exit_with_the_code(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    await env.stop(3)
    assert container.wait_exit(timeout=10) == 3
    await env.stop(3)  # idempotent
    with pytest.raises(EnvironmentFailure, match="stopped"):
        await env.run("true", timeout_sec=1)


async def test_put_and_get_files_round_trip_a_directory_tree(
    env: ShimEnvironment, container: FakeContainer, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    (source / "nested" / "deeper").mkdir(parents=True)
    (source / "empty").mkdir()
    (source / "a file with spaces.txt").write_text("spaces\n")
    (source / "nested" / "data.bin").write_bytes(bytes(range(256)) * 100)
    script = source / "nested" / "deeper" / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    (source / "link").symlink_to("nested/data.bin")

    await env.put_files(source, "/tests")
    placed = container.root / "tests" / "nested" / "data.bin"
    assert placed.read_bytes() == bytes(range(256)) * 100
    ran = await env.run("/tests/nested/deeper/run.sh; readlink /tests/link", timeout_sec=10)
    assert ran.stdout == b"ran\nnested/data.bin\n"

    back = tmp_path / "back"
    await env.get_files("/tests", back)
    assert _tree(back) == _tree(source)
    assert os.access(back / "nested" / "deeper" / "run.sh", os.X_OK)
    assert os.readlink(back / "link") == "nested/data.bin"
    assert list((container.control_dir / "xfer").iterdir()) == []


async def test_put_a_single_file_with_an_owner(
    env: ShimEnvironment, container: FakeContainer, tmp_path: Path
) -> None:
    local = tmp_path / "instruction.md"
    local.write_text("Do the task.\n")
    await env.put_files(local, "/tmp/deep/instruction.md", owner="agent")
    placed = container.root / "tmp" / "deep" / "instruction.md"
    assert placed.read_text() == "Do the task.\n"
    assert placed.stat().st_uid == AGENT_UID
    fetched = tmp_path / "fetched" / "copy.md"
    await env.get_files("/tmp/deep/instruction.md", fetched)
    assert fetched.read_text() == "Do the task.\n"


async def test_get_files_of_a_missing_path_says_so(env: ShimEnvironment, tmp_path: Path) -> None:
    with pytest.raises(FileTransferError, match="/no/such/path"):
        await env.get_files("/no/such/path", tmp_path / "x")
    assert not (tmp_path / "x").exists()


async def test_no_shim_means_shim_not_ready_after_the_timeout(tmp_path: Path) -> None:
    environment = ShimEnvironment(tmp_path)
    with pytest.raises(ShimNotReady, match=r"did not signal ready within 0\.3s"):
        await environment.wait_ready(timeout_sec=0.3)


def test_invalid_env_names_are_refused_before_anything_runs(tmp_path: Path) -> None:
    environment = ShimEnvironment(tmp_path)
    with pytest.raises(ValueError, match="'BAD-NAME' is not a valid"):
        asyncio.run(environment.run("true", env={"BAD-NAME": "x"}, timeout_sec=1))
    assert not (tmp_path / "req").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"user": "-c"}, "user must be a user name"),
        ({"user": "agent\nroot"}, "user must be a user name"),
        ({"cwd": "/a\nb"}, "cwd must be a non-empty single line"),
        ({"env": {"K": "a\0b"}}, "the value of K contains a NUL"),
    ],
)
def test_bad_run_arguments_are_refused(
    kwargs: dict[str, object], message: str, tmp_path: Path
) -> None:
    environment = ShimEnvironment(tmp_path)
    with pytest.raises(ValueError, match=message):
        asyncio.run(environment.run("true", timeout_sec=1, **kwargs))  # type: ignore[arg-type]


async def test_file_transfers_refuse_relative_paths_and_bad_owners(tmp_path: Path) -> None:
    environment = ShimEnvironment(tmp_path)
    with pytest.raises(ValueError, match="must be an absolute path"):
        await environment.put_files(tmp_path, "-rf")
    with pytest.raises(ValueError, match="must be an absolute path"):
        await environment.get_files("relative", tmp_path / "x")
    with pytest.raises(ValueError, match="owner must be a user name"):
        await environment.put_files(tmp_path, "/x", owner="--reference=/etc")


async def test_a_relative_cwd_is_taken_from_the_working_directory(env: ShimEnvironment) -> None:
    made = await env.run("mkdir -p './-/sub ' ' spaced'", timeout_sec=10)
    assert made.exit_code == 0
    assert (await env.run("pwd", cwd="-/sub ", timeout_sec=10)).stdout == b"/app/-/sub \n"
    assert (await env.run("pwd", cwd="/app/ spaced", timeout_sec=10)).stdout == b"/app/ spaced\n"


def _env_files(control_dir: Path) -> list[tuple[int, str]]:
    """Mode and text of every env file in the control directory."""
    return [(stat.S_IMODE(p.stat().st_mode), p.read_text()) for p in control_dir.rglob("env")]


def _tree(root: Path) -> dict[str, object]:
    """Every path under `root` with what it is: file bytes, link target or 'dir'."""
    tree: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            tree[key] = ("link", os.readlink(path))
        elif path.is_dir():
            tree[key] = "dir"
        else:
            tree[key] = (path.read_bytes(), os.access(path, os.X_OK))
    return tree


async def test_a_shim_running_as_the_images_non_root_user_answers_requests_and_transfers(
    tmp_path: Path,
) -> None:
    # An image whose USER is not root: the shim is that user; the runner (root) writes requests.
    command = [
        "setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", "--clear-groups",
        *shim_command(CONTROL_DIR),
    ]  # fmt: skip
    with fake_container(tmp_path, command=command) as container:
        # The control directory is an emptyDir: writable by whoever the containers run as.
        container.control_dir.chmod(0o777)
        env = ShimEnvironment(container.control_dir, kill_grace_sec=GRACE_SEC)
        await env.wait_ready(timeout_sec=20)
        result = await env.run(
            'id -u; echo "$SECRET"', env={"SECRET": "s3cret-value"}, timeout_sec=10
        )
        assert (result.exit_code, result.stdout.split()) == (
            0,
            [str(AGENT_UID).encode(), b"s3cret-value"],
        )
        source = tmp_path / "in.txt"
        source.write_text("to the container\n")
        await env.put_files(source, "/tmp/in.txt")
        await env.run("cp /tmp/in.txt /tmp/out.txt", timeout_sec=10)
        await env.get_files("/tmp/out.txt", tmp_path / "out.txt")
        assert (tmp_path / "out.txt").read_text() == "to the container\n"
        # The runner gave its done FIFO to the shim's user, who announces every answer in it.
        assert (container.control_dir / DONE_FIFO).stat().st_uid == AGENT_UID
        assert env.waits_on_done_fifo
        assert env.stats.notifications >= 1


# -- answers: announced through the done FIFO, or polled -----------------------------------------

# The shim's text without its `done=1` in the ready file (a shim older than the done FIFO), and
# without the line it writes there (a FIFO that stays silent).
NO_DONE_KEY = SHIM_TEXT.replace("\\ndone=1\\n", "\\n")
SILENT_DONE = SHIM_TEXT.replace('{ echo "${1##*/}" 1<>"$C/done"; }', ":")


def test_the_variant_shims_differ_from_the_shim() -> None:
    assert NO_DONE_KEY != SHIM_TEXT
    assert SILENT_DONE != SHIM_TEXT


async def test_the_runner_makes_the_done_fifo_and_an_answer_wakes_it_with_no_polling(
    container: FakeContainer,
) -> None:
    # Looks for an answer it was not told of: never, within this test.
    env = ShimEnvironment(container.control_dir, kill_grace_sec=GRACE_SEC, answer_check_sec=600)
    await env.wait_ready(timeout_sec=20)
    assert env.waits_on_done_fifo
    done = (container.control_dir / DONE_FIFO).lstat()
    assert stat.S_ISFIFO(done.st_mode)
    assert stat.S_IMODE(done.st_mode) == 0o600

    released = container.logs_dir / "released"
    command = "touch /logs/started; while [ ! -e /logs/released ]; do sleep 0.01; done; echo out"
    running = asyncio.create_task(env.run(command, timeout_sec=60))
    await eventually((container.logs_dir / "started").exists, "the command starts")
    await asyncio.sleep(0.2)  # time in which a polling runner would look a dozen times
    looked = env.stats.checks
    released.touch()
    async with asyncio.timeout(60):  # told at once, else only after answer_check_sec
        result = await running
    assert result.stdout == b"out\n"
    assert (env.stats.requests, env.stats.notifications) == (1, 1)
    assert looked == 1  # when the wait began, and not since
    assert env.stats.checks == 2  # and once more when the shim's line came


async def test_kills_are_told_through_the_done_fifo(container: FakeContainer) -> None:
    env = ShimEnvironment(container.control_dir, kill_grace_sec=GRACE_SEC, answer_check_sec=600)
    await env.wait_ready(timeout_sec=20)
    async with asyncio.timeout(60):  # told at once, else only after answer_check_sec
        timed_out = await env.run("sleep 4567", timeout_sec=0.5)
        await env.kill_all()
    assert timed_out.timed_out
    assert container.processes_running("4567") == []
    # The run, the kill of its session and the kill-all. Looks for rc: two per request at
    # most, one more at the run's deadline and one for the killed run's own rc, where a
    # polling runner looks dozens of times in the run's half second alone.
    assert env.stats.requests == 3
    assert env.stats.checks <= 2 * 3 + 2


async def test_a_shim_that_announces_no_answers_is_polled(tmp_path: Path) -> None:
    with fake_container(tmp_path, command=["/bin/sh", "-c", NO_DONE_KEY, SHIM_NAME, CONTROL_DIR]):
        control_dir = tmp_path / "control"
        env = ShimEnvironment(control_dir, kill_grace_sec=GRACE_SEC)
        await env.wait_ready(timeout_sec=20)
        assert env.info is not None
        assert (env.info.version, env.info.notifies_done) == (PROTOCOL_VERSION, False)
        assert not env.waits_on_done_fifo
        assert not (control_dir / DONE_FIFO).exists()
        result = await env.run("sleep 0.2; echo polled", timeout_sec=10)
        assert result.stdout == b"polled\n"
        assert env.stats.notifications == 0
        assert env.stats.checks > 2  # polled


async def test_a_runner_may_poll_even_where_the_shim_announces_answers(
    container: FakeContainer,
) -> None:
    env = ShimEnvironment(container.control_dir, kill_grace_sec=GRACE_SEC, done_fifo=False)
    await env.wait_ready(timeout_sec=20)
    assert not env.waits_on_done_fifo
    assert (await env.run("echo polled", timeout_sec=10)).stdout == b"polled\n"
    assert env.stats.notifications == 0


async def test_a_silent_done_fifo_is_given_up_for_polling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with fake_container(tmp_path, command=["/bin/sh", "-c", SILENT_DONE, SHIM_NAME, CONTROL_DIR]):
        env = ShimEnvironment(tmp_path / "control", kill_grace_sec=GRACE_SEC, answer_check_sec=0.2)
        await env.wait_ready(timeout_sec=20)
        for number in range(1, 4):
            assert env.waits_on_done_fifo
            result = await env.run(f"sleep 0.1; echo {number}", timeout_sec=10)
            assert result.stdout == f"{number}\n".encode()
        # Three answers with no line: the runner polls from now on.
        assert env.stats.untold == 3
        assert not env.waits_on_done_fifo
        assert "answered 3 requests without a line in its done FIFO" in caplog.text
        last = await env.run("echo polled", timeout_sec=10)
        assert last.stdout == b"polled\n"
        assert env.stats.notifications == 0


async def test_a_done_fifo_replaced_by_a_file_is_given_up_for_polling(
    env: ShimEnvironment, container: FakeContainer
) -> None:
    done = container.control_dir / DONE_FIFO
    done.unlink()
    done.write_text("not a FIFO any more")
    result = await env.run("echo polled", timeout_sec=10)
    assert result.stdout == b"polled\n"
    assert not env.waits_on_done_fifo


# -- one request for a preparation and a copy ----------------------------------------------------


async def test_put_files_runs_its_prepare_script_first_in_the_same_request(
    env: ShimEnvironment, container: FakeContainer, tmp_path: Path
) -> None:
    local = tmp_path / "data.txt"
    local.write_text("data\n")
    prepare = "set -e; rm -rf /tmp/placed; mkdir -p /tmp/placed; echo prepared >/tmp/placed/mark"
    await env.put_files(local, "/tmp/placed/data.txt", owner="agent", prepare=prepare)
    assert env.stats.requests == 1
    placed = container.root / "tmp" / "placed"
    assert (placed / "data.txt").read_text() == "data\n"
    assert (placed / "data.txt").stat().st_uid == AGENT_UID
    assert (placed / "mark").read_text() == "prepared\n"


async def test_a_failed_prepare_script_copies_nothing_and_its_set_e_holds(
    env: ShimEnvironment, container: FakeContainer, tmp_path: Path
) -> None:
    local = tmp_path / "data.txt"
    local.write_text("data\n")
    # A `set -e` on the left of && would be ignored, and the script would go on to the touch.
    prepare = "set -e; echo preparing >&2; (exit 3); touch /tmp/went-on"
    with pytest.raises(FileTransferError) as raised:
        await env.put_files(local, "/tmp/other/data.txt", prepare=prepare)
    message = str(raised.value)
    assert message.startswith(f"preparing for and copying {local} to /tmp/other/data.txt")
    assert "failed (exit code 3): preparing" in message
    assert not (container.root / "tmp" / "went-on").exists()
    assert not (container.root / "tmp" / "other").exists()
