"""The bridge's Prometheus metrics (/metrics on ROLLOUT_METRICS_PORT), labelled by provider
(the environment type: `docker`, `modal`, ...; never an address or an account, which would
make a series per engine or team).

- `rollout_bridge_trials_claimed_total`: trials this bridge claimed;
- `rollout_bridge_tries_started_total{retry}`: tries started (`retry="true"`: after a lost one);
- `rollout_bridge_trials_finished_total{phase,error_type}`: trials it finished, as their status
  says (`error_type` empty without an error);
- `rollout_bridge_runs` and `rollout_bridge_waiting_trials`: tries under way, trials waiting for
  a slot (the provider's limit);
- `rollout_bridge_sandbox_start_seconds`: from asking the provider for a sandbox to having it
  (image pull or build included);
- `rollout_bridge_leftover_sandboxes_ended_total`: sandboxes a sweep ended.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

START_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
"""Seconds: a container on a warm engine starts in one; a cloud sandbox with a build, minutes."""


class BridgeMetrics:
    """One bridge process's metrics (tests give each bridge a registry of its own)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.claimed = Counter(
            "rollout_bridge_trials_claimed_total",
            "Trials this bridge claimed.",
            ["provider"],
            registry=registry,
        )
        self.tries = Counter(
            "rollout_bridge_tries_started_total",
            "Tries this bridge started (retry: after a try its earlier process lost).",
            ["provider", "retry"],
            registry=registry,
        )
        self.finished = Counter(
            "rollout_bridge_trials_finished_total",
            "Trials this bridge finished, by phase and error type ('' without an error).",
            ["provider", "phase", "error_type"],
            registry=registry,
        )
        self.runs = Gauge(
            "rollout_bridge_runs", "Tries under way.", ["provider"], registry=registry
        )
        self.waiting = Gauge(
            "rollout_bridge_waiting_trials",
            "Trials waiting for a slot under the provider's limit.",
            ["provider"],
            registry=registry,
        )
        self.sandbox_start = Histogram(
            "rollout_bridge_sandbox_start_seconds",
            "Seconds from asking the provider for a sandbox to having it.",
            ["provider"],
            buckets=START_BUCKETS,
            registry=registry,
        )
        self.swept = Counter(
            "rollout_bridge_leftover_sandboxes_ended_total",
            "Leftover sandboxes of this bridge that a sweep ended.",
            ["provider"],
            registry=registry,
        )
