"""Data rows on the cluster, end to end: the real operator cuts a Shape A dataset's rows into
shards (one RolloutTrial and one Pod each), each shard's Pod runs for real (`run_trial_pod`: the
runner and the shim as processes of this machine, the agent a shell script in a fake container,
the rows' files in the loopback S3 server), and the job ends with every row's trial directory
and seed 002's results.jsonl, evaluation.json and summary.

The agent adds the two numbers of its question ("r007: add 7 and 14"); the dataset's answer is
one off for every fifth row (those score 0), and the agent refuses the rows whose question says
"refuse" (agent_execution_failed, the agent's failure). It appends each row's id to
/app/answered, which tells the test which rows ran in which Pod.

- 250 rows, shardSize 100, nConcurrentTrials 2: three shards, never more than two unfinished,
  every row answered once in its shard's Pod, the job's figures and files, and the operator's
  API writes per row (printed; at most 0.1).
- A shard's node dies halfway (its runner killed): the shard runs again in a new Pod, which
  answers only the rows without a record; the recorded ones keep their result.json.
- A shard's image cannot be pulled: the operator records each of its rows with that error, and
  they count, and results.jsonl has their lines.
- An evicted shard whose runner stopped on SIGTERM runs its other rows again in a new Pod,
  the redone row's earlier files kept under retries/<k>/.
- A row's line (row.json) left by a lost runner without its result.json is not the row's line
  once the operator has recorded the row.

The runner answers about 2.5 rows a second (each row is several requests through the shim and
several uploads), so the first test takes about a minute; the others use a few rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kopf
import pytest
from operator_kit import (
    create_storage_secret,
    job_manifest,
    job_phase,
    most_unfinished,
    operator_config,
    operator_memo,
)
from s3_kit import S3Settings

from fakecontainer import FakeContainer, fake_container, requires_fake_container
from kubeharness.kube import Kube
from kubeharness.kubelet import (
    ENVIRONMENT,
    RUNNER,
    PodOutcome,
    PodRunner,
    container_argv,
    container_env,
    containers_of,
    remap,
    run_trial_pod,
    secrets_of,
)
from kubeharness.pod_status import running, terminated, waiting
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.dataset import load_dataset_path
from rollout.api.errors import ErrorType
from rollout.api.layout import (
    dataset_manifest_key,
    job_prefix,
    job_result_key,
    task_archive_key,
    trial_prefix,
)
from rollout.api.manifest import canonical_json, manifest_digest
from rollout.api.results import JobResult, TrialError, TrialResult
from rollout.api.rowresults import line_from_result
from rollout.api.rowrun import shard_task_name
from rollout.api.trials import child_name, trial_resource_name
from rollout.datasets.bundle import build_manifest, rows_archive
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

AGENT = "adder"
DATASET = "rows"
CREDENTIALS_SECRET = "storage-credentials"

EXECUTE = r"""
q=$(cat "$ROLLOUT_TASK_INSTRUCTION")
set -- $q
echo "${1%:}" >> /app/answered
if [ "$2" = refuse ]; then echo "I will not add $3 and $5" >&2; exit 3; fi
echo $(($3 + $5))
"""


# --- the dataset ----------------------------------------------------------------------------------


def row_id(number: int) -> str:
    return f"r{number:03d}"


def is_refused(number: int) -> bool:
    return number % 50 == 7


def is_wrong(number: int) -> bool:
    """The dataset's answer is one off: the agent's right sum scores 0."""
    return number % 5 == 0


def expected_reward(number: int) -> float | None:
    if is_refused(number):
        return None
    return 0.0 if is_wrong(number) else 1.0


def write_rows(root: Path, count: int) -> Path:
    """A Shape A dataset of `count` rows: dataset.toml and data/test.jsonl."""
    (root / "data").mkdir(parents=True)
    (root / "dataset.toml").write_text(f'name = "{DATASET}"\n[verifier]\nmetric = "exact_match"\n')
    lines = []
    for number in range(1, count + 1):
        a, b = number, 2 * number
        verb = "refuse" if is_refused(number) else "add"
        answer = a + b + (1 if is_wrong(number) else 0)
        question = f"{row_id(number)}: {verb} {a} and {b}"
        lines.append(
            json.dumps({"id": row_id(number), "question": question, "answer": str(answer)})
        )
    (root / "data" / "test.jsonl").write_text("".join(f"{line}\n" for line in lines))
    return root


def publish_rows(store: ObjectStore, root: Path) -> dict[str, str]:
    """Publish a data dataset as `rollout publish` does: its rows archive, then its manifest;
    its spec.datasets entry."""
    dataset = load_dataset_path(root)
    assert dataset.rows is not None
    manifest = build_manifest(dataset)
    assert manifest.rows is not None
    prefix = store.location.prefix
    store.put_bytes(
        task_archive_key(prefix, manifest.rows.content_hash), rows_archive(dataset.rows)
    )
    digest = manifest_digest(manifest)
    store.put_bytes(
        dataset_manifest_key(prefix, digest), canonical_json(manifest), "application/json"
    )
    return {"name": manifest.name, "digest": digest}


# --- the job and its Pods -------------------------------------------------------------------------


async def start_job(
    kube: Kube, store: ObjectStore, tmp_path: Path, job: str, rows: int, **spec: Any
) -> None:
    """Publish a dataset of `rows` rows and create a job of the adder over it."""
    dataset = publish_rows(store, write_rows(tmp_path / "dataset", rows))
    agents = [{"name": AGENT, "execute": EXECUTE}]
    await kube.create(ROLLOUT_JOBS, job_manifest(job, [dataset], agents=agents, **spec))


async def operator_memo_with_secret(kube: Kube, s3_settings: S3Settings) -> kopf.Memo:
    """The operator's memo; trial Pods mount the storage Secret made here."""
    await create_storage_secret(kube, s3_settings, CREDENTIALS_SECRET)
    config = operator_config(s3_settings, storage_credentials_secret=CREDENTIALS_SECRET)
    return operator_memo(kube, config)


