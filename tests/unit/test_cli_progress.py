"""What the CLI shows of a RolloutJob: the progress line, the live bar, the summary table."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from paths import DATA
from rollout.cli.progress import JobView, ProgressDisplay, make_console
from rollout.cli.status import age
from rollout.cli.summary import load_summary, print_summary

BODY: dict[str, Any] = {
    "metadata": {"name": "my-eval-1a2b3c4d"},
    "spec": {"jobName": "My Eval", "metrics": [{"type": "mean"}, {"type": "sum"}]},
    "status": {
        "phase": "Running",
        "counts": {"total": 8, "running": 2, "finished": 3, "completed": 2, "failed": 1},
        "passRate": 0.5,
        "meanReward": 0.5,
        "metrics": [{"type": "mean", "value": 0.5}, {"type": "sum", "value": 1.0}],
        "agents": {
            "coder": {"total": 4, "completed": 1, "failed": 1, "passRate": 0.0, "meanReward": 0.0},
            "oracle": {"total": 4, "completed": 1, "failed": 0, "passRate": 1.0, "meanReward": 1.0},
        },
    },
}


def test_the_progress_line() -> None:
    view = JobView.from_body(BODY)
    assert view.line() == (
        "My Eval Running: 3/8 trials done, 2 running, 1 error, pass rate 50.0%, "
        "mean reward 0.500, mean 0.500, sum 1.000"
    )
    assert not view.done


def test_a_new_job_without_status_and_a_failed_one() -> None:
    fresh = JobView.from_body({"metadata": {"name": "j"}, "spec": {"metrics": [{"type": "max"}]}})
    assert fresh.line() == (
        "j Pending: 0/0 trials done, 0 running, 0 errors, pass rate -, mean reward -, max -"
    )
    failed = JobView.from_body(
        {
            "metadata": {"name": "j"},
            "status": {
                "phase": "Failed",
                "counts": {"total": "many"},  # whatever a future operator writes: not a crash
                "conditions": [
                    {"type": "Valid", "status": "False", "message": "dataset x not in storage"}
                ],
            },
        }
    )
    assert failed.done
    assert not failed.succeeded
    assert failed.line().endswith("(dataset x not in storage)")


def test_plain_output_prints_a_line_only_when_something_changed() -> None:
    out = io.StringIO()
    console = make_console(out)
    with ProgressDisplay(console) as display:
        assert not display.live
        display.update(JobView.from_body(BODY))
        display.update(JobView.from_body(BODY))
        display.update(
            JobView.from_body({**BODY, "status": {**BODY["status"], "phase": "Completed"}})
        )
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["My Eval Running", "My Eval Completed"]


def test_a_terminal_gets_a_live_bar() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with ProgressDisplay(console) as display:
        assert display.live
        display.update(JobView.from_body(BODY))
    text = out.getvalue()
    assert "My Eval" in text
    assert "3/8" in text
    assert "pass rate 50.0%" in text


def test_the_summary_comes_from_result_json_when_there_is_one(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_bytes((DATA / "seed" / "job_result.json").read_bytes())
    summary = load_summary(tmp_path, BODY)
    assert summary is not None
    assert summary.job_name == "my-eval-run"
    out = io.StringIO()
    print_summary(make_console(out), summary)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.getvalue().splitlines()]
    assert [row for row in rows if row] == [
        ["cpe", "10", "9", "1", "90.0%", "0.900"],
        ["oracle", "10", "9", "1", "80.0%", "0.800"],
        ["all", "20", "18", "2", "85.0%", "0.850"],
    ]
    assert "Cost: 1.234 (at the operator's unit prices)" in out.getvalue().splitlines()


def test_the_summary_says_whose_failures_the_failed_trials_were(tmp_path: Path) -> None:
    result = json.loads((DATA / "seed" / "job_result.json").read_text())
    result["rollout"] = {"failures": {"agent": 1, "task": 0, "infrastructure": 1}}
    (tmp_path / "result.json").write_text(json.dumps(result))
    out = io.StringIO()
    summary = load_summary(tmp_path, None)
    assert summary is not None
    print_summary(make_console(out), summary)
    assert out.getvalue().splitlines()[-1] == (
        "Failed trials by class: agent 1, task 0, infrastructure 1"
    )
    # From the RolloutJob's status alike.
    body = {**BODY, "status": {**BODY["status"], "failures": {"agent": 0, "task": 1}}}
    from_status = load_summary(tmp_path / "nothing", body)
    assert from_status is not None
    assert from_status.failures == {"agent": 0, "task": 1}


def test_the_summary_comes_from_the_status_otherwise(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text("{not json")
    summary = load_summary(tmp_path, BODY)
    assert summary is not None
    assert [(r.agent, r.trials, r.completed, r.failed) for r in summary.rows] == [
        ("coder", 4, 1, 1),
        ("oracle", 4, 1, 0),
    ]
    assert summary.metrics == [("mean", 0.5), ("sum", 1.0)]
    assert summary.total_cost is None  # no unit prices: no cost, and no line for it
    priced = load_summary(tmp_path, {**BODY, "status": {**BODY["status"], "totalCost": 2.5}})
    assert priced is not None
    assert priced.total_cost == 2.5
    assert load_summary(tmp_path / "nothing", None) is None


def test_age_reads_like_kubectl() -> None:
    now = datetime(2025, 1, 15, 12, 0, 0, tzinfo=UTC)
    assert age("2025-01-15T11:59:15Z", now) == "45s"
    assert age("2025-01-15T11:48:00Z", now) == "12m"
    assert age("2025-01-15T09:00:00Z", now) == "3h"
    assert age("2025-01-13T12:00:00Z", now) == "2d"
    assert age(None, now) == "-"
