"""The trial runner's own overhead: trials whose phases do (almost) nothing, timed end to end.

Each trial runs the real runner core against a fresh fake container (tests/fakecontainer.py: the
shim as PID 1 in its own namespaces) and a real S3 endpoint on loopback (moto, tests/s3server.py).
The agent's install is `true`, its execute writes a one-character answer, and the verifier copies
it to reward.txt, so nearly all the time measured is the runner's: shim round trips, the task
download and unpack, file copies, kill-all, reading the reward, teardown and seven uploads.

Prints medians (and the 90th percentile of the whole) over the trials, in milliseconds. A figure,
not a test: run it as root on Linux (the fake container needs mount and pid namespaces):

    python benchmarks/runner_overhead.py --trials 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

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


async def one_trial(base: Path, spec: RolloutTrialSpec, store: ObjectStore) -> dict[str, float]:
    await asyncio.to_thread(base.mkdir)
    with fake_container(base) as container:
        environment = ShimEnvironment(container.control_dir, kill_grace_sec=0.3)
        # The container's own start is not the runner's overhead: wait for the shim first.
        await environment.wait_ready(20)
        started = time.monotonic()
        report = await run_trial(
            spec,
            environment,
            store,
            agent_env=AgentEnv(),
            options=options_for(container, base / "work"),
        )
        wall = time.monotonic() - started
    if report.result.reward != 1.0 or report.upload_error:
        raise SystemExit(f"a benchmark trial failed: {report.error_text or report.upload_error}")
    durations = report.result.durations.model_dump(by_alias=False)  # result.json's names
    figures = {name: float(durations[name] or 0.0) for name in PHASES}
    total = float(durations["total_sec"] or 0.0)
    figures["wall"] = wall
    figures["between_phases"] = total - sum(figures[name] for name in PHASES)
    figures["after_result"] = wall - total
    return figures


async def main(trials: int) -> None:
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"cannot run the benchmark here: {reason}")
    with tempfile.TemporaryDirectory(prefix="runner-overhead-") as tmp, S3Server() as server:
        settings = S3Settings(
            StorageSpec(
                bucket=f"bench-{uuid.uuid4().hex[:8]}",
                endpoint=server.endpoint_url,
                path_style=True,
            ),
            StorageCredentials(
                access_key_id=SecretStr("bench"), secret_access_key=SecretStr("bench-secret")
            ),
        )
        store = fast_store(settings)
        store.ensure_bucket()
        content_hash = publish_task(store, "reward-from-answer")
        runs = []
        for index in range(trials):
            spec = make_spec(
                store,
                "reward-from-answer",
                content_hash,
                agent="trivial",
                install="true",
                execute="echo 1 > /app/answer.txt",
                attempt=index + 1,
            )
            runs.append(await one_trial(Path(tmp) / f"trial-{index}", spec, store))

    def median_ms(key: str) -> float:
        return statistics.median(run[key] for run in runs) * 1000

    walls = sorted(run["wall"] for run in runs)
    p90 = walls[min(len(walls) - 1, int(len(walls) * 0.9))] * 1000
    print(f"runner overhead per trial, {trials} trials with trivial phases (median, ms):")
    print(f"  whole trial, shim ready to uploads done  {median_ms('wall'):8.1f}  (p90 {p90:.1f})")
    for name in PHASES:
        print(f"  {name:<40} {median_ms(name):8.1f}")
    print(f"  {'kill-all, /logs, teardown':<40} {median_ms('between_phases'):8.1f}")
    print(f"  {'result files and uploads':<40} {median_ms('after_result'):8.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials to time (default: 20)")
    asyncio.run(main(parser.parse_args().trials))
