"""In-cluster image builds through the operator, for real: the suite's Kubernetes API, real S3, a
real OCI registry on loopback (Debian's docker-registry), and each build Pod run by the test
kubelet, whose `build` container runs Buildah on this machine (the Pod's own script).

A task whose Dockerfile needs a build gets a RolloutImage named after the image's hash; the
operator asks the registry for the image first, builds it when missing (one build Pod however
many trials and jobs wait), and each waiting trial gets its Pod once the image is Ready, pinned
to the digest the registry has. A failed build ends every waiting trial with the end of its log;
one past its timeout ends them environment_build_timeout.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import pytest
import urllib3
from operator_kit import (
    create_storage_secret,
    job_manifest,
    make_dataset,
    operator_config,
    operator_memo,
    publish,
)
from s3_kit import S3Settings

from buildah_kit import base_image_unavailable_reason, build, buildah_store, push_base_image
from fakecontainer import requires_fake_container
from kubeharness.build_kubelet import run_build_pod
from kubeharness.kube import Kube
from kubeharness.kubelet import run_trial_pod
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS, SECRETS
from registry_server import RegistryServer, registry_unavailable_reason
from rollout.api.dataset import load_local_dataset
from rollout.api.images import image_hash
from rollout.api.layout import (
    build_log_key,
    environment_archive_key,
    task_archive_key,
    trial_prefix,
)
from rollout.api.resources import Builder, BuilderType
from rollout.api.results import TrialResult
from rollout.api.taskdir import environment_hash, load_task, task_content_hash
from rollout.controller.builds import DEFAULT_BUILD_PLATFORM, DEFAULT_BUILDER_IMAGES
from rollout.datasets.bundle import environment_archive, task_archive
from rollout.storage import ObjectStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        (reason := registry_unavailable_reason() or base_image_unavailable_reason()) is not None,
        reason=reason or "",
    ),
]

ROLLOUTIMAGES = "rollout.dev/v1alpha1/rolloutimages"
CREDENTIALS_SECRET = "storage-credentials"
BUILDER = Builder(type=BuilderType.BUILDAH, image=DEFAULT_BUILDER_IMAGES[BuilderType.BUILDAH])
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A registry on loopback with the busybox base image (made here: no internet) in it."""
    with RegistryServer(tmp_path_factory.mktemp("registry")) as server:
        push_base_image(server.host, "base/busybox:1")
        yield server


def dockerfile(registry: RegistryServer, run: str) -> str:
    """A Dockerfile that needs a build; each test's own `run`, so that one test's image is not
    in the registry (module-wide) for the next."""
    return f"FROM {registry.host}/base/busybox:1\nRUN {run}\n"


def publish_whole(store: ObjectStore, root: Path) -> dict[str, str]:
    """Publish a dataset as `rollout publish` does: task archives, build contexts, manifest."""
    for task in load_local_dataset(root).tasks:
        path = task.path
        store.put_bytes(task_archive_key("", task_content_hash(path)), task_archive(path))
        store.put_bytes(
            environment_archive_key("", environment_hash(path)),
            environment_archive(load_task(path)),
        )
    return publish(store, root)


@dataclass
class Builds:
    """What a test of builds starts from: the test's API, storage (with the Secret that build
    and trial Pods mount), the registry, and a place for its datasets."""

    kube: Kube
    s3_settings: S3Settings
    registry: RegistryServer
    root: Path

    @property
    def store(self) -> ObjectStore:
        return self.s3_settings.store()

    def dataset(
        self, name: str, run: str, tasks: Sequence[str] = ("t",), **task_options: Any
    ) -> tuple[dict[str, str], Path]:
        """A dataset of tasks whose Dockerfile is `FROM <base>` and `RUN <run>`, published
        whole; its spec.datasets entry and its directory. Tasks have no docker_image unless
        `image=` says."""
        task_options.setdefault("image", None)
        root = make_dataset(
            self.root / name / "d",
            list(tasks),
            dockerfile=dockerfile(self.registry, run),
            **task_options,
        )
        return publish_whole(self.store, root), root

    def memo(self, registry: RegistryServer | None = None, **settings: Any) -> kopf.Memo:
        """The operator's memo: Buildah builds into `registry` (default: the test's), with more
        of the operator's `settings`."""
        config = operator_config(
            self.s3_settings,
            storage_credentials_secret=CREDENTIALS_SECRET,
            image_registry=(registry or self.registry).host,
            image_registry_plain_http=True,
            builder=BuilderType.BUILDAH,
            build_poll_sec=0.2,
            **settings,
        )
        return operator_memo(self.kube, config)


