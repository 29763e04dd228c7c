"""Crash safety: the operator stopped at any moment and started again neither duplicates nor loses
a trial, and the job still ends with the right figures.

In-process kills cancel the operator wherever it is (between creating a trial and its Pod,
between a status patch and a Pod deletion...); the last test kills the real `rollout-operator`
process with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cli_kit import s3_client, versions_by_key
from operator_kit import (
    AGENTS,
    DATASET,
    RUNNER_IMAGE,
    TASKS,
    expected_names,
    job_manifest,
    job_phase,
    make_dataset,
    most_unfinished,
    operator_config,
    operator_memo,
    outcome,
    publish,
)
from s3_kit import S3Settings

from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from loopback import free_port
from rollout.api.layout import job_config_key

pytestmark = pytest.mark.integration


@pytest.fixture
def dataset(tmp_path: Path, s3_settings: S3Settings) -> dict[str, str]:
    return publish(s3_settings.store(), make_dataset(tmp_path / DATASET, TASKS))


class Kubelet:
    """Runs and finishes trial Pods as they appear, in the background of a test."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.finished: set[str] = set()

    async def step(self) -> None:
        for pod in await self.kube.list(PODS, self.kube.namespace, labels="rollout.dev/trial"):
            name = pod["metadata"]["name"]
            if name in self.finished or pod["metadata"].get("deletionTimestamp"):
                continue
            await self.kube.run_pod(name)
            await self.kube.finish_pod(name, messages={"runner": outcome(pod)})
            self.finished.add(name)

    async def until(self, predicate: Any, what: str) -> Any:
        async def check() -> Any:
            await self.step()
            return await predicate()

        return await self.kube.wait_for(check, timeout=30, what=what)


def posts(kube: Kube, resource: str) -> Counter[str | None]:
    return Counter(c.name for c in kube.calls() if c.method == "POST" and c.resource == resource)


async def trials_posted_at_least(kube: Kube, count: int) -> bool:
    return sum(posts(kube, ROLLOUT_TRIALS).values()) >= count


def assert_each_trial_ran_once(kube: Kube) -> None:
    names = expected_names("crashy")
    once: Counter[str | None] = Counter(names)
    assert posts(kube, ROLLOUT_TRIALS) == once  # each trial created exactly once
    assert posts(kube, PODS) == once  # each in one Pod, created exactly once
    # Trial order and the concurrency limit held across the restarts.
    assert [
        c.name for c in kube.calls() if c.method == "POST" and c.resource == ROLLOUT_TRIALS
    ] == (names)
    assert most_unfinished(kube.calls()) <= 3


async def assert_job_figures(kube: Kube) -> None:
    status = (await kube.get(ROLLOUT_JOBS, "crashy"))["status"]
    assert status["counts"]["total"] == status["counts"]["finished"] == 12
    assert (status["counts"]["completed"], status["counts"]["failed"]) == (11, 1)
    assert status["passRate"] == pytest.approx(7 / 11)
    assert status["meanReward"] == pytest.approx(8 / 11)
    assert len(await kube.list(ROLLOUT_TRIALS, kube.namespace)) == 12


