"""Seed 004's Python verifier (`rollout_runner.pyverifier`): real evaluate.py files run in the
real harness process, for every return the seed coerces, every way a verifier fails, the
timeout, the clean environment and the log."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from fakecontainer import eventually
from rollout.api.errors import ErrorType
from rollout.api.reward import CoercedReward
from rollout_runner.pyverifier import PyVerdict, run_python_verifier

pytestmark = pytest.mark.integration

METADATA = {"ground_truth": "Paris", "question": "What is the capital of France?"}
TRAJECTORY = {"answer": "Paris", "messages": [{"role": "assistant", "content": "Paris"}]}


def write_script(tmp_path: Path, body: str, name: str = "evaluate.py") -> Path:
    script = tmp_path / "tests" / name
    script.parent.mkdir(exist_ok=True)
    script.write_text(textwrap.dedent(body))
    return script


async def verify(
    tmp_path: Path,
    body: str,
    *,
    timeout_sec: float = 30.0,
    metadata: dict[str, object] | None = None,
    function: str = "evaluate",
) -> PyVerdict:
    script = write_script(tmp_path, body)
    return await run_python_verifier(
        script,
        METADATA if metadata is None else metadata,
        TRAJECTORY,
        timeout_sec=timeout_sec,
        function=function,
    )


# --- what a verifier may return ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reward"),
    [
        ("def evaluate(metadata, trajectory):\n    return 0.75\n", CoercedReward(0.75)),
        ("def evaluate(metadata, trajectory):\n    return 1\n", CoercedReward(1.0)),
        ("def evaluate(metadata, trajectory):\n    return True\n", CoercedReward(1.0)),
        ("def evaluate(metadata, trajectory):\n    return False\n", CoercedReward(0.0)),
        (
            "def evaluate(metadata, trajectory):\n    return {'reward': 0.5, 'detail': 'x'}\n",
            CoercedReward(0.5, {"reward": 0.5, "detail": "x"}),
        ),
        (
            "def evaluate(metadata, trajectory):\n    return {'accuracy': 1, 'style': 0.5}\n",
            CoercedReward(0.75, {"accuracy": 1, "style": 0.5}),
        ),
        (
            "def evaluate(metadata, trajectory):\n    return (0.5, True)\n",
            CoercedReward(0.5, {"reward": 0.5, "is_correct": True}),
        ),
        (
            "def evaluate(metadata, trajectory):\n    return [1, False]\n",
            CoercedReward(1.0, {"reward": 1, "is_correct": False}),
        ),
    ],
    ids=["float", "int", "true", "false", "dict-reward", "dict-of-numbers", "tuple", "list-pair"],
)
async def test_plain_returns_are_coerced(tmp_path: Path, body: str, reward: CoercedReward) -> None:
    verdict = await verify(tmp_path, body)
    assert verdict.error_type is None, (verdict.message, verdict.log)
    assert verdict.reward == reward


async def test_the_verifier_gets_the_metadata_and_the_trajectory(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path,
        """
        def evaluate(metadata, trajectory):
            correct = metadata["ground_truth"] == trajectory["answer"]
            return {"reward": float(correct), "turns": len(trajectory["messages"])}
        """,
    )
    assert verdict.reward == CoercedReward(1.0, {"reward": 1.0, "turns": 1})


async def test_a_dataclass_with_a_reward_is_its_public_fields(tmp_path: Path) -> None:
    """rLLM's EvalOutput: a dataclass of reward, is_correct, signals and metadata."""
    verdict = await verify(
        tmp_path,
        """
        from __future__ import annotations
        from dataclasses import dataclass, field

        @dataclass
        class Signal:
            name: str
            value: float

        @dataclass
        class EvalOutput:
            reward: float
            is_correct: bool
            signals: list[Signal] = field(default_factory=list)
            metadata: dict = field(default_factory=dict)
            _private: str = "hidden"

        def evaluate(metadata, trajectory):
            return EvalOutput(0.25, False, [Signal("format", 1.0)], {"note": "close"})
        """,
    )
    assert verdict.error_type is None, (verdict.message, verdict.log)
    assert verdict.reward == CoercedReward(
        0.25,
        {
            "reward": 0.25,
            "is_correct": False,
            "signals": [{"name": "format", "value": 1.0}],
            "metadata": {"note": "close"},
        },
    )