def shard_name(job: str, number: int) -> str:
    return trial_resource_name(job, AGENT, DATASET, shard_task_name(number), 1)


def row_dir(job: str, number: int) -> str:
    return trial_prefix("", job, AGENT, DATASET, row_id(number), 1)


def answered(workdir: Path) -> list[str]:
    """The rows the agent answered in the Pod run in `workdir`, in order."""
    path = workdir / "environment" / "root" / "app" / "answered"
    return path.read_text().split() if path.exists() else []


async def job_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    return await kube.list(PODS, kube.namespace, labels=f"rollout.dev/job={job}")


async def run_pods(
    kube: Kube,
    job: str,
    workdir: Path,
    done: Callable[[], Awaitable[Any]],
    *,
    skip: Sequence[str] = (),
    within: float = 30,
) -> dict[str, PodOutcome]:
    """Run every Pod of the job for real as it appears (several at once), until `done()`; each
    in `workdir/<pod>`. The Pods named in `skip` are the test's to play."""
    runs: dict[str, asyncio.Task[PodOutcome]] = {}

    async def step() -> Any:
        for pod in await job_pods(kube, job):
            name = pod["metadata"]["name"]
            if name in runs or name in skip or pod["metadata"].get("deletionTimestamp"):
                continue
            runs[name] = asyncio.create_task(
                run_trial_pod(kube, name, kube.namespace, workdir / name)
            )
        for run in runs.values():
            if run.done():
                run.result()  # a harness error shows at once
        return await done()

    try:
        await kube.wait_for(step, timeout=within, what=f"job {job} to complete")
    except TimeoutError as err:
        raise TimeoutError(f"{err}\n{await where_things_are(kube, job)}") from None
    finally:
        unfinished = [run for run in runs.values() if not run.done()]
        for run in unfinished:
            run.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
    return {name: run.result() for name, run in runs.items()}


async def where_things_are(kube: Kube, job: str) -> str:
    """The job's and its trials' phases and counts, for a test that waited in vain."""
    lines = []
    for trial in await kube.list(ROLLOUT_TRIALS, kube.namespace):
        status = {k: v for k, v in (trial.get("status") or {}).items() if k != "rows"}
        lines.append(f"trial {trial['metadata']['name']}: {json.dumps(status)[:600]}")
    for pod in await job_pods(kube, job):
        lines.append(f"pod {pod['metadata']['name']}: {(pod.get('status') or {}).get('phase')}")
    found = await kube.find(ROLLOUT_JOBS, job)
    status = (found or {}).get("status") or {}
    lines.append(f"job {job}: {status.get('phase')} {status.get('counts')}")
    return "\n".join(lines)


def runner_rows(outcome: PodOutcome) -> dict[str, int]:
    """The runner's count of its shard's rows, from its termination message."""
    assert outcome.exit_code == 0, outcome.stderr[-3000:]
    rows: dict[str, int] = json.loads(outcome.message)["rows"]
    return rows


