"""The operator's Prometheus metrics (served by `main` on the metrics port, path /metrics).

- `rollout_trials{phase}`: the trials of the jobs this operator reconciles, by phase (Pending
  includes trials not created yet); `rollout_active_trials`: created and not finished.
- `rollout_trials_finished_total{phase, error_type, failure_class}`: trials this process saw
  end, by outcome and whose failure it was (agent, task, infrastructure; "" without an error).
- `rollout_trial_phase_duration_seconds{phase}`: how long trial phases took, from the runner's
  termination message (environment_setup, agent_setup, agent_execution, verifier, total).
- `rollout_runner_startup_seconds`: the runner's start-up in trial Pods (its process's start to
  its trial's: Python, its imports, its storage client), from its termination message;
  `rollout_runner_startup_exposed_seconds`: how much of it the trial waited for, the environment
  ready and the runner not yet (0 when the runner was ready first: the kubelet starts the
  environment's container after the runner's, so the start-up is hidden behind its pull and
  start).
- `rollout_reconcile_duration_seconds`, `rollout_reconcile_errors_total{kind}`: the job
  reconcilers' passes and the errors they met.
- `rollout_api_writes_total{resource, verb}`: writes to the Kubernetes API, the figure the
  operator keeps small per trial.

Gauges are per job underneath (`JobGauges`), so a job that goes away takes its share with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rollout.api.resources import TrialPhase
from rollout.api.wire.termination import RunnerTimes

PHASE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, float("inf"))
RUNNER_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, float("inf"))
RECONCILE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
DURATION_PHASES = {
    "environment_setup_sec": "environment_setup",
    "agent_setup_sec": "agent_setup",
    "agent_execution_sec": "agent_execution",
    "verifier_sec": "verifier",
    "total_sec": "total",
}


class JobGauges(Collector):
    """Trials by phase and active trials, summed over the jobs that report them."""

    def __init__(self) -> None:
        self._jobs: dict[str, dict[str, int]] = {}

    def report(self, job: str, by_phase: Mapping[str, int], active: int) -> None:
        self._jobs[job] = {**by_phase, "_active": active}

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        trials = GaugeMetricFamily(
            "rollout_trials", "Trials of the reconciled jobs, by phase.", labels=["phase"]
        )
        for phase in TrialPhase:
            trials.add_metric(
                [phase.value], sum(j.get(phase.value, 0) for j in self._jobs.values())
            )
        yield trials
        yield GaugeMetricFamily(
            "rollout_active_trials",
            "Trials created and not finished.",
            value=sum(j.get("_active", 0) for j in self._jobs.values()),
        )


class OperatorMetrics:
    """The metrics of one operator process (tests may give each its own registry)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.jobs = JobGauges()
        registry.register(self.jobs)
        self.trials_finished = Counter(
            "rollout_trials_finished_total",
            "Trials that ended, by phase, error type and failure class ('' without an error).",
            ["phase", "error_type", "failure_class"],
            registry=registry,
        )
        self.phase_duration = Histogram(
            "rollout_trial_phase_duration_seconds",
            "Seconds a trial phase took, from the runner's termination message.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=registry,
        )
        self.runner_startup = Histogram(
            "rollout_runner_startup_seconds",
            "Seconds from a trial runner's process start to its trial's start (its start-up).",
            buckets=RUNNER_BUCKETS,
            registry=registry,
        )
        self.runner_startup_exposed = Histogram(
            "rollout_runner_startup_exposed_seconds",
            "Seconds a trial's environment was ready while its runner was still starting up.",
            buckets=RUNNER_BUCKETS,
            registry=registry,
        )
        self.reconcile_duration = Histogram(
            "rollout_reconcile_duration_seconds",
            "Seconds one pass of a job's reconciler took.",
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "rollout_reconcile_errors_total",
            "Errors met by job reconcilers, by kind.",
            ["kind"],
            registry=registry,
        )
        self.api_writes = Counter(
            "rollout_api_writes_total",
            "Writes to the Kubernetes API, by resource and verb.",
            ["resource", "verb"],
            registry=registry,
        )
        self.images_finished = Counter(
            "rollout_images_finished_total",
            "RolloutImages that became Ready or Failed, by phase and reason (CacheHit, Built, "
            "BuildFailed, ...).",
            ["phase", "reason"],
            registry=registry,
        )
        self.build_duration = Histogram(
            "rollout_image_build_duration_seconds",
            "Seconds from a RolloutImage's first build Pod to its end (builds only, not cache "
            "hits).",
            buckets=PHASE_BUCKETS,
            registry=registry,
        )

    def trial_finished(
        self,
        phase: str,
        error_type: str | None,
        durations: Mapping[str, float | None],
        failure_class: str | None,
        runner: RunnerTimes | None = None,
    ) -> None:
        self.trials_finished.labels(
            phase=phase, error_type=error_type or "", failure_class=failure_class or ""
        ).inc()
        for key, label in DURATION_PHASES.items():
            value = durations.get(key)
            if value is not None:
                self.phase_duration.labels(phase=label).observe(value)
        if runner is not None and runner.trial_started_at is not None:
            if runner.started_at is not None:
                startup = runner.trial_started_at - runner.started_at
                self.runner_startup.observe(max(startup.total_seconds(), 0.0))
            if runner.environment_ready_at is not None:
                exposed = runner.trial_started_at - runner.environment_ready_at
                self.runner_startup_exposed.observe(max(exposed.total_seconds(), 0.0))


_default: OperatorMetrics | None = None


def default_metrics() -> OperatorMetrics:
    """The process's metrics in prometheus_client's default registry, made once."""
    global _default
    if _default is None:
        _default = OperatorMetrics()
    return _default
