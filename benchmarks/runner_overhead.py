"""The trial runner's own overhead: trials whose phases do (almost) nothing, timed end to end.

Each trial runs against a fresh fake container (tests/fakecontainer.py: the shim as PID 1 in its
own namespaces) and a real S3 endpoint on loopback (moto, tests/s3server.py). The agent's install
is `true`, its execute writes a one-character answer, and the verifier copies it to reward.txt, so
nearly all the time measured is the runner's: shim round trips, the task download and unpack,
file copies, kill-all, reading the reward, teardown and the uploads. Two measures:

- process: what a trial Pod sees. A `rollout-runner` process (as the Pod runs it: `python -m
  rollout_runner.main`, its spec in a file, S3 settings in its environment) is started, and the
  fake container --environment-after-ms later (0 by default: both at once); timed from the
  runner's start to its exit. This includes the shim's start, the runner's Python start-up and
  imports, its S3 client, the trial and the uploads. Split by the runner's own log lines
  (millisecond resolution): start-up (to "trial starts"), the trial (to "trial ends", after
  result.json is uploaded) and the exit after it. Then the issue's measure: from the
  environment container's start to the runner's exit, and the same as the runner reports it in
  its termination message (from its environment's ready file to its end: what the cluster mode
  of operator_throughput.py prints from real nodes). In a Pod the runner is the first container
  and the kubelet starts the environment's only after it (its image pulled, its container
  created and started), so the runner's start-up runs partly or wholly before the environment
  starts: --environment-after-ms plays that lead.
- core: the runner's core (`run_trial`) in this process, from the shim's ready file to the last
  upload, with the time per phase (from result.json), the shim round trips per trial (the
  requests the runner writes, counted from its debug log of each) and the CPU time of the
  container (the shim and the commands it ran, with the fake container's own start and end):
  under a task's small CPU limit (say 50m, 5 ms of CPU per 100 ms), that CPU is what stretches
  a trial.

With --slim-botocore, a third measure alternates with those: the process measure with botocore
as the runner image has it (runner-image/slim_botocore.py run on a copy of this botocore, first
on the runner's PYTHONPATH), so the two process figures show what the slimming saves.

Prints p50 and p90 over the trials, in milliseconds. A figure, not a test: run it as root on
Linux (the fake container needs mount and pid namespaces), on an idle machine (`uptime`):

    python benchmarks/runner_overhead.py --trials 30 [--slim-botocore] [--environment-after-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from operator_bench_parts import percentile  # noqa: E402
from pydantic import SecretStr  # noqa: E402
from runner_kit import fast_store, make_spec, options_for, publish_task  # noqa: E402
from s3_kit import S3Settings  # noqa: E402

from fakecontainer import fake_container, unavailable_reason  # noqa: E402
from rollout.api.resources import RolloutTrialSpec, StorageSpec  # noqa: E402
from rollout.storage import ObjectStore, StorageCredentials  # noqa: E402
from rollout_runner.shim_environment import ShimEnvironment  # noqa: E402
from rollout_runner.spec import AgentEnv  # noqa: E402
from rollout_runner.trial import run_trial  # noqa: E402
from s3server import S3Server  # noqa: E402

PHASES = ("environment_setup_sec", "agent_setup_sec", "agent_execution_sec", "verifier_sec")
TASK = "reward-from-answer"
ACCESS_KEY = "bench"
SECRET_KEY = "bench-secret"  # moto accepts any
PROCESS_ROWS = [
    ("wall", "whole: runner start -> runner exit"),
    ("startup", "  runner start-up (Python, imports, client)"),
    ("trial", "  the trial, up to its uploads"),
    ("exit", "  exit"),
    ("from_environment", "environment start -> runner exit"),
    ("reported", "  as reported (ready file -> runner end)"),
    ("lead", "runner start -> ready file, as reported"),
]


class RequestCounter(logging.Handler):
    """Counts the shim requests the runner writes (ShimEnvironment logs each one at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.requests = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("shim request "):
            self.requests += 1


def trivial_spec(store: ObjectStore, content_hash: str, attempt: int) -> RolloutTrialSpec:
    return make_spec(
        store,
        TASK,
        content_hash,
        agent="trivial",
        install="true",
        execute="echo 1 > /app/answer.txt",
        attempt=attempt,
    )


async def core_trial(
    base: Path, spec: RolloutTrialSpec, store: ObjectStore, counter: RequestCounter
) -> dict[str, float]:
    await asyncio.to_thread(base.mkdir)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    with fake_container(base) as container:
        environment = ShimEnvironment(container.control_dir, kill_grace_sec=0.3)
        # The container's own start is not the core's: wait for the shim first.
        await environment.wait_ready(20)
        counter.requests = 0
        started = time.monotonic()
        report = await run_trial(
            spec,
            environment,
            store,
            agent_env=AgentEnv(),
            options=options_for(container, base / "work"),
        )
        wall = time.monotonic() - started
    # The container is reaped now: its CPU, with every process it reaped (the shim's commands).
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    container_cpu = now.ru_utime + now.ru_stime - reaped.ru_utime - reaped.ru_stime
    if report.result.reward != 1.0 or report.upload_error:
        raise SystemExit(f"a benchmark trial failed: {report.error_text or report.upload_error}")
    durations = report.result.durations.model_dump(by_alias=False)  # result.json's names
    figures = {name: float(durations[name] or 0.0) for name in PHASES}
    total = float(durations["total_sec"] or 0.0)
    figures["wall"] = wall
    figures["between_phases"] = total - sum(figures[name] for name in PHASES)
    figures["after_result"] = wall - total
    figures["round_trips"] = counter.requests
    figures["container_cpu"] = container_cpu
    return figures


def slim_botocore_copy(into: Path) -> Path:
    """A copy of this botocore slimmed as in the runner image; the directory to put on the
    runner's PYTHONPATH. copy2 keeps the files' times, so their bytecode is still used."""
    import botocore

    copy = into / "botocore"
    shutil.copytree(Path(botocore.__file__).parent, copy, copy_function=shutil.copy2)
    script = REPO / "runner-image" / "slim_botocore.py"
    subprocess.run([sys.executable, str(script), "--data-dir", str(copy / "data")], check=True)
    return into


def process_trial(
    base: Path,
    spec: RolloutTrialSpec,
    settings: S3Settings,
    endpoint: str,
    python_path: Path | None = None,
    environment_after: float = 0.0,
) -> dict[str, float]:
    base.mkdir()
    container_dir = base / "container"
    container_dir.mkdir()
    spec_file = base / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    env = {
        "PATH": os.environ["PATH"],
        "ROLLOUT_STORAGE_BUCKET": settings.location.bucket,
        "ROLLOUT_STORAGE_ENDPOINT": endpoint,
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    paths = [str(python_path)] if python_path is not None else []
    if "PYTHONPATH" in os.environ:  # say, to time another version of the runner
        paths.append(os.environ["PYTHONPATH"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    # The fake container's paths are fixed by its base directory (rollout.local.host.HostRoot).
    command = [
        sys.executable, "-m", "rollout_runner.main",
        "--spec", str(spec_file),
        "--control-dir", str(container_dir / "control"),
        "--logs-dir", str(container_dir / "logs"),
        "--work-dir", str(base / "work"),
        "--termination-log", str(base / "termination-log"),
        "--ready-timeout-sec", "20",
        "--log-level", "info",  # its "trial starts" and "trial ends" lines time its parts
    ]  # fmt: skip
    wall_start = time.time()
    started = time.monotonic()
    runner = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    # stderr is read only once the container is up: the runner logs little before its trial.
    time.sleep(environment_after)
    environment_started = time.monotonic()
    with fake_container(container_dir):
        _, log = runner.communicate(timeout=60)
        ended = time.monotonic()
    message = json.loads((base / "termination-log").read_text() or "{}")
    if runner.returncode != 0 or message.get("reward") != 1.0:
        raise SystemExit(f"a benchmark runner failed ({runner.returncode}):\n{log}")
    times = {key: datetime.fromisoformat(value) for key, value in message["runner"].items()}
    trial_starts = _logged_at(log, " trial ", " starts") - wall_start
    trial_ends = _logged_at(log, " trial ends") - wall_start
    wall = ended - started
    return {
        "wall": wall,
        "startup": trial_starts,
        "trial": trial_ends - trial_starts,
        "exit": wall - trial_ends,
        "from_environment": ended - environment_started,
        "reported": (times["ended_at"] - times["environment_ready_at"]).total_seconds(),
        "lead": (times["environment_ready_at"] - times["started_at"]).total_seconds(),
    }


def _logged_at(log: str, *parts: str) -> float:
    """When the runner logged the first line with all of `parts` (its asctime, in ms)."""
    for line in log.splitlines():
        if all(part in line for part in parts):
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()
    raise SystemExit(f"the runner never logged {parts}:\n{log}")


def table(title: str, runs: list[dict[str, float]], rows: list[tuple[str, str]]) -> None:
    def column(key: str, fraction: float) -> float:
        return percentile((run[key] for run in runs), fraction) * 1000

    print(f"{title} ({len(runs)} trials, ms):")
    print(f"  {'':<44} {'p50':>8} {'p90':>8}")
    for key, label in rows:
        print(f"  {label:<44} {column(key, 0.5):8.1f} {column(key, 0.9):8.1f}")


async def main(
    trials: int, modes: list[str], slim_botocore: bool, environment_after: float
) -> None:
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"cannot run the benchmark here: {reason}")
    counter = RequestCounter()
    shim_log = logging.getLogger("rollout_runner.shim_environment")
    shim_log.addHandler(counter)
    shim_log.setLevel(logging.DEBUG)
    shim_log.propagate = False
    with tempfile.TemporaryDirectory(prefix="runner-overhead-") as tmp, S3Server() as server:
        settings = S3Settings(
            StorageSpec(
                bucket=f"bench-{uuid.uuid4().hex[:8]}",
                endpoint=server.endpoint_url,
                path_style=True,
            ),
            StorageCredentials(
                access_key_id=SecretStr(ACCESS_KEY), secret_access_key=SecretStr(SECRET_KEY)
            ),
        )
        store = fast_store(settings)
        store.ensure_bucket()
        content_hash = publish_task(store, TASK)
        slim = slim_botocore_copy(Path(tmp) / "slim") if slim_botocore else None
        if slim is not None and "process" in modes:
            modes = [*modes, "slim"]
        attempts = iter(range(1, len(modes) * trials + 1))
        # Alternate the modes, so that a change of load weighs on both alike.
        runners: dict[str, Callable[[Path, RolloutTrialSpec], object]] = {
            "process": lambda base, spec: asyncio.to_thread(
                process_trial,
                base,
                spec,
                settings,
                server.endpoint_url,
                environment_after=environment_after,
            ),
            "core": lambda base, spec: core_trial(base, spec, store, counter),
            "slim": lambda base, spec: asyncio.to_thread(
                process_trial,
                base,
                spec,
                settings,
                server.endpoint_url,
                slim,
                environment_after=environment_after,
            ),
        }
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for index in range(trials):
            for mode in modes:
                attempt = next(attempts)
                base = Path(tmp) / f"{mode}-{index}"
                spec = trivial_spec(store, content_hash, attempt)
                runs[mode].append(await runners[mode](base, spec))  # type: ignore[misc]
    print(f"load before and after: see `uptime`; {os.cpu_count()} CPUs")
    lead = f"the environment started {environment_after * 1000:g} ms after the runner"
    if "process" in runs:
        table(
            f"runner overhead, a Pod's view ({lead})",
            runs["process"],
            PROCESS_ROWS,
        )
    if "slim" in runs:
        table(
            "the same, botocore slimmed as in the runner image",
            runs["slim"],
            PROCESS_ROWS,
        )
    if "core" in runs:
        table(
            "runner core, shim ready -> uploads done (in process)",
            runs["core"],
            [
                ("wall", "whole: shim ready -> uploads done"),
                *((name, f"  {name}") for name in PHASES),
                ("between_phases", "  kill-all, /logs, teardown"),
                ("after_result", "  result files and uploads"),
                ("container_cpu", "the container's CPU (user + system)"),
            ],
        )
        trips = sorted(run["round_trips"] for run in runs["core"])
        print(f"  shim round trips per trial: {trips[0]:.0f} (max {trips[-1]:.0f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials to time (default: 20)")
    parser.add_argument(
        "--mode",
        choices=["both", "process", "core"],
        default="both",
        help="what to time (default: both, alternating)",
    )
    parser.add_argument(
        "--environment-after-ms",
        type=float,
        default=0.0,
        help="start the fake container this long after the runner, as a node starts a trial "
        "Pod's environment after its runner (default: 0, both at once)",
    )
    parser.add_argument(
        "--slim-botocore",
        action="store_true",
        help="also time the process measure with botocore slimmed as in the runner image",
    )
    args = parser.parse_args()
    chosen = ["process", "core"] if args.mode == "both" else [args.mode]
    if args.environment_after_ms < 0:
        parser.error("--environment-after-ms cannot be negative")
    asyncio.run(main(args.trials, chosen, args.slim_botocore, args.environment_after_ms / 1000))
