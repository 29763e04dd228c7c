"""What a built-in's install does on each kind of image, run for real in a fake container: the
library (`rollout.api.catalogue`'s lib.sh) finds node on a Debian image by downloading the
official build, on an Alpine image through apk, and on an image with neither apt-get nor apk
fails the trial naming the bases it needs. Package managers, curl and the agent are stand-ins;
nothing reaches the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents_kit import LATER_DIR, StandIns, requires_fake_container, run_builtin

from rollout.api import catalogue
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test"}
AGENT = {"name": "claude-code"}
"""A built-in installed with npm, so it needs node first."""


def npm_agent_stand_ins() -> StandIns:
    """npm and node wait to be installed; the agent's CLI itself answers."""
    command = catalogue.get("claude-code")
    assert command is not None
    return (
        StandIns()
        .add("node", version="v22.12.0", installed=False)
        .add("npm", installed=False)
        .add(command.command, stdout='{"type": "result", "result": "done"}\n')
    )


async def test_on_alpine_node_comes_from_apk(tmp_path: Path, fast_retry_store: ObjectStore) -> None:
    stand_ins = npm_agent_stand_ins().add("apk", sh=StandIns.installing("node", "npm"))
    run = await run_builtin(
        tmp_path,
        fast_retry_store,
        AGENT,
        stand_ins,
        environ=KEYS,
        hide=("apt-get", "node"),
    )

    assert run.report.result.error is None or run.report.result.error.type not in (
        ErrorType.AGENT_INSTALL_FAILED,
        ErrorType.AGENT_INSTALL_TIMEOUT,
    ), run.report.error_text
    [apk] = run.calls("apk")
    assert apk.argv == ["add", "--no-cache", "nodejs", "npm"]
    [npm] = run.calls("npm")
    assert "install" in npm.argv
    assert "-g" in npm.argv
    assert npm.env["NPM_CONFIG_PREFIX"] == "/root/.local"


async def test_on_debian_node_is_the_official_build(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # curl "downloads" a tarball laid out as nodejs.org's, holding the node and npm stand-ins.
    tarball = f"""
out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
mkdir -p /tmp/build/node-v22.12.0-linux-x64/bin
cp {LATER_DIR}/node {LATER_DIR}/npm /tmp/build/node-v22.12.0-linux-x64/bin/
touch /tmp/build/node-v22.12.0-linux-x64/bin/npx
tar -cJf "$out" -C /tmp/build node-v22.12.0-linux-x64
"""
    stand_ins = npm_agent_stand_ins().add("curl", sh=tarball).add("apt-get")
    run = await run_builtin(
        tmp_path, fast_retry_store, AGENT, stand_ins, environ=KEYS, hide=("node",)
    )

    assert run.report.result.error is None or run.report.result.error.type not in (
        ErrorType.AGENT_INSTALL_FAILED,
        ErrorType.AGENT_INSTALL_TIMEOUT,
    ), run.report.error_text
    [curl] = run.calls("curl")
    url = curl.argv[-1]
    assert url.startswith("https://nodejs.org/dist/v22.12.0/node-v22.12.0-linux-")
    assert url.endswith(".tar.xz")
    [npm] = run.calls("npm")
    assert npm.env["PATH"].startswith("/root/.local/bin:")
    assert run.calls("apt-get") == []  # curl, tar and xz were there


async def test_without_apt_or_apk_the_install_fails_naming_the_bases(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    run = await run_builtin(
        tmp_path,
        fast_retry_store,
        AGENT,
        StandIns(),
        environ=KEYS,
        hide=("apt-get", "node"),
    )

    assert run.report.result.error is not None
    assert run.report.result.error.type is ErrorType.AGENT_INSTALL_FAILED
    stderr = run.text("setup/stderr.txt")
    assert "needs node >= " in stderr
    assert "neither them nor apt-get or apk" in stderr


async def test_the_record_says_which_builtin_ran_and_how(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    stand_ins = npm_agent_stand_ins().add("apk", sh=StandIns.installing("node", "npm"))
    agent = {"name": "claude-code", "version": "1.0.0", "model": "claude-opus-4-1"}
    run = await run_builtin(
        tmp_path,
        fast_retry_store,
        agent,
        stand_ins,
        environ=KEYS,
        hide=("apt-get", "node"),
    )

    record = json.loads(run.objects["result.json"])
    assert record["rollout"]["agent"] == {
        "builtin": "claude-code",
        "version": "1.0.0",
        "model": "claude-opus-4-1",
    }
    [npm] = run.calls("npm")
    assert npm.argv[-1].endswith("@1.0.0")
    assert "sk-ant-test" not in run.text("command/stdout.txt") + json.dumps(record)