class StoppedPod(PodRunner):
    """A shard's Pod whose node goes away halfway: its runner and environment run as
    `PodRunner` runs them, until the test stops the runner with `signal`: SIGKILL (the node
    died: nothing is uploaded after) or SIGTERM (an eviction or a drain: the runner's grace)."""

    def runner_process(self, container: FakeContainer) -> tuple[list[str], dict[str, str]]:
        """The runner's command line and environment in the fake container `container`."""
        runner = containers_of(self.pod)[RUNNER]
        mounts = self._runner_mounts(runner, container)
        env = {k: remap(v, mounts) for k, v in container_env(runner, self.secrets).items()}
        args = [remap(arg, mounts) for arg in container_argv(runner, env)]
        log = self.workdir / "termination-log"
        log.touch()
        argv = [sys.executable, "-m", "rollout_runner.main", *args, "--termination-log", str(log)]
        return argv, {"PATH": os.environ["PATH"], **env}

    async def run_until(
        self, kube: Kube, stopped_when: Callable[[], bool], stop: signal.Signals
    ) -> PodOutcome:
        """Run the Pod until `stopped_when()` holds, then send its runner `stop`; the runner's
        outcome once it has ended (the environment ends with the Pod)."""
        environment = containers_of(self.pod)[ENVIRONMENT]
        command = container_argv(environment, container_env(environment, self.secrets))
        base = self.workdir / "environment"
        base.mkdir()
        stderr = self.workdir / "runner.log"
        with fake_container(base, command=command) as container, stderr.open("w") as log:
            argv, env = self.runner_process(container)
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdout=subprocess.DEVNULL, stderr=log
            )
            try:
                await kube.wait_for(stopped_when, timeout=30, what="the runner halfway")
                assert process.returncode is None, "the runner ended before it was stopped"
                process.send_signal(stop)
                code = await asyncio.wait_for(process.wait(), timeout=30)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        message = (self.workdir / "termination-log").read_text()
        return PodOutcome(exit_code=code, message=message, stderr=stderr.read_text())


def first_record(store: ObjectStore, job: str, number: int) -> TrialResult | None:
    """A row's result.json as it is now, if it has one."""
    key = row_dir(job, number) + "result.json"
    return TrialResult.from_json(store.get_bytes(key)) if store.exists(key) else None


def kept_by_a_later_try(result: TrialResult) -> bool:
    """Whether a row's record is kept by a later try: scored, or failed by the agent."""
    return result.error is None or result.error.type.value == "agent_execution_failed"


def json_at(store: ObjectStore, key: str) -> Any:
    return json.loads(store.get_bytes(key))


def read_jsonl(store: ObjectStore, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.get_bytes(key).decode().splitlines()]


def summary_file(store: ObjectStore, job: str, runs: int = 1) -> dict[str, Any]:
    """The job's latest summary (each run of it writes one: `runs`)."""
    base = job_prefix("", job)
    found = sorted(k for k in store.list_keys(base + "summary_") if k.endswith(".json"))
    assert len(found) == runs, found
    assert found[-1].startswith(f"{base}summary_{DATASET}_")
    return dict(json_at(store, found[-1]))


# --- what the figures should be -------------------------------------------------------------------


def figures(rewards: Sequence[float | None]) -> dict[str, Any]:
    """What rows of these rewards add up to (None: failed)."""
    scored = [r for r in rewards if r is not None]
    passes = sum(1 for r in scored if r == 1.0)
    return {
        "total": len(rewards),
        "completed": len(scored),
        "failed": len(rewards) - len(scored),
        "passes": passes,
        "mean": sum(scored) / len(scored),
    }


def check_status(
    status: Mapping[str, Any], rewards: Sequence[float | None], failures: Mapping[str, int]
) -> None:
    """The job's status once it Completed with rows of these rewards."""
    want = figures(rewards)
    assert status["phase"] == "Completed"
    assert status["counts"] == {
        "total": want["total"],
        "pending": 0,
        "running": 0,
        "finished": want["total"],
        "completed": want["completed"],
        "failed": want["failed"],
    }
    assert status["passRate"] == pytest.approx(want["passes"] / want["completed"])
    assert status["meanReward"] == pytest.approx(want["mean"])
    assert status["failures"] == {"agent": 0, "task": 0, "infrastructure": 0, **failures}
    agent = status["agents"][AGENT]
    assert (agent["total"], agent["completed"], agent["failed"]) == (
        want["total"], want["completed"], want["failed"]
    )  # fmt: skip


def check_job_files(
    store: ObjectStore,
    job: str,
    numbers: Sequence[int],
    rewards: Sequence[float | None],
    runs: int = 1,
) -> list[dict[str, Any]]:
    """result.json, evaluation.json and the (latest of `runs`) summary of the job's rows
    `numbers` (in order, of these rewards), and results.jsonl's rows in order; its lines."""
    want = figures(rewards)
    written = json_at(store, job_result_key("", job))
    assert (written["total_trials"], written["completed_trials"], written["failed_trials"]) == (
        want["total"], want["completed"], want["failed"]
    )  # fmt: skip
    assert written["pass_rate"] == pytest.approx(want["passes"] / want["completed"])
    assert written["mean_reward"] == pytest.approx(want["mean"])
    result = JobResult.from_json(store.get_bytes(job_result_key("", job)))
    assert [(r.task_name, r.agent_name, r.dataset_name, r.attempt) for r in result.results] == [
        (row_id(n), AGENT, DATASET, 1) for n in numbers
    ]
    assert [r.reward for r in result.results] == list(rewards)

    lines = read_jsonl(store, job_prefix("", job) + "results.jsonl")
    assert [line["task_id"] for line in lines] == [row_id(n) for n in numbers]
    assert [line["score"] for line in lines] == list(rewards)
    for line in lines:
        assert line["rollout"]["verifier"] == "exact_match"
        assert (line["rollout"]["agent_name"], line["rollout"]["dataset_name"]) == (AGENT, DATASET)

    answered_lines = sum(1 for line in lines if line["success"])
    evaluation = json_at(store, job_prefix("", job) + "evaluation.json")
    distribution = {"0.0": want["completed"] - want["passes"], "1.0": want["passes"]}
    overall = {
        "count": want["completed"],
        "mean": pytest.approx(want["mean"]),
        "passes": want["passes"],
        "unscored": want["failed"],
        "distribution": {key: count for key, count in distribution.items() if count},
    }
    assert evaluation["overall"] == overall
    assert evaluation["metrics"] == {"exact_match": overall}
    assert evaluation["agents"] == {AGENT: overall}

    summary = summary_file(store, job, runs)
    assert summary["benchmark_name"] == DATASET
    assert (summary["total_tasks"], summary["successful_tasks"], summary["failed_tasks"]) == (
        want["total"], answered_lines, want["total"] - answered_lines
    )  # fmt: skip
    assert summary["average_score"] == pytest.approx(want["mean"])
    assert summary["metric"] == "exact_match"
    assert summary["results_file"] == store.uri(job_prefix("", job) + "results.jsonl")
    assert summary["evaluation_file"] == store.uri(job_prefix("", job) + "evaluation.json")
    return lines


