"""`rollout agents list` and `rollout agents show`, run for real; and a built-in agent's missing
key refused by `rollout run --local` in the words of `rollout validate`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rollout.api import catalogue
from rollout.api.job import JobAgent
from rollout.cli.main import main

pytestmark = pytest.mark.integration


def rollout(capsys: pytest.CaptureFixture[str], *argv: str, **environ: str) -> tuple[int, str, str]:
    code = main(list(argv), {"HOME": "/nonexistent", **environ})
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_names_every_builtin_with_its_version_and_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = rollout(capsys, "agents", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "COMMAND", "VERSION", "KEYS", "DESCRIPTION"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert sorted(rows) == catalogue.names()
    for name, line in rows.items():
        agent = catalogue.get(name)
        assert agent is not None
        assert line.split()[1:3] == [agent.command, agent.version]
        for key in agent.keys.default:
            assert key in line


@pytest.mark.parametrize("name", catalogue.names())
def test_show_prints_an_entry_that_runs_as_the_builtin_does(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = rollout(capsys, "agents", "show", name)
    assert code == 0
    builtin = catalogue.get(name)
    assert builtin is not None
    assert f"# {name}: {builtin.description}" in out
    [entry] = yaml.safe_load(out)["agents"]
    copied = JobAgent.model_validate(entry)

    # Both scripts given: the user's own agent now, running exactly the built-in's scripts with
    # the parameters its scripts read.
    assert copied.builtin is None
    assert copied.install == builtin.install_script
    assert copied.execute == builtin.execute_script
    expected = JobAgent.model_validate({"name": name})
    assert {k: v for k, v in copied.env.items() if k in expected.env} == expected.env
    assert {k: copied.env[k] for k in expected.parameter_env()} == expected.parameter_env()

    code, script, _ = rollout(capsys, "agents", "show", name, "--script", "execute")
    assert (code, script) == (0, builtin.execute_script)
    (tmp_path / "execute.sh").write_text(script)
    syntax = subprocess.run(["bash", "-n", str(tmp_path / "execute.sh")], capture_output=True)
    assert syntax.returncode == 0, syntax.stderr


def test_show_of_an_unknown_agent_names_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = rollout(capsys, "agents", "show", "claude")
    assert code != 0
    assert out == ""
    assert "there is no built-in agent 'claude' (built-ins: aider, claude-code," in err


def test_a_missing_key_is_refused_by_local_run_as_by_validate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = Path(__file__).resolve().parents[1] / "data" / "tasks" / "hello-offline"
    shutil.copytree(task, tmp_path / "tasks" / "hello-offline")
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: builtin-key\n"
        "environment:\n  type: local\n"
        "agents:\n  - name: codex\n    model: gpt-5\n"
        "datasets:\n  - path: ./tasks\n"
    )
    monkeypatch.chdir(tmp_path)
    validated = rollout(capsys, "validate", "--local", str(job))
    ran = rollout(capsys, "run", str(job), "--local")

    keys = JobAgent.model_validate({"name": "codex", "model": "gpt-5"}).env
    assert keys, "codex needs a key"
    expected = [
        f"{job}: agents[0].env.{key}: environment variable {key} is not set (the built-in agent "
        f"'codex' needs it; export it, or give env.{key} in the job)"
        for key in keys
    ]
    assert validated[0] == 1
    assert ran[0] == 1
    assert validated[1].splitlines() == [f"error {line}" for line in expected]
    assert ran[2].splitlines() == [f"error: {line}" for line in expected]
    assert not (tmp_path / "jobs").exists()