@pytest.fixture
async def builds(
    kube: Kube, s3_settings: S3Settings, registry: RegistryServer, tmp_path: Path
) -> Builds:
    await create_storage_secret(kube, s3_settings, CREDENTIALS_SECRET)
    return Builds(kube, s3_settings, registry, tmp_path)


def tag_of(task: Path) -> str:
    return image_hash(environment_hash(task), BUILDER, DEFAULT_BUILD_PLATFORM)


def registry_digest(registry: RegistryServer, repository: str, tag: str) -> str | None:
    answer = urllib3.request(
        "HEAD", f"{registry.url}/v2/{repository}/manifests/{tag}", headers={"Accept": ACCEPT}
    )
    return answer.headers.get("Docker-Content-Digest") if answer.status == 200 else None


async def images(kube: Kube) -> list[dict[str, Any]]:
    return await kube.list(ROLLOUTIMAGES, kube.namespace)


async def build_pods(kube: Kube) -> list[dict[str, Any]]:
    return await kube.list(PODS, kube.namespace, labels="rollout.dev/component=image-build")


async def trial_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    return await kube.list(PODS, kube.namespace, labels=f"rollout.dev/job={job}")


async def trials(kube: Kube, job: str) -> list[dict[str, Any]]:
    return await kube.list(ROLLOUT_TRIALS, kube.namespace, labels=f"rollout.dev/job={job}")


