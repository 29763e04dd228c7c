"""`rollout run job.yaml --local` with a model agent on data rows: the runner answers alone, so
the job runs with job.yaml's default `environment.type: docker` on a machine without any
container engine (DOCKER_HOST names a socket nobody listens on), as a trial Pod holds the runner
alone on a cluster. The model is an OpenAI-compatible server on loopback (`chat_kit`); its key
comes from the submitter's environment and is never written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_kit import API_KEY, chat_server, completion, usage
from test_local_rows import Workspace, gsm_rows, row_id

pytestmark = pytest.mark.integration


def test_a_model_agent_answers_rows_with_no_container_engine(tmp_path: Path) -> None:
    with chat_server() as server:
        server.queue(completion("4", usage=usage(20, 1)))  # every row gets "4"
        space = Workspace(
            tmp_path,
            gsm_rows(3),
            environment={"type": "docker"},
            agents=[
                {
                    "name": "gpt",
                    "model": {
                        "name": "test-model",
                        "base_url": server.base_url,
                        "api_key": "${MY_MODEL_KEY}",
                        "max_turns": 3,
                    },
                }
            ],
        )
        space.extra_env = {
            "MY_MODEL_KEY": API_KEY,
            "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
        }
        done = space.run()
        assert done.returncode == 0, done.stderr

    assert len(server.seen) == 3  # one completion per row
    assert {s.headers["Authorization"] for s in server.seen} == {f"Bearer {API_KEY}"}
    assert [s.body["messages"][-1]["content"] for s in server.seen] == [
        f"What is {n} + {n}?" for n in (1, 2, 3)
    ]
    rewards = {row_id(n): space.record("gpt", row_id(n))["reward"] for n in (1, 2, 3)}
    assert rewards == {"q01": 0.0, "q02": 1.0, "q03": 0.0}  # only 2 + 2 is 4
    record = space.record("gpt", "q02")
    assert record["rollout"]["usage"] == {
        "input_tokens": 20,
        "output_tokens": 1,
        "total_tokens": 21,
    }
    trajectory = json.loads((space.trial("gpt", "q02") / "logs/agent/trajectory.json").read_text())
    assert trajectory["final_answer"] == "4"
    assert trajectory["total_turns"] == 1
    line = next(line for line in space.lines() if line["task_id"] == "q02")
    assert line["trajectory"]["usage"]["total_tokens"] == 21
    assert (space.trial("gpt", "q02") / "logs/agent/answer.txt").read_text() == "4"
    written = b"".join(p.read_bytes() for p in space.job_dir.rglob("*") if p.is_file())
    assert API_KEY.encode() not in written
