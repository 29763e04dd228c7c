"""A data benchmark end to end on a real cluster, as a user runs it: `rollout run` of a 20-row
dataset (dataset.toml + data/test.jsonl) scored by exact_match, with a scripted agent that gets
every fourth row wrong, in shards of 8 rows (3 RolloutTrials, 3 Pods).

Settings, from the environment (as test_cli_e2e.py):

- KUBECONFIG (required; skipped without it), ROLLOUT_E2E_CONTEXT, ROLLOUT_E2E_NAMESPACE;
- ROLLOUT_STORAGE_BUCKET (required; skipped without it) and the other ROLLOUT_STORAGE_*
  settings, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the CLI;
- ROLLOUT_E2E_ROWS_IMAGE: the rows' environment image (default: none declared, so the
  environment container runs the runner's image, which the cluster has pulled already);
- ROLLOUT_E2E_TIMEOUT: seconds the job may take (default 600).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from test_cli_e2e import rollout

pytestmark = pytest.mark.e2e

ROWS = 20
SHARD_SIZE = 8


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    if not os.environ.get("ROLLOUT_STORAGE_BUCKET"):
        pytest.skip("ROLLOUT_STORAGE_BUCKET is not set: the CLI needs object storage")
    dataset = tmp_path / "words"
    (dataset / "data").mkdir(parents=True)
    toml = 'name = "words"\n\n[verifier]\nmetric = "exact_match"\n'
    if image := os.environ.get("ROLLOUT_E2E_ROWS_IMAGE"):
        toml += f"\n[environment]\ndocker_image = {json.dumps(image)}\n"
    (dataset / "dataset.toml").write_text(toml)
    lines = [
        json.dumps({"id": f"w{i:02d}", "question": f"Say the word number {i}", "answer": f"w{i}"})
        for i in range(ROWS)
    ]
    (dataset / "data" / "test.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_a_data_benchmark_end_to_end(workdir: Path) -> None:
    name = f"e2e-rows-{uuid.uuid4().hex[:8]}"
    # The agent answers w<i> from the instruction's number, wrongly for every fourth row.
    (workdir / "job.yaml").write_text(
        f"name: {name}\n"
        f"shard_size: {SHARD_SIZE}\n"
        "n_concurrent_trials: 2\n"
        "agents:\n"
        "  - name: scripted\n"
        "    execute: |\n"
        '      n=$(grep -o "[0-9]*$" "$ROLLOUT_TASK_INSTRUCTION")\n'
        '      if [ $((n % 4)) -eq 3 ]; then echo wrong; else echo "w$n"; fi\n'
        "datasets:\n  - path: ./words\n"
    )
    timeout = float(os.environ.get("ROLLOUT_E2E_TIMEOUT", "600"))
    try:
        run = rollout("job.yaml", cwd=workdir, timeout=timeout + 60)
        assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
        job_dir = workdir / "jobs" / name
        wrong = {i for i in range(ROWS) if i % 4 == 3}
        for i in range(ROWS):
            result = json.loads(
                (job_dir / "scripted" / "words" / f"w{i:02d}__1" / "result.json").read_text()
            )
            assert result["error"] is None, result
            assert result["reward"] == (0.0 if i in wrong else 1.0), result
        job_result = json.loads((job_dir / "result.json").read_text())
        assert job_result["total_trials"] == ROWS
        assert job_result["pass_rate"] == pytest.approx((ROWS - len(wrong)) / ROWS)
        lines = [json.loads(line) for line in (job_dir / "results.jsonl").read_text().splitlines()]
        assert [line["task_id"] for line in lines] == [f"w{i:02d}" for i in range(ROWS)]
        assert lines[3]["predicted_answer"] == "wrong"
        assert lines[0]["score"] == 1.0
        (summary_file,) = job_dir.glob("summary_words_*.json")
        summary = json.loads(summary_file.read_text())
        assert (summary["total_tasks"], summary["metric"]) == (ROWS, "exact_match")
        assert summary["average_score"] == pytest.approx((ROWS - len(wrong)) / ROWS)
        evaluation = json.loads((job_dir / "evaluation.json").read_text())
        assert evaluation["metrics"]["exact_match"]["passes"] == ROWS - len(wrong)
        assert "Benchmark words" in run.stdout
    finally:
        rollout("cancel", name, "--delete-results", cwd=workdir)