@pytest.mark.parametrize(
    ("body", "reward"),
    [
        (
            """
            from dataclasses import dataclass

            @dataclass
            class Result:
                score: float
                passed: int

            def evaluate(metadata, trajectory):
                return Result(score=0.5, passed=3)
            """,
            CoercedReward(0.5, {"score": 0.5, "passed": 3}),
        ),
        (
            """
            import pydantic

            class Result(pydantic.BaseModel):
                score: float
                label: str

            def evaluate(metadata, trajectory):
                return Result(score=0.9, label="good")
            """,
            CoercedReward(0.9, {"score": 0.9, "label": "good"}),
        ),
        (
            """
            class Result:
                def __init__(self):
                    self.passed = 2
                    self._total = 4

                @property
                def score(self):
                    return self.passed / self._total

            def evaluate(metadata, trajectory):
                return Result()
            """,
            CoercedReward(0.5, {"passed": 2, "score": 0.5}),
        ),
    ],
    ids=["dataclass-score", "pydantic", "property"],
)
async def test_an_object_with_a_score_is_its_public_fields(
    tmp_path: Path, body: str, reward: CoercedReward
) -> None:
    verdict = await verify(tmp_path, body)
    assert verdict.error_type is None, (verdict.message, verdict.log)
    assert verdict.reward == reward


async def test_an_async_evaluate_is_awaited(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path,
        """
        import asyncio

        async def evaluate(metadata, trajectory):
            await asyncio.sleep(0.01)
            return 0.5
        """,
    )
    assert verdict.reward == CoercedReward(0.5)


async def test_values_that_are_not_json_are_kept_as_text(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path,
        """
        import datetime

        def evaluate(metadata, trajectory):
            return {"reward": 1, "at": datetime.date(2025, 2, 4), 3: {1, 2}}
        """,
    )
    assert verdict.reward == CoercedReward(1.0, {"reward": 1, "at": "2025-02-04", "3": [1, 2]})


async def test_another_function_name_and_a_module_beside_the_script(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helpers.py").write_text("WEIGHT = 0.5\n")
    verdict = await verify(
        tmp_path,
        """
        from helpers import WEIGHT

        def grade(metadata, trajectory):
            return WEIGHT
        """,
        function="grade",
    )
    assert verdict.reward == CoercedReward(0.5), verdict.log


# --- what is no reward ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "named"),
    [
        ("None", "returned None"),
        ("'1.0'", "returned a str"),
        ("[1, 2, 3]", "returned a list of 3 item(s)"),
        ("(0.5, 'yes')", "returned a tuple of 2 item(s)"),
        ("object()", "returned a object"),
    ],
)
async def test_a_wrong_type_fails_the_verifier_naming_the_type(
    tmp_path: Path, returned: str, named: str
) -> None:
    verdict = await verify(
        tmp_path, f"def evaluate(metadata, trajectory):\n    return {returned}\n"
    )
    assert verdict.reward is None
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message is not None
    assert named in verdict.message
    assert "evaluate() of evaluate.py" in verdict.message


@pytest.mark.parametrize(
    ("returned", "phrase"),
    [
        ("float('nan')", "holds 'NaN', not a number"),
        ("{'reward': 'high'}", 'has "reward": \'"high"\', not a number, a bool or an object'),
        (
            "{'note': 'no numbers'}",
            'has no "reward" or "score" key and no value that is a number',
        ),
    ],
)
async def test_a_value_the_coercion_rule_refuses_is_an_invalid_reward(
    tmp_path: Path, returned: str, phrase: str
) -> None:
    verdict = await verify(
        tmp_path, f"def evaluate(metadata, trajectory):\n    return {returned}\n"
    )
    assert verdict.reward is None
    assert verdict.error_type is ErrorType.VERIFIER_REWARD_INVALID
    assert verdict.message == f"evaluate() of evaluate.py returned a value that {phrase}"


async def test_a_value_larger_than_a_reward_file_is_an_invalid_reward(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path,
        "def evaluate(metadata, trajectory):\n    return {'reward': 1, 'x': 'a' * 70000}\n",
    )
    assert verdict.error_type is ErrorType.VERIFIER_REWARD_INVALID
    assert verdict.message is not None
    assert verdict.message == "evaluate() of evaluate.py returned a value larger than 64 KiB"


# --- failures ---------------------------------------------------------------------------------


async def test_an_exception_fails_the_verifier_with_its_traceback_in_the_log(
    tmp_path: Path,
) -> None:
    verdict = await verify(
        tmp_path,
        """
        def check(answer):
            raise ValueError(f"cannot parse {answer!r}")

        def evaluate(metadata, trajectory):
            return check(trajectory["answer"])
        """,
    )
    assert verdict.reward is None
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message == "evaluate() of evaluate.py raised ValueError: cannot parse 'Paris'"
    assert "Traceback (most recent call last)" in verdict.log
    assert 'in check\n    raise ValueError(f"cannot parse {answer!r}")' in verdict.log