def check_answered_lines(lines: Sequence[Mapping[str, Any]], numbers: Sequence[int]) -> None:
    """results.jsonl's lines of rows the agent answered (or refused), from their row.json."""
    for number, line in zip(numbers, lines, strict=True):
        assert line["question"].startswith(f"{row_id(number)}: "), line
        assert line["success"] is not is_refused(number), line
        if is_refused(number):
            assert line["rollout"]["error_type"] == "agent_execution_failed", line
            assert line["predicted_answer"] is None
        else:
            assert line["predicted_answer"] == str(3 * number), line
            assert line["rollout"]["error_type"] is None


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.timeout(240)  # the runner answers about 2.5 rows a second: 150 rows one after another
async def test_250_rows_run_in_three_shards_two_at_a_time_and_make_seed_002s_files(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    numbers = list(range(1, 251))
    rewards = [expected_reward(n) for n in numbers]
    shards = [shard_name("big", n) for n in (1, 2, 3)]
    rows_of = dict(zip(shards, (numbers[:100], numbers[100:200], numbers[200:]), strict=True))
    began = time.monotonic()
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await start_job(kube, store, tmp_path, "big", len(numbers), n_concurrent=2, shardSize=100)
        outcomes = await run_pods(
            kube,
            "big",
            tmp_path / "pods",
            lambda: job_phase(kube, "big", "Completed"),
            within=150,
        )
        await kube.settle(quiet=0.3)
    took = time.monotonic() - began

    calls = kube.calls()
    posted = [c.name for c in calls if c.method == "POST" and c.resource == ROLLOUT_TRIALS]
    assert posted == shards  # one trial per shard, in order
    assert most_unfinished(calls) == 2
    # One Pod per shard, each run once, gone when its shard ended; every row answered once, in
    # order, in its shard's Pod.
    assert set(outcomes) == set(shards)
    assert await job_pods(kube, "big") == []
    for name, outcome in outcomes.items():
        want = figures([expected_reward(n) for n in rows_of[name]])
        assert runner_rows(outcome) == {
            "total": want["total"], "recorded": want["total"], "kept": 0,
            "scored": want["completed"], "failed": want["failed"],
        }  # fmt: skip
        assert answered(tmp_path / "pods" / name) == [row_id(n) for n in rows_of[name]]

    trials = {t["metadata"]["name"]: t for t in await kube.list(ROLLOUT_TRIALS, kube.namespace)}
    assert sorted(trials) == sorted(shards)
    for name, trial in trials.items():
        mine = rows_of[name]
        assert trial["spec"]["taskName"] == shard_task_name(shards.index(name) + 1)
        assert trial["spec"]["rows"]["items"] == [{"id": row_id(n), "attempt": 1} for n in mine]
        status = trial["status"]
        assert status["phase"] == "Succeeded", status
        assert [(r["id"], r["attempt"], r.get("reward")) for r in status["rows"]] == [
            (row_id(n), 1, expected_reward(n)) for n in mine
        ]
        assert [(r.get("errorType"), r.get("failureClass")) for r in status["rows"]] == [
            ("agent_execution_failed", "agent") if is_refused(n) else (None, None) for n in mine
        ]
    status = (await kube.get(ROLLOUT_JOBS, "big"))["status"]
    check_status(status, rewards, {"agent": 5})

    # Every row has its own trial directory, with its result.json and its line (row.json).
    keys = set(store.list_keys(job_prefix("", "big")))
    for number in numbers:
        assert {row_dir("big", number) + "result.json", row_dir("big", number) + "row.json"} <= keys
    refused = TrialResult.from_json(store.get_bytes(row_dir("big", 57) + "result.json"))
    assert refused.error is not None
    assert refused.error.type.value == "agent_execution_failed"
    assert refused.task_name == row_id(57)
    lines = check_job_files(store, "big", numbers, rewards)
    check_answered_lines(lines, numbers)

    writes = [c for c in calls if c.is_write]
    per_row = len(writes) / len(numbers)
    kinds = Counter(f"{c.method} {c.resource}{'/' + c.subresource if c.subresource else ''}"
                    for c in writes)  # fmt: skip
    print(f"\n{len(writes)} API writes for {len(numbers)} rows: {per_row:.3f} a row ({took:.0f} s)")
    print("\n".join(f"  {count} {kind}" for kind, count in sorted(kinds.items())))
    assert per_row <= 0.1, kinds


async def test_a_shard_whose_node_died_runs_again_and_redoes_only_the_unrecorded_rows(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    numbers = list(range(1, 13))  # 5 and 10 are wrong, 7 refused
    rewards = [expected_reward(n) for n in numbers]
    shard = shard_name("lost", 1)
    first_dir = tmp_path / "first"
    retry = child_name(shard, "r1")
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await start_job(kube, store, tmp_path, "lost", len(numbers))
        first = await kube.wait_for(lambda: kube.find(PODS, shard), what="the shard's Pod")
        await kube.set_pod_status(shard, containers={ENVIRONMENT: running(), RUNNER: running()})
        node = StoppedPod(first, await secrets_of(kube, kube.namespace), first_dir)
        # Killed once the agent is at row 9: rows 1-8 are recorded (their result.json is
        # written last, before the next row starts), 7 by the agent's failure.
        killed = await node.run_until(kube, lambda: len(answered(first_dir)) >= 9, signal.SIGKILL)
        assert (killed.exit_code, killed.message) == (-9, "")
        recorded = {
            key: store.get_bytes(key)
            for key in store.list_keys(job_prefix("", "lost"))
            if key.endswith("/result.json")
        }
        await kube.set_pod_status(
            shard,
            containers={RUNNER: terminated(137), ENVIRONMENT: terminated(137)},
            phase="Failed",
            reason="Terminated",
            message="Pod was terminated in response to imminent node shutdown.",
        )
        await kube.wait_for(lambda: kube.find(PODS, retry), what="the shard's Pod for try 2")
        second = await run_trial_pod(kube, retry, kube.namespace, tmp_path / "second")
        job = await kube.wait_for(lambda: job_phase(kube, "lost", "Completed"), what="completed")

    ran_first = answered(first_dir)
    kept = [n for n in numbers if row_dir("lost", n) + "result.json" in recorded]
    assert kept == numbers[: len(kept)]
    assert len(kept) >= 8
    assert len(kept) < len(numbers), "the runner finished before it was killed"
    assert ran_first[: len(kept)] == [row_id(n) for n in kept]
    # The new Pod answered only the rows without a record: none that was scored, nor the one
    # the agent failed, ran again; their result.json is as the first try wrote it.
    assert answered(tmp_path / "second") == [row_id(n) for n in numbers if n not in kept]
    for key, data in recorded.items():
        assert store.get_bytes(key) == data, key
    assert runner_rows(second) == {
        "total": 12, "recorded": 12, "kept": len(kept), "scored": 11, "failed": 1
    }  # fmt: skip
    interrupted = [n for n in numbers if row_id(n) in ran_first and n not in kept]
    for number in numbers:
        result = TrialResult.from_json(store.get_bytes(row_dir("lost", number) + "result.json"))
        assert result.reward == expected_reward(number), number
        assert result.rollout is not None
        if number in kept:
            assert result.rollout.tries == 1, number
        elif number in interrupted:  # begun by the first try, recorded by the second
            assert result.rollout.tries == 2, number

    assert [w.name for w in kube.writes(PODS) if w.method == "POST"] == [shard, retry]
    trial = await kube.get(ROLLOUT_TRIALS, shard)
    assert trial["status"]["phase"] == "Succeeded"
    assert trial["status"]["infraRetries"] == 1
    assert [(r["id"], r.get("reward")) for r in trial["status"]["rows"]] == [
        (row_id(n), expected_reward(n)) for n in numbers
    ]
    check_status(job["status"], rewards, {"agent": 1})
    lines = check_job_files(store, "lost", numbers, rewards)
    check_answered_lines(lines, numbers)


async def test_a_shard_whose_image_cannot_be_pulled_gets_a_record_for_each_of_its_rows(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    numbers = list(range(1, 7))  # shard 1: rows 1-4, never run; shard 2: rows 5 (wrong) and 6
    shards = [shard_name("nopull", 1), shard_name("nopull", 2)]
    pull = ("ImagePullBackOff", 'Back-off pulling image "registry.example/rollout-runner:test"')
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await start_job(kube, store, tmp_path, "nopull", len(numbers), n_concurrent=2, shardSize=4)
        await kube.wait_for(lambda: kube.find(PODS, shards[0]), what="shard 1's Pod")
        await kube.set_pod_status(shards[0], containers={ENVIRONMENT: waiting(*pull)})
        outcomes = await run_pods(
            kube,
            "nopull",
            tmp_path / "pods",
            lambda: job_phase(kube, "nopull", "Completed"),
            skip=[shards[0]],
        )
        await kube.wait_for(lambda: kube.gone(PODS, shards[0]), what="shard 1's Pod removed")

    assert set(outcomes) == {shards[1]}
    assert answered(tmp_path / "pods" / shards[1]) == [row_id(5), row_id(6)]
    failed = (await kube.get(ROLLOUT_TRIALS, shards[0]))["status"]
    assert failed["phase"] == "Failed"
    assert failed["error"]["type"] == "environment_image_pull_failed"
    assert "ImagePullBackOff" in failed["error"]["message"]
    assert failed["rows"] == [
        {
            "id": row_id(n),
            "attempt": 1,
            "errorType": "environment_image_pull_failed",
            "failureClass": "infrastructure",
        }
        for n in (1, 2, 3, 4)
    ]
    done = (await kube.get(ROLLOUT_TRIALS, shards[1]))["status"]
    assert [(r["id"], r.get("reward")) for r in done["rows"]] == [("r005", 0.0), ("r006", 1.0)]

    rewards = [None, None, None, None, 0.0, 1.0]
    job = await kube.get(ROLLOUT_JOBS, "nopull")
    check_status(job["status"], rewards, {"infrastructure": 4})

    # The operator wrote each unrun row's record (result.json and error.txt, no row.json).
    records = []
    for number in (1, 2, 3, 4):
        prefix = row_dir("nopull", number)
        assert sorted(store.list_keys(prefix)) == [prefix + "error.txt", prefix + "result.json"]
        record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
        assert (record.task_name, record.dataset_name, record.agent_name, record.attempt) == (
            row_id(number), DATASET, AGENT, 1
        )  # fmt: skip
        assert record.reward is None
        assert record.error is not None
        assert record.error.type.value == "environment_image_pull_failed"
        assert record.error.message == failed["error"]["message"]
        assert record.rollout is not None
        assert record.rollout.failure_class == "infrastructure"
        error_txt = store.get_bytes(prefix + "error.txt").decode()
        assert error_txt.startswith("environment_image_pull_failed: ")
        records.append(record)

    lines = check_job_files(store, "nopull", numbers, rewards)
    # Their lines in results.jsonl are made from those records.
    assert lines[:4] == [
        json.loads(line_from_result(record, verifier="exact_match").to_json()) for record in records
    ]
    for line in lines[:4]:
        assert line["success"] is False
        assert line["rollout"]["error_type"] == "environment_image_pull_failed"
    check_answered_lines(lines[4:], numbers[4:])


async def test_an_evicted_shard_whose_runner_stopped_gracefully_runs_its_other_rows_again(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    """An eviction (or a drain) gives the runner SIGTERM: it records the row it was running as
    internal_error, leaves the rows after it without a record "for the next try"
    (`rollout_runner.shard`), and reports. The shard is not done: its Pod was taken away."""
    numbers = list(range(1, 9))  # 5 is wrong, 7 refused
    rewards = [expected_reward(n) for n in numbers]
    shard = shard_name("evicted", 1)
    first_dir = tmp_path / "first"
    retry = child_name(shard, "r1")

    async def retried_or_finished() -> str | None:
        if await kube.find(PODS, retry) is not None:
            return "retried"
        trial = await kube.find(ROLLOUT_TRIALS, shard)
        phase = ((trial or {}).get("status") or {}).get("phase")
        return f"finished: {phase}" if phase in ("Succeeded", "Failed") else None

    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await start_job(kube, store, tmp_path, "evicted", len(numbers))
        first = await kube.wait_for(lambda: kube.find(PODS, shard), what="the shard's Pod")
        await kube.set_pod_status(shard, containers={ENVIRONMENT: running(), RUNNER: running()})
        node = StoppedPod(first, await secrets_of(kube, kube.namespace), first_dir)
        stopped = await node.run_until(kube, lambda: len(answered(first_dir)) >= 4, signal.SIGTERM)
        assert stopped.exit_code == 0, stopped.stderr[-3000:]
        reported = json.loads(stopped.message)["rows"]
        assert reported["recorded"] < reported["total"]
        first_try = {n: first_record(store, "evicted", n) for n in numbers}
        await kube.set_pod_status(
            shard,
            containers={RUNNER: terminated(0, message=stopped.message), ENVIRONMENT: terminated(0)},
            phase="Failed",
            reason="Evicted",
            message="The node was low on resource: memory.",
        )
        verdict = await kube.wait_for(retried_or_finished, what="a retry or the shard's end")
        assert verdict == "retried", f"the evicted shard was {verdict}, its rows not run again"
        second = await run_trial_pod(kube, retry, kube.namespace, tmp_path / "second")
        job = await kube.wait_for(lambda: job_phase(kube, "evicted", "Completed"), what="done")

    kept = [n for n, r in first_try.items() if r is not None and kept_by_a_later_try(r)]
    stopped_rows = [n for n, r in first_try.items() if r is not None and n not in kept]
    assert answered(tmp_path / "second") == [row_id(n) for n in numbers if n not in kept]
    assert runner_rows(second)["kept"] == len(kept)
    for number in stopped_rows:  # internal_error (SIGTERM) in the first try; run again
        result = TrialResult.from_json(store.get_bytes(row_dir("evicted", number) + "result.json"))
        assert result.error is None
        assert result.rollout is not None
        assert result.rollout.tries == 2
        # Its first try's error.txt is not left beside the second try's success.
        assert not store.exists(row_dir("evicted", number) + "error.txt")
    check_status(job["status"], rewards, {"agent": 1})
    check_job_files(store, "evicted", numbers, rewards)


async def test_a_rows_line_left_without_its_result_json_is_not_its_line_in_results_jsonl(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    """A runner uploads a row's line (row.json) just before its result.json: lost in between,
    the row has a line and no record. If the shard then ends without running it again, the
    row's record is the operator's, and results.jsonl says what that record says."""
    shard = shard_name("stale", 1)
    retry = child_name(shard, "r1")
    pull = ("ErrImagePull", 'failed to pull image "registry.example/rollout-runner:test"')
    line = {
        "task_id": row_id(1), "question": "r001: add 1 and 2", "predicted_answer": "3",
        "success": True, "ground_truth": "3", "score": 1.0, "error": None, "trajectory": None,
        "rollout": {"agent_name": AGENT, "dataset_name": DATASET, "attempt": 1,
                    "error_type": None, "verifier": "exact_match"},
    }  # fmt: skip
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await start_job(kube, store, tmp_path, "stale", 3, maxInfraRetries=1)
        await kube.wait_for(lambda: kube.find(PODS, shard), what="the shard's Pod")
        await kube.set_pod_status(shard, containers={ENVIRONMENT: running(), RUNNER: running()})
        store.put_bytes(row_dir("stale", 1) + "row.json", json.dumps(line).encode())
        await kube.set_pod_status(
            shard,
            containers={RUNNER: terminated(137), ENVIRONMENT: terminated(137)},
            phase="Failed",
            reason="Evicted",
            message="The node was low on resource: memory.",
        )
        await kube.wait_for(lambda: kube.find(PODS, retry), what="the shard's Pod for try 2")
        await kube.set_pod_status(retry, containers={ENVIRONMENT: waiting(*pull)})
        job = await kube.wait_for(lambda: job_phase(kube, "stale", "Completed"), what="done")

    trial = (await kube.get(ROLLOUT_TRIALS, shard))["status"]
    assert trial["error"]["type"] == "environment_image_pull_failed"
    assert {r["errorType"] for r in trial["rows"]} == {"environment_image_pull_failed"}
    assert job["status"]["counts"]["failed"] == 3
    records = [first_record(store, "stale", n) for n in (1, 2, 3)]
    lines = read_jsonl(store, job_prefix("", "stale") + "results.jsonl")
    assert lines == [
        json.loads(line_from_result(record, verifier="exact_match").to_json())
        for record in records
        if record is not None
    ]
    evaluation = json_at(store, job_prefix("", "stale") + "evaluation.json")
    assert (evaluation["overall"]["count"], evaluation["overall"]["unscored"]) == (0, 3)
    summary = summary_file(store, "stale")
    assert (summary["successful_tasks"], summary["average_score"]) == (0, None)


async def test_the_oracles_rows_run_in_a_pod_of_the_runner_alone(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    """The oracle answers rows from their ground truth: its shard's Pod has no environment
    container, and every row is scored 1.0 (the wrong ground truths too: they are the truth)."""
    numbers = list(range(1, 6))
    dataset = publish_rows(store, write_rows(tmp_path / "dataset", len(numbers)))
    shard = trial_resource_name("oracle-rows", "oracle", DATASET, shard_task_name(1), 1)
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await kube.create(
            ROLLOUT_JOBS,
            job_manifest("oracle-rows", [dataset], agents=[{"name": "oracle"}], shardSize=10),
        )
        pod = await kube.wait_for(lambda: kube.find(PODS, shard), what="the shard's Pod")
        outcomes = await run_pods(
            kube,
            "oracle-rows",
            tmp_path / "pods",
            lambda: job_phase(kube, "oracle-rows", "Completed"),
        )

    assert [c["name"] for c in pod["spec"]["containers"]] == ["runner"]
    assert set(outcomes) == {shard}
    assert outcomes[shard].exit_code == 0, outcomes[shard].stderr
    status = (await kube.get(ROLLOUT_TRIALS, shard))["status"]
    assert [(row["id"], row["reward"]) for row in status["rows"]] == [
        (row_id(n), 1.0) for n in numbers
    ]
    for number in numbers:
        prefix = trial_prefix("", "oracle-rows", "oracle", DATASET, row_id(number), 1)
        result = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
        assert (result.reward, result.error) == (1.0, None)


async def test_deleting_a_job_records_the_rows_of_a_shard_that_never_started(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    kube.needs_garbage_collector()  # owner references cascade
    first, second = shard_name("doomed", 1), shard_name("doomed", 2)
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await start_job(kube, store, tmp_path, "doomed", 4, n_concurrent=1, shardSize=2)
        await kube.wait_for(lambda: kube.find(PODS, first), what="shard 1's Pod")
        await kube.delete(ROLLOUT_JOBS, "doomed")
        await kube.wait_for(lambda: kube.gone(ROLLOUT_TRIALS, first), what="shard 1 gone")
        await kube.settle(quiet=0.3)

    assert await kube.find(ROLLOUT_TRIALS, second) is None  # never made
    for number in (1, 2):
        record = TrialResult.from_json(store.get_bytes(row_dir("doomed", number) + "result.json"))
        assert record.error is not None
        assert record.error.type == "internal_error"
        assert "was deleted (the job was cancelled)" in record.error.message
        assert store.exists(row_dir("doomed", number) + "error.txt")
    for number in (3, 4):
        assert store.list_keys(row_dir("doomed", number)) == []


async def test_a_resumed_data_job_runs_again_only_the_rows_without_a_record_it_keeps(
    kube: Kube, s3_settings: S3Settings, store: ObjectStore, tmp_path: Path
) -> None:
    # First run: shard 1 (rows 1-4) cannot pull its image, so its rows are the infrastructure's
    # failures; shard 2 (rows 5 and 6) runs. Then row 6's record is made an infrastructure
    # failure too, as a lost runner's would be.
    numbers = list(range(1, 7))
    shards = [shard_name("rowsback", 1), shard_name("rowsback", 2)]
    pull = ("ImagePullBackOff", 'Back-off pulling image "registry.example/rollout-runner:test"')
    memo = await operator_memo_with_secret(kube, s3_settings)
    async with kube.operator(memo=memo):
        await start_job(kube, store, tmp_path, "rowsback", 6, n_concurrent=2, shardSize=4)
        await kube.wait_for(lambda: kube.find(PODS, shards[0]), what="shard 1's Pod")
        await kube.set_pod_status(shards[0], containers={ENVIRONMENT: waiting(*pull)})
        await run_pods(
            kube, "rowsback", tmp_path / "first", lambda: job_phase(kube, "rowsback", "Completed"),
            skip=[shards[0]],
        )  # fmt: skip
        job = await kube.get(ROLLOUT_JOBS, "rowsback")
        await kube.delete(ROLLOUT_JOBS, "rowsback", kube.namespace)
        await kube.wait_for(lambda: kube.gone(ROLLOUT_JOBS, "rowsback"), what="the job gone")
    row5 = store.get_bytes(row_dir("rowsback", 5) + "result.json")
    lost = TrialResult.from_json(store.get_bytes(row_dir("rowsback", 6) + "result.json"))
    lost = lost.model_copy(update={"reward": None, "error": TrialError(
        type=ErrorType.INTERNAL_ERROR, message="the runner was lost")})  # fmt: skip
    assert lost.failure_class == "infrastructure"
    store.put_bytes(row_dir("rowsback", 6) + "result.json", lost.to_json().encode())
    first = {n: store.get_bytes(row_dir("rowsback", n) + "result.json") for n in (1, 6)}

    # The same job, resumed: both shards run, shard 1 all its rows and shard 2 row 6 alone.
    manifest = {key: job[key] for key in ("apiVersion", "kind", "spec")} | {
        "metadata": {"name": "rowsback"}
    }
    manifest["spec"]["resume"] = True
    config = operator_config(s3_settings, storage_credentials_secret=CREDENTIALS_SECRET)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, manifest)
        outcomes = await run_pods(
            kube, "rowsback", tmp_path / "again", lambda: job_phase(kube, "rowsback", "Completed")
        )
    assert set(outcomes) == set(shards)
    assert answered(tmp_path / "again" / shards[0]) == [row_id(n) for n in (1, 2, 3, 4)]
    assert answered(tmp_path / "again" / shards[1]) == [row_id(6)]
    items = (await kube.get(ROLLOUT_TRIALS, shards[1]))["spec"]["rows"]["items"]
    assert items == [{"id": row_id(6), "attempt": 1, "tryNumber": 2}]
    assert store.get_bytes(row_dir("rowsback", 5) + "result.json") == row5  # kept, byte for byte
    for number in (1, 6):  # the earlier try's files under retries/1/, the new record in place
        prefix = row_dir("rowsback", number)
        assert store.get_bytes(prefix + "retries/1/result.json") == first[number]
        record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
        assert record.rollout is not None
        assert record.rollout.tries == 2
    rewards = [expected_reward(n) for n in numbers]
    status = (await kube.get(ROLLOUT_JOBS, "rowsback"))["status"]
    check_status(status, rewards, {})
    lines = check_job_files(store, "rowsback", numbers, rewards, runs=2)  # a summary per run
    check_answered_lines(lines, numbers)
