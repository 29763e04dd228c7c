"""The built-in aider, mini-swe-agent and goose: their scripts run for real with stand-ins.

Each test runs a built-in's install and execute scripts (the catalogue's YAML, lib.sh before
them) in a fake container through the real runner (`agents_kit`), with stand-in programs under
the CLI's name and under the tools the install calls (python3, the venv's python, curl, tar), so
no model provider, package registry or network is reached. The flags checked are the documented
ones (each test cites where):

- aider: https://aider.chat/docs/config/options.html (--model, --message-file, --yes-always,
  --no-git, --no-auto-commits, --analytics-log, --chat-history-file, ...) and
  https://aider.chat/docs/scripting.html; its "Tokens: ... sent, ... received." / "Cost: $...
  message, $... session." lines and analytics `message_send` events: aider/coders/base_coder.py.
- mini-swe-agent: https://mini-swe-agent.com/latest/usage/mini/ (-t/--task, -m/--model,
  -y/--yolo) and its run script src/minisweagent/run/mini.py (--exit-immediately, -o/--output);
  the trajectory's shape: https://mini-swe-agent.com/latest/usage/output_files/.
- goose: https://goose-docs.ai/docs/guides/goose-cli-commands (`goose run -i/--instructions`,
  `--with-builtin`, `--output-format stream-json`), environment variables
  https://goose-docs.ai/docs/guides/environment-variables (GOOSE_PROVIDER, GOOSE_MODEL,
  GOOSE_MODE, GOOSE_DISABLE_KEYRING); release assets as download_cli.sh names them
  (github.com/aaif-goose/goose).

`python3` is a stand-in that passes every call to the host's python except `-m venv DIR`, where
it makes DIR/bin/python the `venv-python` stand-in: so rollout_python_tool's real checks run, and
its `pip install PKG==VERSION` is recorded instead of reaching PyPI.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest
from agents_kit import (
    INSTRUCTION,
    BuiltinRun,
    Call,
    StandIns,
    requires_fake_container,
    run_builtin,
)

from rollout.api import catalogue
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

KEY = "sk-test-anthropic"
ENVIRON = {"ANTHROPIC_API_KEY": KEY}
WORKDIR = "/app"
INSTRUCTION_FILE = "/tmp/instruction.md"

# The stand-in python3: the host's python, except that `-m venv DIR` makes a fake venv whose
# python is the `venv-python` stand-in (which records `-m pip install ...`).
PYTHON3 = r"""
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\nexec /usr/local/bin/venv-python "$@"\n' > "$3/bin/python"
  chmod 755 "$3/bin/python"
  exit 0