@pytest.mark.parametrize("kill_after", [[1, 5, 9], [2, 3, 4, 6, 7, 8, 10, 11]])
async def test_an_operator_killed_again_and_again_still_runs_every_trial_once(
    kube: Kube, dataset: dict[str, str], s3_settings: S3Settings, kill_after: list[int]
) -> None:
    config = operator_config(s3_settings)
    kubelet = Kubelet(kube)
    s3_client(s3_settings).put_bucket_versioning(
        Bucket=s3_settings.location.bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    store = s3_settings.store()
    await kube.create(
        ROLLOUT_JOBS, job_manifest("crashy", [dataset], agents=AGENTS, n_attempts=2, n_concurrent=3)
    )
    config_json: bytes | None = None
    for count in kill_after:
        async with kube.operator(memo=operator_memo(kube, config)) as operator:
            # Kill it as soon as it has created `count` trials: often between a trial and its
            # Pod, or between a trial's outcome and the removal of its Pod.
            async def enough(count: int = count) -> bool:
                return await trials_posted_at_least(kube, count)

            await kubelet.until(enough, f"{count} trials")
            await operator.kill()
        await kubelet.step()  # the kubelet goes on while no operator runs
        # config.json is there from the job's start, and no restart writes it again.
        written = store.get_bytes(job_config_key("", "crashy"))
        assert written == (config_json or written)
        config_json = written
    async with kube.operator(memo=operator_memo(kube, config)):
        await kubelet.until(lambda: job_phase(kube, "crashy", "Completed"), "the job completes")
        await kube.settle(quiet=0.3)

    assert_each_trial_ran_once(kube)
    await assert_job_figures(kube)
    assert versions_by_key(s3_settings, "jobs/crashy/")[job_config_key("", "crashy")] == 1
    # Every trial's Pod removed, also across restarts.
    assert await kube.list(PODS, kube.namespace) == []


async def test_a_stopped_operator_resumes_a_suspended_job_where_it_was(
    kube: Kube, dataset: dict[str, str], s3_settings: S3Settings
) -> None:
    """Stopped gracefully mid-job; a job suspended meanwhile creates nothing more until resumed."""
    config = operator_config(s3_settings)
    kubelet = Kubelet(kube)
    await kube.create(
        ROLLOUT_JOBS, job_manifest("crashy", [dataset], agents=AGENTS, n_attempts=2, n_concurrent=3)
    )
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.wait_for(lambda: trials_posted_at_least(kube, 3), what="3 trials")
    await kube.patch(ROLLOUT_JOBS, "crashy", {"spec": {"suspend": True}})
    async with kube.operator(memo=operator_memo(kube, config)):
        suspended = await kubelet.until(
            lambda: job_phase(kube, "crashy", "Suspended"), "the job suspended"
        )
        await kubelet.until(lambda: _counts(kube, finished=3), "the started trials finished")
        await kube.settle(quiet=0.3)
        assert sum(posts(kube, ROLLOUT_TRIALS).values()) == 3  # nothing new while suspended
        conditions = {c["type"]: c for c in suspended["status"]["conditions"]}
        assert conditions["Suspended"]["status"] == "True"

        await kube.patch(ROLLOUT_JOBS, "crashy", {"spec": {"suspend": False}})
        done = await kubelet.until(lambda: job_phase(kube, "crashy", "Completed"), "completed")
    conditions = {c["type"]: c for c in done["status"]["conditions"]}
    assert conditions["Suspended"]["status"] == "False"
    assert done["status"]["observedGeneration"] == 3
    assert_each_trial_ran_once(kube)
    await assert_job_figures(kube)


async def _counts(kube: Kube, **expected: int) -> bool:
    job = await kube.find(ROLLOUT_JOBS, "crashy")
    counts = ((job or {}).get("status") or {}).get("counts") or {}
    return all(counts.get(key) == value for key, value in expected.items())


# --- the real process -----------------------------------------------------------------------------


def uid_without_passwd_entry() -> int:
    """A uid that /etc/passwd does not list (as OpenShift's arbitrary uids are not)."""
    uid = 65532  # the operator image's own uid
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def as_user(uid: int) -> list[str]:
    """A command prefix that runs a process as `uid` (and gid) with no supplementary groups.

    It keeps one capability, CAP_DAC_READ_SEARCH, so that it can read this machine's Python
    (often under a 0700 home) and the test's files; nothing about the user is changed by it.
    """
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
    ]  # fmt: skip


def _cannot_switch_user() -> str | None:
    if os.geteuid() != 0:
        return "running as another uid needs root"
    if shutil.which("setpriv") is None:
        return "running as another uid needs util-linux setpriv"
    return None


