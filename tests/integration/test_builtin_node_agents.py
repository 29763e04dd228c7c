"""The npm-installed built-in agents (claude-code, codex, gemini-cli), run for real with stand-ins.

Each agent's catalogue scripts run in a fake container through the real runner
(`agents_kit`): install against stand-in `node` and `npm`, execute against a stand-in of the
agent's CLI that records its arguments, environment, working directory and standard input and
prints what the real CLI prints in its JSON output mode. No model provider, registry or network
is reached. What each stand-in checks comes from the CLI's documentation (each agent's URLs
below) and from the pinned release's own `--help` (read on the released package: `claude --help`
2.1.332, `codex exec --help` 0.171.0, `gemini --help` 0.61.0); the minimum node major is the
`engines.node` of the pinned package's package.json.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from agents_kit import INSTRUCTION, BuiltinRun, Call, StandIns, requires_fake_container, run_builtin

from rollout.api import catalogue
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

HOST_NODE = "/usr/bin/node"
"""The host's node, which the fake container shares (its /usr): the stand-in node hands `node -e`
(the scripts' usage extraction) to it."""
needs_host_node = pytest.mark.skipif(
    not os.access(HOST_NODE, os.X_OK), reason=f"{HOST_NODE} is not here to read the usage"
)


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass(frozen=True)
class NodeAgent:
    """What the tests expect of one npm-installed built-in, from its CLI's documentation."""

    name: str
    command: str
    package: str
    version: str
    """The catalogue's pinned default."""
    node_major: int
    """engines.node of the package at that version."""
    key: str
    """The API key the agent needs (its provider's documented variable)."""
    headless: tuple[tuple[str, ...], ...]
    """The flags (with their values) that run the CLI headless and approve every action."""
    model: str
    """A model as job.yaml names it; `model_arg` is what the CLI must get for it."""
    model_arg: str
    prefixed_model: str
    """The same model with its provider in front ("provider/model"), which the CLI gets bare."""
    flags: tuple[str, ...]
    """Documented extra flags a job may give."""
    prompt_after_dashes: bool
    """The instruction is the last argument, after "--" (else it is --prompt=TEXT)."""
    session_file: str
    """A session file the CLI writes (relative to $HOME) ..."""
    session_log: str
    """... and where it must land under logs/agent/."""
    failing_exit: int
    usage_stdout: str
    usage: Usage

    def cli_call(self, run: BuiltinRun) -> Call:
        calls = run.calls(self.command)
        assert len(calls) == 1, [c.argv for c in calls]
        return calls[0]

    def prompt(self, call: Call) -> str:
        if self.prompt_after_dashes:
            assert call.argv[-2] == "--", call.argv
            return call.argv[-1]
        prompts = [a.removeprefix("--prompt=") for a in call.argv if a.startswith("--prompt=")]
        assert len(prompts) == 1, call.argv
        return prompts[0]

    def log(self) -> str:
        return f"logs/agent/{self.name}.txt"


CLAUDE_CODE = NodeAgent(
    name="claude-code",
    command="claude",
    package="@anthropic-ai/claude-code",
    version="2.1.332",
    node_major=22,
    key="ANTHROPIC_API_KEY",
    # https://code.claude.com/docs/en/cli-reference and https://code.claude.com/docs/en/headless:
    # -p/--print runs non-interactively; --output-format stream-json (with --print it needs
    # --verbose, the CLI says so); --dangerously-skip-permissions approves every tool call.
    headless=(
        ("--print",),
        ("--output-format", "stream-json"),
        ("--verbose",),
        ("--dangerously-skip-permissions",),
    ),
    # cli-reference's --model; `claude --help` 2.1.332: "--model <model>  Model for the current
    # session. Use an alias for the latest model (...) or a model's full name."
    model="claude-sonnet-4-5",
    model_arg="claude-sonnet-4-5",
    prefixed_model="anthropic/claude-sonnet-4-5",
    flags=("--max-turns", "30"),
    prompt_after_dashes=True,
    # Claude Code keeps each session's transcript in ~/.claude/projects/<project>/<id>.jsonl.
    session_file=".claude/projects/-app/3f1c2a9e.jsonl",
    session_log="logs/agent/claude-code-sessions/-app/3f1c2a9e.jsonl",
    failing_exit=1,
    # headless: the json/stream-json result message has total_cost_usd and usage (the API's
    # input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens).
    usage_stdout=(
        '{"type":"system","subtype":"init","session_id":"3f1c2a9e"}\n'
        '{"type":"result","subtype":"success","is_error":false,"num_turns":4,'
        '"result":"Done.","session_id":"3f1c2a9e","total_cost_usd":0.0123,'
        '"usage":{"input_tokens":100,"cache_creation_input_tokens":20,'
        '"cache_read_input_tokens":3,"output_tokens":45}}\n'
    ),
    usage=Usage(input_tokens=123, output_tokens=45, cost_usd=0.0123),
)

CODEX = NodeAgent(
    name="codex",
    command="codex",
    package="@openai/codex",
    version="0.171.0",
    node_major=16,
    key="OPENAI_API_KEY",
    # https://developers.openai.com/codex/noninteractive and
    # https://developers.openai.com/codex/cli/reference#codex-exec: `codex exec` runs
    # non-interactively; --dangerously-bypass-approvals-and-sandbox skips every approval and the
    # sandbox (for externally sandboxed environments); --skip-git-repo-check lets it run outside
    # a git repository; --json prints the events as JSONL.
    headless=(
        ("exec",),
        ("--dangerously-bypass-approvals-and-sandbox",),
        ("--skip-git-repo-check",),
        ("--json",),
    ),
    # cli reference: "-m, --model <MODEL>: Model the agent should use".
    model="gpt-5-codex",
    model_arg="gpt-5-codex",
    prefixed_model="openai/gpt-5-codex",
    # -c/--config key=value overrides a config.toml value (cli reference).
    flags=("--config", "model_reasoning_effort=high"),
    prompt_after_dashes=True,
    # Codex writes each session's rollout to $CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl.
    session_file=".codex/sessions/2026/11/27/rollout-2026-11-27T00-00-00-0199a213.jsonl",
    session_log="logs/agent/codex-sessions/2026/11/27/rollout-2026-11-27T00-00-00-0199a213.jsonl",
    failing_exit=1,
    # noninteractive: with --json, "turn.completed" carries the turn's usage (input_tokens,
    # cached_input_tokens, output_tokens); no cost.
    usage_stdout=(
        '{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}\n'
        '{"type":"turn.started"}\n'
        '{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Done."}}\n'
        '{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,'
        '"output_tokens":122}}\n'
    ),
    usage=Usage(input_tokens=24763, output_tokens=122, cost_usd=None),
)

GEMINI_CLI = NodeAgent(
    name="gemini-cli",
    command="gemini",
    package="@google/gemini-cli",
    version="0.61.0",
    node_major=20,
    key="GEMINI_API_KEY",
    # https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/cli-reference.md: -p/--prompt
    # "Forces non-interactive mode"; --approval-mode yolo auto-approves every tool (--yolo is
    # deprecated); --skip-trust trusts the workspace, which headless runs need when folder trust
    # is on (docs/cli/trusted-folders.md); -o/--output-format stream-json (docs/cli/headless.md).
    headless=(
        ("--output-format", "stream-json"),
        ("--approval-mode", "yolo"),
        ("--skip-trust",),
    ),
    # cli-reference: "--model, -m: Model to use".
    model="gemini-2.5-pro",
    model_arg="gemini-2.5-pro",
    prefixed_model="google/gemini-2.5-pro",
    flags=("--include-directories", "/data"),
    prompt_after_dashes=False,
    # docs/cli/session-management.md: sessions are saved under ~/.gemini/tmp/<project>/chats/.
    session_file=".gemini/tmp/app/chats/session-2026-11-27T00-00-3f1c2a9e.json",
    session_log="logs/agent/gemini-cli-sessions/app/session-2026-11-27T00-00-3f1c2a9e.json",
    # headless.md's exit codes: 1 general error or API failure, 42 input error, 53 turn limit.
    failing_exit=53,
    # headless.md: stream-json ends with a "result" event "with aggregated statistics and
    # per-model token usage breakdowns" (stats.input_tokens, stats.output_tokens); no cost.
    usage_stdout=(
        '{"type":"init","timestamp":"2026-11-27T00:00:00.000Z","session_id":"3f1c2a9e",'
        '"model":"gemini-2.5-pro"}\n'
        '{"type":"message","timestamp":"2026-11-27T00:00:01.000Z","role":"assistant",'
        '"content":"Done.","delta":true}\n'
        '{"type":"result","timestamp":"2026-11-27T00:00:02.000Z","status":"success",'
        '"stats":{"total_tokens":1290,"input_tokens":1200,"output_tokens":90,"cached":0,'
        '"input":1200,"duration_ms":2100,"tool_calls":1,"models":{"gemini-2.5-pro":'
        '{"total_tokens":1290,"input_tokens":1200,"output_tokens":90,"cached":0,"input":1200}}}}\n'
    ),
    usage=Usage(input_tokens=1200, output_tokens=90, cost_usd=None),
)

AGENTS = [
    pytest.param(CLAUDE_CODE, id="claude-code"),
    pytest.param(CODEX, id="codex"),
    pytest.param(GEMINI_CLI, id="gemini-cli"),
]

KEY_VALUE = "sk-test-2f8e61"


def stand_ins(
    agent: NodeAgent,
    *,
    node: str | None = None,
    stdout: str = "",
    stderr: str = "",
    status: int | None = None,
    sh: str | None = None,
) -> StandIns:
    """npm, node (the lowest major the agent accepts, unless `node` is given) and the agent's CLI,
    which answers --version with the pinned version, else prints `stdout` and `stderr`, runs `sh`
    and exits with `status`."""
    return (
        StandIns()
        .add("npm")
        .add("node", version=node or f"v{agent.node_major}.0.0", passthrough=HOST_NODE)
        .add(
            agent.command,
            version=agent.version,
            stdin=True,
            stdout=stdout,
            stderr=stderr,
            exit=status,
            sh=sh,
        )
    )


async def run_agent(
    tmp_path: Path,
    store: ObjectStore,
    agent: NodeAgent,
    stand: StandIns,
    **fields: object,
) -> BuiltinRun:
    return await run_builtin(
        tmp_path, store, {"name": agent.name, **fields}, stand, environ={agent.key: KEY_VALUE}
    )


def npm_install(run: BuiltinRun) -> Call:
    calls = run.calls("npm")
    assert len(calls) == 1, [c.argv for c in calls]
    assert calls[0].argv[:2] == ["install", "-g"], calls[0].argv
    return calls[0]


def assert_no_error(run: BuiltinRun) -> None:
    assert run.report.result.error is None, run.report.error_text


def test_the_expectations_match_the_catalogue() -> None:
    """The pinned versions and keys these tests check are the catalogue's."""
    for param in AGENTS:
        (agent,) = param.values
        assert isinstance(agent, NodeAgent)
        builtin = catalogue.get(agent.name)
        assert builtin is not None
        assert builtin.command == agent.command
        assert builtin.version == agent.version
        assert builtin.keys_for(None) == [agent.key]
        assert builtin.docs.startswith("https://")


@pytest.mark.parametrize("agent", AGENTS)
async def test_install_pins_the_default_version_with_node_new_enough(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    run = await run_agent(tmp_path, store, agent, stand_ins(agent))

    assert_no_error(run)
    install = npm_install(run)
    assert install.argv[-1] == f"{agent.package}@{agent.version}"
    # Under $HOME/.local, not the system prefix: the agent user need not be root.
    assert install.env["NPM_CONFIG_PREFIX"] == "/root/.local"
    assert install.env["ROLLOUT_AGENT_VERSION"] == agent.version
    # node's major was checked (the stand-in's is the lowest the package accepts) and the
    # installed CLI answered --version.
    assert [c.argv for c in run.calls("node", versions=True) if c.version_query]
    assert [c.argv for c in run.calls(agent.command, versions=True) if c.version_query]
    assert run.report.result.rollout is not None
    assert run.report.result.rollout.agent is not None
    assert run.report.result.rollout.agent.version == agent.version
    # No model given: the CLI's own default, so no --model.
    call = agent.cli_call(run)
    assert "--model" not in call.argv
    assert "-m" not in call.argv
    assert call.env["ROLLOUT_AGENT_MODEL"] == ""


@pytest.mark.parametrize("agent", AGENTS)
async def test_install_pins_a_given_version(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    wanted = "0.0.7-pinned"
    run = await run_agent(tmp_path, store, agent, stand_ins(agent), version=wanted)

    assert_no_error(run)
    assert npm_install(run).argv[-1] == f"{agent.package}@{wanted}"
    assert run.report.result.rollout is not None
    assert run.report.result.rollout.agent is not None
    assert run.report.result.rollout.agent.version == wanted


@pytest.mark.parametrize("agent", AGENTS)
async def test_install_with_a_node_too_old_fetches_a_newer_one(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    """One major below the package's engines.node: install goes for the official node build (the
    stand-in curl fails, as without network), so the trial is agent_install_failed, npm unrun."""
    stand = stand_ins(agent, node=f"v{agent.node_major - 1}.9.0")
    stand.add("curl", stderr="curl: (6) Could not resolve host\n", exit=6)
    stand.add("apt-get")
    run = await run_agent(tmp_path, store, agent, stand)

    assert run.report.result.error is not None
    assert run.report.result.error.type is ErrorType.AGENT_INSTALL_FAILED
    (curl,) = run.calls("curl")
    assert any("nodejs.org/dist/" in arg for arg in curl.argv), curl.argv
    assert not run.calls("npm")
    assert not run.calls(agent.command, versions=True)


@pytest.mark.parametrize("agent", AGENTS)
async def test_execute_runs_the_cli_headless_on_the_instruction(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    run = await run_agent(
        tmp_path,
        store,
        agent,
        stand_ins(agent, stdout="working\n"),
        model=agent.model,
        flags=list(agent.flags),
    )

    assert_no_error(run)
    call = agent.cli_call(run)
    assert agent.prompt(call) == INSTRUCTION
    assert call.stdin == ""  # nothing waits on (or is appended from) standard input
    for flag, *value in agent.headless:
        assert call.has_flag(flag, *value), (flag, value, call.argv)
    assert call.has_flag("--model", agent.model_arg), call.argv
    # The extra flags arrive as given, in order (and before the "--" that ends the options).
    start = call.argv.index(agent.flags[0])
    assert call.argv[start : start + len(agent.flags)] == list(agent.flags)
    if agent.prompt_after_dashes:
        assert start < call.argv.index("--")
    assert call.env[agent.key] == KEY_VALUE
    assert call.cwd == "/app"
    assert call.env["ROLLOUT_AGENT_MODEL"] == agent.model
    # No usage in the output: none recorded, and the trial does not mind.
    assert "logs/agent/usage.json" not in run.objects
    assert run.report.result.rollout is not None
    assert run.report.result.rollout.usage is None


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_model_with_its_provider_reaches_the_cli_bare(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    run = await run_agent(tmp_path, store, agent, stand_ins(agent), model=agent.prefixed_model)

    assert_no_error(run)
    assert agent.cli_call(run).has_flag("--model", agent.model_arg)


async def test_claude_code_is_told_it_runs_in_a_sandbox(tmp_path: Path, store: ObjectStore) -> None:
    """As root, claude refuses --dangerously-skip-permissions ("cannot be used with root/sudo
    privileges for security reasons", seen with 2.1.332) unless IS_SANDBOX=1; a trial runs as
    root. Also: no auto-update away from the pinned version (DISABLE_AUTOUPDATER, settings
    reference's environment variables)."""
    run = await run_agent(tmp_path, store, CLAUDE_CODE, stand_ins(CLAUDE_CODE))

    call = CLAUDE_CODE.cli_call(run)
    assert call.env["IS_SANDBOX"] == "1"
    assert call.env["DISABLE_AUTOUPDATER"] == "1"


async def test_codex_gets_the_openai_key_as_codex_api_key(
    tmp_path: Path, store: ObjectStore
) -> None:
    """noninteractive: "Set CODEX_API_KEY ... CODEX_API_KEY is only supported in codex exec";
    the job gives OPENAI_API_KEY, the catalogue's key, and the script passes it on."""
    run = await run_agent(tmp_path, store, CODEX, stand_ins(CODEX))

    call = CODEX.cli_call(run)
    assert call.env["CODEX_API_KEY"] == KEY_VALUE
    assert call.env["OPENAI_API_KEY"] == KEY_VALUE


async def test_codex_keeps_a_codex_api_key_the_job_gives(
    tmp_path: Path, store: ObjectStore
) -> None:
    run = await run_builtin(
        tmp_path,
        store,
        {"name": "codex", "env": {"CODEX_API_KEY": "${CODEX_API_KEY}"}},
        stand_ins(CODEX),
        environ={"OPENAI_API_KEY": KEY_VALUE, "CODEX_API_KEY": "sk-codex-own"},
    )

    assert CODEX.cli_call(run).env["CODEX_API_KEY"] == "sk-codex-own"


@pytest.mark.parametrize("agent", AGENTS)
async def test_the_output_and_the_session_files_land_in_logs_agent(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    session = json.dumps({"sessionId": "3f1c2a9e"})
    run = await run_agent(
        tmp_path,
        store,
        agent,
        stand_ins(
            agent,
            stdout='{"type":"init"}\n',
            stderr="a warning on stderr\n",
            sh=f'mkdir -p "$(dirname "$HOME/{agent.session_file}")" && '
            f"echo '{session}' > \"$HOME/{agent.session_file}\"",
        ),
    )

    assert_no_error(run)
    log = run.text(agent.log())
    assert '{"type":"init"}' in log
    assert "a warning on stderr" in log
    assert json.loads(run.text(agent.session_log)) == {"sessionId": "3f1c2a9e"}


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_failing_agent_is_agent_execution_failed(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    run = await run_agent(
        tmp_path,
        store,
        agent,
        stand_ins(agent, stdout='{"type":"error"}\n', status=agent.failing_exit),
    )

    assert run.report.result.error is not None
    assert run.report.result.error.type is ErrorType.AGENT_EXECUTION_FAILED, run.report.error_text
    assert str(agent.failing_exit) in run.report.result.error.message
    # The log is kept all the same.
    assert '{"type":"error"}' in run.text(agent.log())


@needs_host_node
@pytest.mark.parametrize("agent", AGENTS)
async def test_the_usage_the_cli_reports_is_recorded(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    run = await run_agent(tmp_path, store, agent, stand_ins(agent, stdout=agent.usage_stdout))

    assert_no_error(run)
    assert run.report.result.rollout is not None
    usage = run.report.result.rollout.usage
    assert usage is not None, run.report.error_text
    assert usage.input_tokens == agent.usage.input_tokens
    assert usage.output_tokens == agent.usage.output_tokens
    assert usage.total_tokens == agent.usage.input_tokens + agent.usage.output_tokens
    assert usage.cost_usd == agent.usage.cost_usd
    # Extracted with node, which the agent needs anyway (the stand-in hands it to the real one).
    assert [c for c in run.calls("node") if c.argv[:1] == ["-e"]]


@needs_host_node
@pytest.mark.parametrize("agent", AGENTS)
async def test_usage_from_a_failing_run_is_recorded_too(
    tmp_path: Path, store: ObjectStore, agent: NodeAgent
) -> None:
    run = await run_agent(
        tmp_path, store, agent, stand_ins(agent, stdout=agent.usage_stdout, status=1)
    )

    assert run.report.result.error is not None
    assert run.report.result.error.type is ErrorType.AGENT_EXECUTION_FAILED
    assert run.report.result.rollout is not None
    assert run.report.result.rollout.usage is not None
    assert run.report.result.rollout.usage.output_tokens == agent.usage.output_tokens