async def finished(kube: Kube, job: str, count: int) -> list[dict[str, Any]] | None:
    found = await trials(kube, job)
    done = [t for t in found if (t.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    return done if len(done) == count else None


async def one_build_pod(kube: Kube) -> dict[str, Any] | None:
    pods = await build_pods(kube)
    return pods[0] if len(pods) == 1 else None


def trial_result(store: ObjectStore, job: str, dataset: str, task: str) -> TrialResult:
    key = trial_prefix("", job, "oracle", dataset, task, 1) + "result.json"
    return TrialResult.from_json(store.get_bytes(key))


# --- the tests ------------------------------------------------------------------------------------


@requires_fake_container()
async def test_a_dockerfile_is_built_pushed_and_run_pinned_to_its_digest(
    builds: Builds, tmp_path: Path
) -> None:
    kube, registry = builds.kube, builds.registry
    dataset, root = builds.dataset("built", "echo built-0 > /built", ["hello"])
    tag = tag_of(root / "hello")
    memo = builds.memo()
    async with kube.operator(memo=memo):
        await kube.create(ROLLOUT_JOBS, job_manifest("built", [dataset]))
        pod = await kube.wait_for(lambda: one_build_pod(kube), what="the build Pod", timeout=20)
        # The trial waits, Pending, and says why; it has no Pod yet.
        waiting = await kube.wait_for(lambda: _waiting_trial(kube, "built"), what="waiting")
        assert await trial_pods(kube, "built") == []
        outcomes = await run_build_pod(kube, pod["metadata"]["name"], kube.namespace, tmp_path)
        assert {name: o.exit_code for name, o in outcomes.items()} == {
            "context": 0, "build": 0, "report": 0
        }  # fmt: skip
        image = await kube.wait_for(lambda: _image_phase(kube, "Ready"), what="image Ready")
        trial_pod = await kube.wait_for(lambda: _first(trial_pods(kube, "built")), what="Pod")
        outcome = await run_trial_pod(
            kube, trial_pod["metadata"]["name"], kube.namespace, tmp_path / "trial"
        )
        done = await kube.wait_for(lambda: finished(kube, "built", 1), what="trial", timeout=30)
        await kube.wait_for(lambda: kube.gone(PODS, pod["metadata"]["name"]), what="Pod goes")
    condition = waiting["status"]["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("PodReady", "WaitingForImage")
    digest = registry_digest(registry, "rollout-env", tag)
    assert digest is not None
    assert digest.startswith("sha256:")
    status = image["status"]
    assert (status["reason"], status["digest"]) == ("Built", digest)
    assert image["spec"]["image"] == f"{registry.host}/rollout-env:{tag}"
    assert image["metadata"]["name"] == f"env-{tag[:51]}"
    environment = next(c for c in trial_pod["spec"]["containers"] if c["name"] == "environment")
    assert environment["image"] == f"{registry.host}/rollout-env@{digest}"
    assert json.loads(outcome.message)["reward"] == 1.0, outcome.stderr
    assert done[0]["status"]["reward"] == 1.0
    log = builds.store.get_bytes(build_log_key("", "built", tag)).decode()
    assert "echo built-0 > /built" in log
    assert status["logUri"].endswith(build_log_key("", "built", tag))
    counted = {
        (sample.labels["phase"], sample.labels["reason"]): sample.value
        for family in memo.metrics.images_finished.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert counted == {("Ready", "Built"): 1.0}
    # The wait for the image is environment setup: the trial's timings start at its creation.
    result = trial_result(builds.store, "built", dataset["name"], "hello")
    assert result.timestamps is not None
    created = done[0]["metadata"]["creationTimestamp"]
    assert result.timestamps.started_at.isoformat().startswith(created.removesuffix("Z"))


async def test_the_registry_has_the_image_so_nothing_is_built(builds: Builds) -> None:
    kube, registry = builds.kube, builds.registry
    dataset, root = builds.dataset("cached", "echo built-1 > /built", ["hello"])
    tag = tag_of(root / "hello")
    with buildah_store() as buildah:  # someone built it before, under its hash
        build(buildah, root / "hello" / "environment", "cached:1")
        pushed = buildah.push("cached:1", f"{registry.host}/rollout-env:{tag}")
    async with kube.operator(memo=builds.memo()):
        await kube.create(ROLLOUT_JOBS, job_manifest("cached", [dataset]))
        image = await kube.wait_for(lambda: _image_phase(kube, "Ready"), what="image Ready")
        pod = await kube.wait_for(lambda: _first(trial_pods(kube, "cached")), what="trial Pod")
        await kube.settle()
    assert (image["status"]["reason"], image["status"]["digest"]) == ("CacheHit", pushed)
    assert await build_pods(kube) == []
    assert [w for w in kube.writes(PODS) if w.method == "POST"] == [
        w for w in kube.writes(PODS) if w.method == "POST" and w.name == pod["metadata"]["name"]
    ]
    environment = next(c for c in pod["spec"]["containers"] if c["name"] == "environment")
    assert environment["image"] == f"{registry.host}/rollout-env@{pushed}"


async def test_six_trials_of_two_jobs_sharing_an_environment_make_one_build(
    builds: Builds, tmp_path: Path
) -> None:
    kube = builds.kube
    # Two datasets, two tasks with byte-identical environments (so one image), three attempts.
    first, _ = builds.dataset("one", "echo shared > /built", ["x"])
    second, _ = builds.dataset("two", "echo shared > /built", ["y"])
    async with kube.operator(memo=builds.memo()):
        await kube.create(ROLLOUT_JOBS, job_manifest("first", [first], n_attempts=3))
        await kube.create(ROLLOUT_JOBS, job_manifest("second", [second], n_attempts=3))
        pod = await kube.wait_for(lambda: one_build_pod(kube), what="one build Pod", timeout=20)
        await kube.wait_for(lambda: _waiting_count(kube, 6), what="6 trials waiting")
        await run_build_pod(kube, pod["metadata"]["name"], kube.namespace, tmp_path)
        for job in ("first", "second"):
            await kube.wait_for(lambda job=job: _count(trial_pods(kube, job), 3), what="Pods")
        await kube.settle()
    assert len(await images(kube)) == 1
    created_images = [w for w in kube.writes(ROLLOUTIMAGES) if w.method == "POST"]
    assert len(created_images) >= 1  # a second job's create may find it made (409)
    build_posts = [
        w for w in kube.writes(PODS) if w.method == "POST" and (w.name or "").startswith("env-")
    ]
    assert len(build_posts) == 1


async def test_force_build_builds_once_per_job_and_the_result_lands_in_the_cache(
    builds: Builds, tmp_path: Path
) -> None:
    kube = builds.kube
    # With a docker_image: only force_build builds it.
    dataset, root = builds.dataset("forced", "echo built-4 > /built", ["z"], image="img:1")
    tag = tag_of(root / "z")
    forced = {"environment": {"forceBuild": True}}
    async with kube.operator(memo=builds.memo()):
        for job in ("one", "two"):
            await kube.create(ROLLOUT_JOBS, job_manifest(job, [dataset], n_attempts=3, **forced))
        await kube.wait_for(lambda: _count(build_pods(kube), 2), what="a build Pod per job")
        for pod in await build_pods(kube):
            await run_build_pod(
                kube, pod["metadata"]["name"], kube.namespace, tmp_path / pod["metadata"]["name"]
            )
        for job in ("one", "two"):
            await kube.wait_for(lambda job=job: _count(trial_pods(kube, job), 3), what="Pods")
        await kube.settle()
    found = await images(kube)
    assert len(found) == 2
    assert {i["spec"]["forceBuild"] for i in found} == {True}
    assert {i["metadata"]["ownerReferences"][0]["name"] for i in found} == {"one", "two"}
    assert {i["status"]["reason"] for i in found} == {"Built"}
    pushed = registry_digest(builds.registry, "rollout-env", tag)
    assert pushed in {i["status"]["digest"] for i in found}
    assert len([w for w in kube.writes(PODS) if w.method == "POST" and "build" in w.name]) == 2


async def test_a_failed_build_ends_every_waiting_trial_with_the_end_of_its_log(
    builds: Builds, tmp_path: Path
) -> None:
    kube, store = builds.kube, builds.store
    dataset, root = builds.dataset("broken", "echo no-such-package-marker >&2; exit 3")
    tag = tag_of(root / "t")
    async with kube.operator(memo=builds.memo()):
        await kube.create(ROLLOUT_JOBS, job_manifest("broken", [dataset], n_attempts=2))
        await kube.create(ROLLOUT_JOBS, job_manifest("later", [dataset]))
        pod = await kube.wait_for(lambda: one_build_pod(kube), what="the build Pod", timeout=20)
        await kube.wait_for(lambda: _waiting_count(kube, 3), what="3 trials waiting")
        await run_build_pod(kube, pod["metadata"]["name"], kube.namespace, tmp_path)
        failed = await kube.wait_for(lambda: finished(kube, "broken", 2), what="trials fail")
        later = await kube.wait_for(lambda: finished(kube, "later", 1), what="its trial fails")
    image = (await images(kube))[0]
    assert (image["status"]["phase"], image["status"]["reason"]) == ("Failed", "BuildFailed")
    for trial in [*failed, *later]:
        error = trial["status"]["error"]
        assert error["type"] == "environment_build_failed"
        assert "no-such-package-marker" in error["message"]
        assert "exited with code" in error["message"]
        assert trial["status"]["failureClass"] == "task"  # the Dockerfile's failure
    assert await trial_pods(kube, "broken") == []
    prefix = trial_prefix("", "broken", "oracle", dataset["name"], "t", 1)
    assert "no-such-package-marker" in store.get_bytes(prefix + "error.txt").decode()
    record = trial_result(store, "broken", dataset["name"], "t")
    assert record.durations is not None
    assert record.durations.environment_setup_sec is not None
    # The whole log beside each job that waited for it.
    for job in ("broken", "later"):
        assert b"no-such-package-marker" in store.get_bytes(build_log_key("", job, tag))


async def test_a_build_past_its_timeout_ends_the_waiting_trials_build_timeout(
    builds: Builds, tmp_path: Path
) -> None:
    kube = builds.kube
    dataset, _ = builds.dataset("slow", "busybox sleep 60", toml="build_timeout_sec = 2.0\n")
    async with kube.operator(memo=builds.memo()):
        await kube.create(ROLLOUT_JOBS, job_manifest("slow", [dataset]))
        pod = await kube.wait_for(lambda: one_build_pod(kube), what="the build Pod", timeout=20)
        outcomes = await run_build_pod(kube, pod["metadata"]["name"], kube.namespace, tmp_path)
        failed = await kube.wait_for(lambda: finished(kube, "slow", 1), what="the trial fails")
    assert json.loads(outcomes["report"].message)["timed_out"] is True
    error = failed[0]["status"]["error"]
    assert error["type"] == "environment_build_timeout"
    assert "timeout of 2 s" in error["message"]


async def test_an_unreachable_registry_fails_the_trials_as_the_infrastructures(
    builds: Builds, tmp_path: Path
) -> None:
    kube = builds.kube
    dataset, _ = builds.dataset("nowhere", "echo built-5 > /built")
    gone = RegistryServer(tmp_path / "gone")  # never started: nothing listens on its port
    async with kube.operator(memo=builds.memo(gone)):
        await kube.create(ROLLOUT_JOBS, job_manifest("nowhere", [dataset]))
        failed = await kube.wait_for(
            lambda: finished(kube, "nowhere", 1), what="the trial fails", timeout=30
        )
    error = failed[0]["status"]["error"]
    assert error["type"] == "environment_build_failed"
    assert "cannot be reached" in error["message"]
    assert failed[0]["status"]["failureClass"] == "infrastructure"
    assert await build_pods(kube) == []


async def test_an_operator_stopped_mid_build_resumes_it_and_a_lost_build_pod_is_replaced(
    builds: Builds, tmp_path: Path
) -> None:
    kube = builds.kube
    dataset, _ = builds.dataset("resumed", "echo again")
    async with kube.operator(memo=builds.memo()) as operator:
        await kube.create(ROLLOUT_JOBS, job_manifest("resumed", [dataset]))
        first = await kube.wait_for(lambda: one_build_pod(kube), what="the build Pod", timeout=20)
        await operator.kill()  # mid-build, as a crash would
    mark = kube.mark()
    async with kube.operator(memo=builds.memo()):
        # The new operator looks at the build under way (and makes no second Pod for it).
        name = first["metadata"]["name"]
        await kube.wait_for(
            lambda: [c for c in kube.calls(since=mark) if c.method == "GET" and c.name == name],
            what="the build Pod looked at again",
        )
        assert [p["metadata"]["name"] for p in await build_pods(kube)] == [name]  # not twice
        # The build Pod is taken away (its node lost, say): the image is built in a new one.
        await kube.delete(PODS, name, kube.namespace)
        second = await kube.wait_for(
            lambda: _named(build_pods(kube), "-build-2"), what="a second build Pod"
        )
        await run_build_pod(kube, second["metadata"]["name"], kube.namespace, tmp_path)
        image = await kube.wait_for(lambda: _image_phase(kube, "Ready"), what="image Ready")
        await kube.wait_for(lambda: _first(trial_pods(kube, "resumed")), what="the trial's Pod")
    assert image["status"]["attempts"] == 2
    assert image["status"]["reason"] == "Built"


async def test_a_private_registry_is_looked_up_and_pushed_to_with_the_push_secret(
    builds: Builds, tmp_path: Path
) -> None:
    kube = builds.kube
    user, password = "builder", "push-password-7c1e"
    with RegistryServer(tmp_path / "private", users={user: password}) as private:
        push_base_image(private.host, "base/busybox:1", credentials=(user, password))
        dockerfile_text = f"FROM {private.host}/base/busybox:1\nRUN echo private > /built\n"
        root = make_dataset(tmp_path / "private-d" / "d", ["t"], image=None,
                            dockerfile=dockerfile_text)  # fmt: skip
        dataset = publish_whole(builds.store, root)
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        config_json = json.dumps({"auths": {private.host: {"auth": auth}}})
        await kube.create(
            SECRETS,
            {
                "metadata": {"name": "regcred"},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": config_json},
            },
        )
        mounted = tmp_path / "operator-registry" / ".dockerconfigjson"  # as the chart mounts it
        mounted.parent.mkdir()
        mounted.write_text(config_json)
        memo = builds.memo(private, image_push_secret="regcred", image_registry_config=str(mounted))
        # A second job in another namespace will find the image in the registry.
        other = await kube.new_namespace("again")
        await create_storage_secret(kube, builds.s3_settings, CREDENTIALS_SECRET, other)
        async with kube.operator(memo=memo, namespaces=[kube.namespace, other]):
            await kube.create(ROLLOUT_JOBS, job_manifest("private", [dataset]))
            pod = await kube.wait_for(lambda: one_build_pod(kube), what="the build", timeout=20)
            outcomes = await run_build_pod(kube, pod["metadata"]["name"], kube.namespace, tmp_path)
            image = await kube.wait_for(lambda: _image_phase(kube, "Ready"), what="image Ready")
            await kube.create(ROLLOUT_JOBS, job_manifest("again", [dataset]), other)
            name = image["metadata"]["name"]
            cached = await kube.wait_for(
                lambda: _phase_of(kube, name, other, "Ready"), what="found in the registry"
            )
    assert outcomes["build"].exit_code == 0, outcomes["build"].output
    assert image["status"]["reason"] == "Built"
    assert (cached["status"]["reason"], cached["status"]["digest"]) == (
        "CacheHit",
        image["status"]["digest"],
    )
    # Only the builder gets the push credentials; no status, log or event shows the password.
    spec = pod["spec"]
    mounting = {
        container["name"]
        for container in [*spec["initContainers"], *spec["containers"]]
        for mount in container.get("volumeMounts", [])
        if mount["name"] == "registry-credentials"
    }
    assert mounting == {"build"}
    for found in (image, cached):
        assert password not in json.dumps(found)
    log_key = image["status"]["logUri"].split("/", 3)[3]  # s3://<bucket>/<key>
    assert password not in builds.store.get_bytes(log_key).decode()


async def _phase_of(kube: Kube, name: str, namespace: str, phase: str) -> dict[str, Any] | None:
    found = await kube.find(ROLLOUTIMAGES, name, namespace)
    return found if found and (found.get("status") or {}).get("phase") == phase else None


# --- waiting helpers ------------------------------------------------------------------------------


async def _first(found: Any) -> dict[str, Any] | None:
    items = await found
    return items[0] if items else None


async def _count(found: Any, count: int) -> list[dict[str, Any]] | None:
    items = await found
    return items if len(items) == count else None


async def _named(found: Any, suffix: str) -> dict[str, Any] | None:
    return next((p for p in await found if p["metadata"]["name"].endswith(suffix)), None)


async def _image_phase(kube: Kube, phase: str) -> dict[str, Any] | None:
    found = await images(kube)
    return found[0] if found and (found[0].get("status") or {}).get("phase") == phase else None


def _waits(trial: dict[str, Any]) -> bool:
    return any(
        c.get("reason") == "WaitingForImage"
        for c in (trial.get("status") or {}).get("conditions") or []
    )


async def _waiting_trial(kube: Kube, job: str) -> dict[str, Any] | None:
    return next((t for t in await trials(kube, job) if _waits(t)), None)


async def _waiting_count(kube: Kube, count: int) -> bool:
    found = await kube.list(ROLLOUT_TRIALS, kube.namespace)
    return sum(_waits(t) for t in found) == count