@contextlib.asynccontextmanager
async def operator_process(
    kube: Kube, tmp_path: Path, storage: S3Settings, *, uid: int | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, int]]:
    """`rollout-operator` as a user runs it, configured by environment variables; as `uid` with
    no user name in its environment (as in a Pod) when given."""
    metrics_port, health_port = free_port(), free_port()
    inherited = {k: v for k, v in os.environ.items() if uid is None or k not in USER_VARIABLES}
    env = {
        **inherited,
        "KUBECONFIG": str(
            kube.write_kubeconfig(tmp_path / "kubeconfig", identity=Identity.OPERATOR)
        ),
        "ROLLOUT_NAMESPACES": kube.namespace,
        "ROLLOUT_RUNNER_IMAGE": RUNNER_IMAGE,
        "ROLLOUT_PEERING": "",
        "ROLLOUT_STORAGE_BUCKET": storage.location.bucket,
        "ROLLOUT_STORAGE_ENDPOINT": storage.location.endpoint or "",
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": storage.credentials.access_key_id.get_secret_value(),
        "AWS_SECRET_ACCESS_KEY": storage.credentials.secret_access_key.get_secret_value(),
        "ROLLOUT_METRICS_PORT": str(metrics_port),
        "ROLLOUT_HEALTH_PORT": str(health_port),
        "ROLLOUT_STATUS_INTERVAL_SEC": "0.2",
        "ROLLOUT_LOG_LEVEL": "info",
    }
    script = Path(sys.executable).parent / "rollout-operator"
    command = [*(as_user(uid) if uid is not None else []), str(script)]
    with (tmp_path / "operator.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
        )
    try:
        yield process, metrics_port, health_port
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


USER_VARIABLES = ("USER", "LOGNAME", "LNAME", "USERNAME")
"""What getpass.getuser() reads before it asks /etc/passwd; a Pod sets none of them."""


async def _get(session: aiohttp.ClientSession, url: str) -> str | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
            return await response.text() if response.status == 200 else None
    except aiohttp.ClientError:
        return None


async def test_the_operator_process_killed_with_sigkill_mid_job_finishes_it_after_a_restart(
    kube: Kube, dataset: dict[str, str], s3_settings: S3Settings, tmp_path: Path
) -> None:
    kubelet = Kubelet(kube)
    await kube.create(
        ROLLOUT_JOBS, job_manifest("crashy", [dataset], agents=AGENTS, n_attempts=2, n_concurrent=3)
    )
    async with (
        aiohttp.ClientSession() as session,
        operator_process(kube, tmp_path, s3_settings) as (process, metrics_port, health_port),
    ):
        await kube.wait_for(
            lambda: _get(session, f"http://127.0.0.1:{health_port}/healthz"),
            timeout=30,
            what="the operator's /healthz",
        )
        await kubelet.until(lambda: trials_posted_at_least(kube, 5), "5 trials")
        metrics = await _get(session, f"http://127.0.0.1:{metrics_port}/metrics")
        assert metrics is not None
        assert 'rollout_api_writes_total{resource="rollouttrials",verb="create"}' in metrics
        assert "rollout_active_trials" in metrics
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL

    await kubelet.step()
    async with operator_process(kube, tmp_path, s3_settings):
        await kubelet.until(lambda: job_phase(kube, "crashy", "Completed"), "the job completes")
        await kube.settle(quiet=0.3)
    assert_each_trial_ran_once(kube)
    await assert_job_figures(kube)


@pytest.mark.skipif(_cannot_switch_user() is not None, reason=_cannot_switch_user() or "")
async def test_the_operator_starts_and_serves_under_a_uid_with_no_passwd_entry(
    kube: Kube, dataset: dict[str, str], s3_settings: S3Settings, tmp_path: Path
) -> None:
    """Under an unlisted uid, kopf's own peering identity (`getpass.getuser()`) fails and the
    operator used to die at start with `KeyError: 'getpwuid(): uid not found: 65532'`."""
    uid = uid_without_passwd_entry()
    kubelet = Kubelet(kube)
    async with (
        operator_process(kube, tmp_path, s3_settings, uid=uid) as (process, _, health_port),
        aiohttp.ClientSession() as session,
    ):

        async def healthy() -> str | None:
            if process.returncode is not None:
                log = (tmp_path / "operator.log").read_text()
                raise AssertionError(f"the operator exited with {process.returncode}:\n{log}")
            return await _get(session, f"http://127.0.0.1:{health_port}/healthz")

        await kube.wait_for(healthy, timeout=30, what="the operator's /healthz")
        owner = await asyncio.to_thread(Path(f"/proc/{process.pid}/status").read_text)
        assert f"Uid:\t{uid}\t{uid}\t{uid}" in owner
        await kube.create(ROLLOUT_JOBS, job_manifest("unlisted", [dataset], n_concurrent=2))
        await kubelet.until(lambda: job_phase(kube, "unlisted", "Completed"), "the job completes")
    log = (tmp_path / "operator.log").read_text()
    assert "getpwuid" not in log
    assert " ERROR " not in log, log