fi
exec /usr/bin/python3 "$@"
"""
# The same, on an image whose python is too old for these agents.
OLD_PYTHON3 = 'case "$*" in *version_info*) exit 1 ;; esac\n' + PYTHON3

# For a stand-in's `sh`: `after FLAG "$@"` prints the argument that follows FLAG.
AFTER = (
    'after() { f=$1; shift; while [ $# -gt 1 ]; do [ "$1" = "$f" ] && { printf %s "$2"; return; }; '
    "shift; done; }\n"
)


def python_tool(stand_ins: StandIns, *, python3: str = PYTHON3) -> StandIns:
    return stand_ins.add("python3", sh=python3).add("venv-python")


def goose_download(stand_ins: StandIns) -> StandIns:
    """curl records the URL; tar "extracts" a goose that runs the goose stand-in; bzip2 is there
    so that rollout_need installs nothing."""
    tar = (
        AFTER + 'dir=$(after -C "$@")\n'
        'printf \'#!/bin/sh\\nexec /usr/local/bin/goose "$@"\\n\' > "$dir/goose"\n'
    )
    return stand_ins.add("curl").add("tar", sh=tar).add("bzip2")


def default(name: str, field: str) -> Any:
    builtin = catalogue.get(name)
    assert builtin is not None
    return getattr(builtin, field)


def goose_arch() -> str:
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(platform.machine(), platform.machine())


def only(run: BuiltinRun, command: str) -> Call:
    calls = run.calls(command)
    assert len(calls) == 1, [c.argv for c in run.calls()]
    return calls[0]


def assert_ok(run: BuiltinRun) -> None:
    assert run.report.result.error is None, run.report.error_text


def usage(run: BuiltinRun) -> dict[str, Any] | None:
    rollout = run.report.result.rollout
    assert rollout is not None
    return (
        None
        if rollout.usage is None
        else rollout.usage.model_dump(exclude_none=True, by_alias=False)
    )


# --- install: the pinned version, the runtime checked ------------------------------------------


def pinned_pip(run: BuiltinRun, package: str) -> str:
    pip = only(run, "venv-python")
    assert pip.argv[:3] == ["-m", "pip", "install"], pip.argv
    pins = [a for a in pip.argv if a.startswith(f"{package}==")]
    assert len(pins) == 1, pip.argv
    return pins[0].removeprefix(f"{package}==")


def python_checked(run: BuiltinRun) -> bool:
    return any("version_info < (3, 10)" in " ".join(c.argv) for c in run.calls("python3"))


@pytest.mark.parametrize(
    ("name", "package", "command", "given"),
    [
        ("aider", "aider-chat", "aider", "0.85.1"),
        ("mini-swe-agent", "mini-swe-agent", "mini", "2.1.0"),
    ],
)
@pytest.mark.parametrize("version_given", [False, True], ids=["default", "given"])
async def test_python_install_pins_the_version(
    tmp_path: Path,
    store: ObjectStore,
    name: str,
    package: str,
    command: str,
    given: str,
    version_given: bool,
) -> None:
    version = given if version_given else default(name, "version")
    agent: dict[str, Any] = {"name": name, **({"version": given} if version_given else {})}
    stand_ins = python_tool(StandIns()).add(command, version=version)

    run = await run_builtin(tmp_path, store, agent, stand_ins, environ=ENVIRON)

    assert_ok(run)
    assert pinned_pip(run, package) == version
    assert python_checked(run)
    venv = [c for c in run.calls("python3") if c.argv[:2] == ["-m", "venv"]]
    assert [c.argv[2] for c in venv] == [f"/root/.local/share/rollout-agents/{package}"]
    rollout = run.report.result.rollout
    assert rollout is not None
    assert rollout.agent is not None
    assert rollout.agent.version == version


@pytest.mark.parametrize(("name", "command"), [("aider", "aider"), ("mini-swe-agent", "mini")])
async def test_python_install_refuses_an_old_python(
    tmp_path: Path, store: ObjectStore, name: str, command: str
) -> None:
    stand_ins = python_tool(StandIns(), python3=OLD_PYTHON3).add(command)

    run = await run_builtin(tmp_path, store, {"name": name}, stand_ins, environ=ENVIRON)

    error = run.report.result.error
    assert error is not None
    assert error.type == ErrorType.AGENT_INSTALL_FAILED
    stderr = run.text("setup/stderr.txt")
    assert "needs python >= 3.10" in stderr
    if name == "aider":
        assert "0.86 needs python 3.10-3.12, this image has Python 3." in stderr
    assert run.calls("venv-python") == []
    assert run.calls(command) == []


@pytest.mark.parametrize("version_given", [False, True], ids=["default", "given"])
async def test_goose_install_downloads_the_pinned_release(
    tmp_path: Path, store: ObjectStore, version_given: bool
) -> None:
    version = "1.40.0" if version_given else default("goose", "version")
    agent: dict[str, Any] = {"name": "goose", **({"version": version} if version_given else {})}
    stand_ins = goose_download(StandIns()).add("goose", version=f"goose {version}")

    run = await run_builtin(tmp_path, store, agent, stand_ins, environ=ENVIRON)

    assert_ok(run)
    # The asset download_cli.sh fetches for a GOOSE_VERSION on glibc Linux.
    url = (
        f"https://github.com/aaif-goose/goose/releases/download/v{version}/"
        f"goose-{goose_arch()}-unknown-linux-gnu.tar.bz2"
    )
    assert url in only(run, "curl").argv
    assert only(run, "tar").argv[0] == "-xjf"
    # The installed binary ran (it is the stand-in behind the extracted wrapper).
    assert any(c.version_query for c in run.calls("goose", versions=True))


async def test_goose_install_takes_the_musl_build_on_musl(
    tmp_path: Path, store: ObjectStore
) -> None:
    # download_cli.sh's musl test: `ldd --version` names musl (as on Alpine, where it exits 1).
    musl_ldd = "musl libc (x86_64)\nVersion 1.2.5\n"
    stand_ins = goose_download(StandIns()).add("ldd", stderr=musl_ldd, exit=1)
    stand_ins.add("goose", version="goose 1.53.0")

    run = await run_builtin(tmp_path, store, {"name": "goose"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    version = default("goose", "version")
    url = (
        f"https://github.com/aaif-goose/goose/releases/download/v{version}/"
        f"goose-{goose_arch()}-unknown-linux-musl.tar.bz2"
    )
    assert url in only(run, "curl").argv


# --- execute: instruction, model, flags, headless, key, cwd ------------------------------------


async def test_aider_runs_headless_on_the_instruction(tmp_path: Path, store: ObjectStore) -> None:
    # The stand-in prints the file --message-file names: the instruction must be in it.
    stand_ins = python_tool(StandIns()).add(
        "aider", version="aider 0.86.2", sh=AFTER + 'cat "$(after --message-file "$@")"'
    )
    agent = {"name": "aider", "flags": ["--map-tokens", "1024"]}

    run = await run_builtin(tmp_path, store, agent, stand_ins, environ=ENVIRON)

    assert_ok(run)
    aider = only(run, "aider")
    # https://aider.chat/docs/config/options.html: --model MODEL ("provider/model", litellm's).
    assert aider.has_flag("--model", default("aider", "model"))
    # --message-file: "process reply, then exit (disables chat mode)".
    assert aider.has_flag("--message-file", INSTRUCTION_FILE)
    assert INSTRUCTION in run.text("logs/agent/aider.txt")
    # --yes-always: "Always say yes to every confirmation"; /app is no git repo: --no-git (else
    # aider would `git init` it).
    assert aider.has_flag("--yes-always")
    assert aider.has_flag("--no-git")
    assert not aider.has_flag("--auto-commits")
    # Its history and analytics files go to the logs, not the task's directory.
    assert aider.has_flag("--chat-history-file", "/logs/agent/aider.chat.history.md")
    assert aider.has_flag("--llm-history-file", "/logs/agent/aider.llm.history")
    assert aider.has_flag("--analytics-log", "/logs/agent/aider.analytics.jsonl")
    assert aider.has_flag("--no-analytics")
    assert aider.argv[-2:] == ["--map-tokens", "1024"]
    assert aider.env["ANTHROPIC_API_KEY"] == KEY
    assert aider.cwd == WORKDIR


async def test_aider_in_a_git_repository_commits_nothing(
    tmp_path: Path, store: ObjectStore
) -> None:
    # `git rev-parse --is-inside-work-tree` succeeds (the git stand-in): aider keeps git (its
    # repo map) but --no-auto-commits/--no-dirty-commits/--no-gitignore leave the repo as it is.
    stand_ins = python_tool(StandIns()).add("git").add("aider", version="aider 0.86.2")

    run = await run_builtin(tmp_path, store, {"name": "aider"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    aider = only(run, "aider")
    assert ["rev-parse", "--is-inside-work-tree"] in [c.argv for c in run.calls("git")]
    for flag in ("--no-auto-commits", "--no-dirty-commits", "--no-gitignore"):
        assert aider.has_flag(flag)
    assert not aider.has_flag("--no-git")


async def test_aider_takes_the_key_of_the_model_provider(
    tmp_path: Path, store: ObjectStore
) -> None:
    stand_ins = python_tool(StandIns()).add("aider", version="aider 0.86.2")
    agent = {"name": "aider", "model": "openai/gpt-4.1"}

    run = await run_builtin(tmp_path, store, agent, stand_ins, environ={"OPENAI_API_KEY": "sk-oa"})

    assert_ok(run)
    aider = only(run, "aider")
    assert aider.has_flag("--model", "openai/gpt-4.1")
    assert aider.env["OPENAI_API_KEY"] == "sk-oa"
    assert "ANTHROPIC_API_KEY" not in aider.env


async def test_mini_swe_agent_runs_headless_on_the_instruction(
    tmp_path: Path, store: ObjectStore
) -> None:
    stand_ins = python_tool(StandIns()).add("mini", stdout="mini-swe-agent ran\n")
    agent = {"name": "mini-swe-agent", "model": "openai/gpt-5", "flags": ["--cost-limit", "5"]}

    run = await run_builtin(tmp_path, store, agent, stand_ins, environ={"OPENAI_API_KEY": "sk-oa"})

    assert_ok(run)
    mini = only(run, "mini")
    # https://mini-swe-agent.com/latest/usage/mini/: -t/--task the task, -m/--model the model
    # (litellm's "provider/model"), -y/--yolo runs the LM's actions without confirmation.
    assert mini.has_flag("--task", INSTRUCTION.strip())
    assert mini.has_flag("--model", "openai/gpt-5")
    assert mini.has_flag("--yolo")
    # run/mini.py: --exit-immediately (no "new task?" prompt at the end), -o/--output the
    # trajectory file.
    assert mini.has_flag("--exit-immediately")
    assert mini.has_flag("--output", "/logs/agent/mini-swe-agent.traj.json")
    # Without it mini asks for a model and key first (run/utilities/config.py).
    assert mini.env["MSWEA_CONFIGURED"] == "true"
    assert mini.argv[-2:] == ["--cost-limit", "5"]
    assert mini.env["OPENAI_API_KEY"] == "sk-oa"
    assert mini.cwd == WORKDIR
    assert run.text("logs/agent/mini-swe-agent.txt") == "mini-swe-agent ran\n"


async def test_mini_swe_agent_default_model(tmp_path: Path, store: ObjectStore) -> None:
    stand_ins = python_tool(StandIns()).add("mini")

    run = await run_builtin(tmp_path, store, {"name": "mini-swe-agent"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    mini = only(run, "mini")
    assert mini.has_flag("--model", default("mini-swe-agent", "model"))
    assert mini.env["ANTHROPIC_API_KEY"] == KEY


async def test_goose_runs_headless_on_the_instruction(tmp_path: Path, store: ObjectStore) -> None:
    stand_ins = goose_download(StandIns()).add(
        "goose", version="goose 1.53.0", sh=AFTER + 'cat "$(after --instructions "$@")"'
    )
    agent = {"name": "goose", "flags": ["--max-turns", "50"]}

    run = await run_builtin(tmp_path, store, agent, stand_ins, environ=ENVIRON)

    assert_ok(run)
    goose = only(run, "goose")
    # goose-cli-commands: `goose run -i/--instructions FILE` runs the file's instructions and
    # exits; --with-builtin developer gives it the shell and editor tools; --output-format
    # stream-json prints one JSON event a line.
    assert goose.argv[0] == "run"
    assert goose.has_flag("--instructions", INSTRUCTION_FILE)
    assert INSTRUCTION in run.text("logs/agent/goose.txt")
    assert goose.has_flag("--with-builtin", "developer")
    assert goose.has_flag("--output-format", "stream-json")
    assert goose.argv[-2:] == ["--max-turns", "50"]
    # environment-variables: GOOSE_PROVIDER and GOOSE_MODEL (the model's "provider/" split off),
    # GOOSE_MODE=auto (approve modes refuse a headless run), GOOSE_DISABLE_KEYRING.
    provider, model = default("goose", "model").split("/", 1)
    assert (goose.env["GOOSE_PROVIDER"], goose.env["GOOSE_MODEL"]) == (provider, model)
    assert goose.env["GOOSE_MODE"] == "auto"
    assert "GOOSE_DISABLE_KEYRING" in goose.env
    assert goose.env["ANTHROPIC_API_KEY"] == KEY
    assert goose.cwd == WORKDIR


async def test_goose_model_names_its_provider(tmp_path: Path, store: ObjectStore) -> None:
    stand_ins = goose_download(StandIns()).add("goose", version="goose 1.53.0")
    agent = {"name": "goose", "model": "openrouter/anthropic/claude-sonnet-4.5"}

    run = await run_builtin(
        tmp_path, store, agent, stand_ins, environ={"OPENROUTER_API_KEY": "sk-or"}
    )

    assert_ok(run)
    goose = only(run, "goose")
    assert goose.env["GOOSE_PROVIDER"] == "openrouter"
    assert goose.env["GOOSE_MODEL"] == "anthropic/claude-sonnet-4.5"
    assert goose.env["OPENROUTER_API_KEY"] == "sk-or"


# --- a failing agent ----------------------------------------------------------------------------


def failing(name: str) -> tuple[StandIns, str]:
    if name == "goose":
        return goose_download(StandIns()).add(
            "goose", version="goose 1.53.0", stdout="provider error\n", exit=3
        ), "logs/agent/goose.txt"
    command = {"aider": "aider", "mini-swe-agent": "mini"}[name]
    stand_ins = python_tool(StandIns()).add(command, version="1", stdout="provider error\n", exit=3)
    return stand_ins, f"logs/agent/{name}.txt"


@pytest.mark.parametrize("name", ["aider", "mini-swe-agent", "goose"])
async def test_a_failing_agent_fails_the_execution(
    tmp_path: Path, store: ObjectStore, name: str
) -> None:
    stand_ins, log = failing(name)

    run = await run_builtin(tmp_path, store, {"name": name}, stand_ins, environ=ENVIRON)

    error = run.report.result.error
    assert error is not None
    assert error.type == ErrorType.AGENT_EXECUTION_FAILED
    assert run.text(log) == "provider error\n"


# --- usage ----------------------------------------------------------------------------------------


def jsonl(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


async def test_aider_usage_from_its_analytics_log(tmp_path: Path, store: ObjectStore) -> None:
    # One message_send event per LLM call (base_coder.show_usage_report): exact counts, and the
    # session's total_cost. The printed lines round ("1.2k") and are not used when it is there.
    events = jsonl(
        {"event": "launched", "properties": {}},
        {
            "event": "message_send",
            "properties": {
                "prompt_tokens": 1234,
                "completion_tokens": 56,
                "cost": 0.004,
                "total_cost": 0.004,
            },
        },
        {
            "event": "message_send",
            "properties": {
                "prompt_tokens": 2000,
                "completion_tokens": 100,
                "cost": 0.0075,
                "total_cost": 0.0115,
            },
        },
    )
    sh = AFTER + f'cat > "$(after --analytics-log "$@")" <<\'EOF\'\n{events}EOF\n'
    stdout = "Tokens: 1.2k sent, 56 received. Cost: $0.0040 message, $0.0040 session.\n"
    stand_ins = python_tool(StandIns()).add("aider", version="1", stdout=stdout, sh=sh)

    run = await run_builtin(tmp_path, store, {"name": "aider"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    assert usage(run) == {
        "input_tokens": 3234,
        "output_tokens": 156,
        "total_tokens": 3390,
        "cost_usd": 0.0115,
    }
    assert "logs/agent/aider.analytics.jsonl" in run.objects


async def test_aider_usage_from_its_printed_report(tmp_path: Path, store: ObjectStore) -> None:
    # Without the analytics log: each "Tokens: ... sent, ... received." line (k = thousands),
    # and the last "Cost: $... message, $... session." line's session cost.
    stdout = (
        "Tokens: 1.2k sent, 345 received. Cost: $0.0082 message, $0.0082 session.\n"
        "Applied edit to hello.txt\n"
        "Tokens: 12k sent, 2.5k cache write, 8.0k cache hit, 1.1k received.\n"
        "Cost: $0.05 message, $0.06 session.\n"
    )
    stand_ins = python_tool(StandIns()).add("aider", version="1", stdout=stdout)

    run = await run_builtin(tmp_path, store, {"name": "aider"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    assert usage(run) == {
        "input_tokens": 13200,
        "output_tokens": 1445,
        "total_tokens": 14645,
        "cost_usd": 0.06,
    }


async def test_mini_swe_agent_usage_from_its_trajectory(tmp_path: Path, store: ObjectStore) -> None:
    # output_files: info.model_stats.instance_cost; each assistant message's extra.response is
    # the raw litellm response, whose usage has prompt_tokens and completion_tokens.
    def reply(prompt: int, completion: int) -> dict[str, Any]:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion}
        return {"role": "assistant", "content": "...", "extra": {"response": {"usage": usage}}}

    trajectory = {
        "info": {
            "model_stats": {"instance_cost": 0.0321, "api_calls": 2},
            "exit_status": "Submitted",
        },
        "messages": [
            {"role": "system", "content": "..."},
            {"role": "user", "content": INSTRUCTION},
            reply(1500, 80),
            {"role": "user", "content": "<returncode>0</returncode>", "extra": {"returncode": 0}},
            reply(1700, 40),
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }
    sh = AFTER + f'cat > "$(after --output "$@")" <<\'EOF\'\n{json.dumps(trajectory)}\nEOF\n'
    stand_ins = python_tool(StandIns()).add("mini", sh=sh)

    run = await run_builtin(tmp_path, store, {"name": "mini-swe-agent"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    assert run.json("logs/agent/mini-swe-agent.traj.json") == trajectory
    assert usage(run) == {
        "input_tokens": 3200,
        "output_tokens": 120,
        "total_tokens": 3320,
        "cost_usd": 0.0321,
    }


async def test_goose_usage_from_its_complete_event(tmp_path: Path, store: ObjectStore) -> None:
    # session/mod.rs (stream-json): a "message" event per message, then "complete" with the
    # session's accumulated input/output tokens and cost.
    stdout = jsonl(
        {
            "type": "message",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        },
        {
            "type": "complete",
            "total_tokens": 5300,
            "input_tokens": 5000,
            "output_tokens": 300,
            "cost_usd": 0.0195,
        },
    )
    stand_ins = goose_download(StandIns()).add("goose", version="goose 1.53.0", stdout=stdout)

    run = await run_builtin(tmp_path, store, {"name": "goose"}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    assert usage(run) == {
        "input_tokens": 5000,
        "output_tokens": 300,
        "total_tokens": 5300,
        "cost_usd": 0.0195,
    }


@pytest.mark.parametrize("name", ["aider", "mini-swe-agent", "goose"])
async def test_no_usage_reported_is_no_usage(tmp_path: Path, store: ObjectStore, name: str) -> None:
    # Output with no usage in it (say the CLI changed its format) records none, and the trial
    # does not fail for it.
    if name == "goose":
        stand_ins = goose_download(StandIns()).add(
            "goose", version="1", stdout='{"type": "complete"}\n'
        )
    else:
        command = {"aider": "aider", "mini-swe-agent": "mini"}[name]
        stand_ins = python_tool(StandIns()).add(command, version="1", stdout="Tokens: many\n")

    run = await run_builtin(tmp_path, store, {"name": name}, stand_ins, environ=ENVIRON)

    assert_ok(run)
    assert usage(run) is None
    assert "logs/agent/usage.json" not in run.objects