async def test_sys_exit_in_the_verifier_fails_it(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path, "import sys\ndef evaluate(metadata, trajectory):\n    sys.exit(3)\n"
    )
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message == "evaluate() of evaluate.py raised SystemExit: 3"


async def test_a_verifier_that_dies_without_a_result_fails(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path, "import os\ndef evaluate(metadata, trajectory):\n    os._exit(7)\n"
    )
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message == (
        "the Python verifier evaluate.py ended (exit status 7) without a result; "
        "see the verifier log"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def grade(metadata, trajectory):\n    return 1\n", "evaluate is not defined in "),
        ("evaluate = 1.0\n", "evaluate is not a function in evaluate.py"),
    ],
)
async def test_a_missing_function_fails_the_verifier(
    tmp_path: Path, body: str, message: str
) -> None:
    verdict = await verify(tmp_path, body)
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message is not None
    assert verdict.message.startswith(message)


async def test_a_syntax_error_fails_the_verifier(tmp_path: Path) -> None:
    verdict = await verify(tmp_path, "def evaluate(metadata, trajectory)\n    return 1\n")
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message is not None
    assert verdict.message.startswith("evaluate.py failed to load: SyntaxError")
    assert "SyntaxError" in verdict.log
    assert "Traceback" in verdict.log


async def test_an_import_error_fails_the_verifier(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path, "import no_such_module_here\ndef evaluate(m, t):\n    return 1\n"
    )
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message == (
        "evaluate.py failed to load: ModuleNotFoundError: No module named 'no_such_module_here'"
    )


async def test_a_missing_script_fails_the_verifier(tmp_path: Path) -> None:
    verdict = await run_python_verifier(
        tmp_path / "nowhere.py", METADATA, TRAJECTORY, timeout_sec=5
    )
    assert verdict.error_type is ErrorType.VERIFIER_FAILED
    assert verdict.message is not None
    assert "nowhere.py is not a file" in verdict.message


# --- the timeout ------------------------------------------------------------------------------


def _gone(pid: int) -> bool:
    """Whether a process has ended (a zombie waiting for a reaper has ended too)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_a_verifier_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    verdict = await verify(
        tmp_path,
        """
        import subprocess, time
        from pathlib import Path

        def evaluate(metadata, trajectory):
            child = subprocess.Popen(["sleep", "300"])
            Path(metadata["pid_file"]).write_text(str(child.pid))
            print("waiting", flush=True)
            time.sleep(300)
            return 1.0
        """,
        timeout_sec=2.0,
        metadata={"pid_file": str(pid_file)},
    )
    elapsed = time.monotonic() - started
    assert verdict.reward is None
    assert verdict.error_type is ErrorType.VERIFIER_TIMEOUT
    assert verdict.message == "the Python verifier evaluate.py did not finish within 2 s"
    assert elapsed < 20
    assert "waiting" in verdict.log  # what it printed before it was killed is kept
    child = int(pid_file.read_text())
    await eventually(lambda: _gone(child), "the verifier's child ends with it")


# --- the environment and the log --------------------------------------------------------------


async def test_the_verifier_sees_none_of_the_runners_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "rollout-test-aws-secret-never-in-a-verifier"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPYVERIFIERTEST")
    monkeypatch.setenv("ROLLOUT_STORAGE_BUCKET", "bucket")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("LANG", "C.UTF-8")
    verdict = await verify(
        tmp_path,
        """
        import os, sys

        def evaluate(metadata, trajectory):
            print(sorted(os.environ))
            return {"reward": 1, "names": sorted(os.environ), "path": sys.path}
        """,
    )
    assert verdict.reward is not None, (verdict.message, verdict.log)
    assert verdict.reward.rewards is not None
    names = verdict.reward.rewards["names"]
    assert not [n for n in names if n.startswith(("AWS_", "ROLLOUT_", "PYTHON"))]
    assert set(names) <= {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LC_CTYPE"}
    assert "LANG" in names
    assert "PATH" in names
    assert str(tmp_path / "elsewhere") not in verdict.reward.rewards["path"]
    assert secret not in verdict.log
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == secret  # the runner's own is untouched


async def test_prints_go_to_the_log_and_not_into_the_result(tmp_path: Path) -> None:
    verdict = await verify(
        tmp_path,
        """
        import sys

        print("loading the verifier")

        def evaluate(metadata, trajectory):
            print("comparing", trajectory["answer"])
            print("a warning", file=sys.stderr)
            print('{"reward": 0}')
            return 1.0
        """,
    )
    assert verdict.reward == CoercedReward(1.0)
    assert verdict.log.splitlines() == [
        "loading the verifier",
        "comparing Paris",
        "a warning",
        '{"reward": 0}',
    ]
