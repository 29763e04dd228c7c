"""A trial in a host sandbox, run by the real runner process as local mode runs it.

Also a script, so that a test can run the whole of it as another user (the unprivileged path):
`python host_kit.py BASE STORAGE_DIR SPEC_FILE` starts a host sandbox in BASE/sandbox, runs the
trial whose spec is in SPEC_FILE with the task and results in STORAGE_DIR, closes the sandbox,
and prints a JSON object: the runner's exit code and log, the sandbox's exit code, and the mount
points that close found left behind. It imports nothing but the product and the standard library.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from rollout.local.host import HostSandbox, start_host_sandbox

RUNNER_TIMEOUT_SEC = 120


async def run_runner(
    sandbox: HostSandbox, storage_dir: Path, spec_file: Path, work_dir: Path
) -> subprocess.CompletedProcess[str]:
    """`python -m rollout_runner.main` beside the sandbox, as the local job starts it."""
    env = {"PATH": os.environ["PATH"], "ROLLOUT_STORAGE_DIR": str(storage_dir)}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    argv = [
        sys.executable, "-m", "rollout_runner.main",
        "--spec", str(spec_file),
        "--control-dir", str(sandbox.paths.control_dir),
        "--logs-dir", str(sandbox.paths.logs_dir),
        "--work-dir", str(work_dir),
        "--termination-log", str(work_dir.parent / "termination-log"),
        "--ready-timeout-sec", "20",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), RUNNER_TIMEOUT_SEC)
    assert process.returncode is not None
    return subprocess.CompletedProcess(argv, process.returncode, stdout.decode(), stderr.decode())


async def _main(base: Path, storage_dir: Path, spec_file: Path) -> dict[str, object]:
    (base / "sandbox").mkdir()
    sandbox = await start_host_sandbox(base / "sandbox", workdir=None)
    try:
        done = await run_runner(sandbox, storage_dir, spec_file, base / "work")
        sandbox_exit = await asyncio.to_thread(sandbox.process.wait, 20)
    finally:
        leaked = await asyncio.to_thread(sandbox.terminate)
    return {
        "runner_exit": done.returncode,
        "runner_log": done.stderr,
        "sandbox_exit": sandbox_exit,
        "leaked": leaked,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_main(*map(Path, sys.argv[1:4])))))
