"""`rollout-operator`'s command line: configuration problems, and logging that stays quiet."""

from __future__ import annotations

import logging

import pytest

from rollout.controller.main import configure_logging, main, parse_config


def test_a_missing_runner_image_stops_the_operator_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ROLLOUT_RUNNER_IMAGE", raising=False)
    monkeypatch.delenv("ROLLOUT_STORAGE_BUCKET", raising=False)
    assert main(["--worker-limit", "many"]) == 2
    err = capsys.readouterr().err
    assert "environment: ROLLOUT_RUNNER_IMAGE: is required" in err
    assert "command line: --worker-limit: 'many' is not a whole number" in err


def test_flags_configure_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_RUNNER_IMAGE", "runner:1")
    monkeypatch.delenv("ROLLOUT_STORAGE_BUCKET", raising=False)
    config = parse_config(["--namespace", "a", "--namespace", "b", "--peering", ""])
    assert config.namespaces == ["a", "b"]
    assert config.peering_name is None
    assert not config.clusterwide


def test_per_object_chatter_of_kopf_is_kept_out_of_the_log_unless_debugging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROLLOUT_RUNNER_IMAGE", "runner:1")
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        configure_logging(parse_config(["--log-level", "info"]))
        assert not logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)
        assert logging.getLogger("kopf.activities").isEnabledFor(logging.INFO)
        configure_logging(parse_config(["--log-level", "debug"]))
        assert logging.getLogger("kopf.objects").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        for name in ("kopf", "kopf.objects", "aiohttp.access", "botocore", "urllib3"):
            logging.getLogger(name).setLevel(logging.NOTSET)
