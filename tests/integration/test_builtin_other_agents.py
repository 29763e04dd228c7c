"""The built-in agents opencode, cline and cpe, run for real with stand-ins.

Each agent's catalogue scripts run in a fake container through the real runner (`agents_kit`):
install against stand-ins of node and npm (opencode, cline) or go and curl (cpe), execute
against a stand-in of the agent's CLI that records its arguments, environment, working directory
and standard input and prints what the real CLI prints. No model provider, registry or network
is reached. What the stand-ins check comes from each CLI's documentation (the URLs below) and
from the pinned releases themselves: `opencode run --help` of opencode-ai 1.18.33 and
`cline --help` of cline 3.0.65 (read on the released packages, whose `run`/`--json` output
shapes are quoted below as the binaries print them), and for cpe the README, flag definitions
(internal/cmd/root.go) and usage printing (internal/agent/runtime_lifecycle.go) of tag v0.43.0
of github.com/spachava753/cpe.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents_kit import INSTRUCTION, BuiltinRun, Call, StandIns, requires_fake_container, run_builtin

from rollout.api import catalogue
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

HOST_NODE = "/usr/bin/node"
"""The host's node, which the fake container shares (its /usr): the stand-in node hands `node -e`
(the scripts' session and usage extraction) to it."""
needs_host_node = pytest.mark.skipif(
    not os.access(HOST_NODE, os.X_OK), reason=f"{HOST_NODE} is not here to read the output"
)
KEY = "sk-test-5d0c9a"


def only(run: BuiltinRun, command: str) -> Call:
    calls = run.calls(command)
    assert len(calls) == 1, [c.argv for c in calls]
    return calls[0]


def assert_no_error(run: BuiltinRun) -> None:
    assert run.report.result.error is None, run.report.error_text


def assert_failed(run: BuiltinRun, error: ErrorType) -> None:
    assert run.report.result.error is not None
    assert run.report.result.error.type is error, run.report.error_text


def prompt_after_dashes(call: Call) -> str:
    """The instruction: the last argument, after the "--" that ends the options."""
    assert call.argv[-2] == "--", call.argv
    return call.argv[-1]


def assert_flags_before_dashes(call: Call, flags: list[str]) -> None:
    """The extra flags arrive as given, in order, before the "--"."""
    start = call.argv.index(flags[0])
    assert call.argv[start : start + len(flags)] == flags, call.argv
    assert start + len(flags) <= call.argv.index("--")


def recorded_version(run: BuiltinRun) -> str | None:
    assert run.report.result.rollout is not None
    assert run.report.result.rollout.agent is not None
    return run.report.result.rollout.agent.version


def usage_of(run: BuiltinRun) -> tuple[int, int, float | None] | None:
    assert run.report.result.rollout is not None
    usage = run.report.result.rollout.usage
    if usage is None:
        return None
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    return usage.input_tokens, usage.output_tokens, usage.cost_usd


def test_the_expectations_match_the_catalogue() -> None:
    """The pinned versions, default models and keys these tests check are the catalogue's."""
    expected = {
        "opencode": ("opencode", "1.18.33", "anthropic/claude-sonnet-4-5"),
        "cline": ("cline", "3.0.65", "anthropic/claude-sonnet-4-5"),
        "cpe": ("cpe", "v0.43.0", "sonnet"),
    }
    for name, (command, version, model) in expected.items():
        builtin = catalogue.get(name)
        assert builtin is not None
        assert (builtin.command, builtin.version, builtin.model) == (command, version, model)
        assert builtin.keys_for(builtin.model) == ["ANTHROPIC_API_KEY"]
        assert builtin.docs.startswith("https://")
    opencode, cline, cpe = (catalogue.get(n) for n in ("opencode", "cline", "cpe"))
    assert opencode is not None
    assert cline is not None
    assert cpe is not None
    assert opencode.keys_for("openai/gpt-5") == ["OPENAI_API_KEY"]
    assert opencode.keys_for("google/gemini-2.5-pro") == ["GEMINI_API_KEY"]
    # cline's default provider is cline (CLI reference: "-P, --provider <id>  Provider id
    # (default: cline)"), whose key is CLINE_API_KEY (apps/cli/README.md).
    assert cline.keys_for("claude-sonnet-4-5") == ["CLINE_API_KEY"]
    assert cline.keys_for("openrouter/anthropic/claude-sonnet-4.5") == ["OPENROUTER_API_KEY"]
    assert cpe.keys_for("responses/gpt-5") == ["OPENAI_API_KEY"]


# --- opencode and cline: npm packages ---------------------------------------------------------

NPM_AGENTS = {
    # https://opencode.ai/docs/cli/ (`npm i -g opencode-ai`); the package has no engines field.
    "opencode": ("opencode-ai", "1.18.33", "opencode"),
    # https://docs.cline.bot/getting-started/installing-cline (`npm install -g cline`).
    "cline": ("cline", "3.0.65", "cline"),
}
NPM = [pytest.param(name, id=name) for name in NPM_AGENTS]


def opencode_sh(events: str = "", status: int = 0) -> str:
    """The opencode stand-in: `run` prints `events` (JSON lines) and exits with `status`;
    `export SESSION` prints the session as JSON (as `opencode export [sessionID]` does)."""
    return (
        'case "$1" in\n'
        "  run)\n"
        "    cat <<'EVENTS'\n"
        f"{events}"
        "EVENTS\n"
        f"    exit {status} ;;\n"
        '  export) printf \'{"info":{"id":"%s"},"messages":[]}\\n\' "$2" ;;\n'
        "esac\n"
    )


def npm_stand_ins(name: str, **cli: Any) -> StandIns:
    """npm, node 18 (the scripts' minimum) and the agent's CLI, which answers --version with the
    pinned version and otherwise does what `cli` says."""
    _, version, command = NPM_AGENTS[name]
    return (
        StandIns()
        .add("npm")
        .add("node", version="v18.0.0", passthrough=HOST_NODE)
        .add(command, version=version, stdin=True, **cli)
    )


def cli_call(run: BuiltinRun, name: str) -> Call:
    """The agent's run (opencode's is `opencode run`; `opencode export` comes after it)."""
    calls = run.calls(NPM_AGENTS[name][2])
    if name == "opencode":
        calls = [c for c in calls if c.argv[:1] == ["run"]]
    assert len(calls) == 1, [c.argv for c in calls]
    return calls[0]


async def run_npm_agent(
    tmp_path: Path,
    store: ObjectStore,
    name: str,
    stand: StandIns,
    environ: dict[str, str] | None = None,
    **fields: object,
) -> BuiltinRun:
    return await run_builtin(
        tmp_path,
        store,
        {"name": name, **fields},
        stand,
        environ=environ if environ is not None else {"ANTHROPIC_API_KEY": KEY},
    )


@pytest.mark.parametrize("name", NPM)
async def test_npm_install_pins_the_default_version(
    tmp_path: Path, store: ObjectStore, name: str
) -> None:
    package, version, command = NPM_AGENTS[name]
    run = await run_npm_agent(tmp_path, store, name, npm_stand_ins(name))

    assert_no_error(run)
    install = only(run, "npm")
    assert install.argv[:2] == ["install", "-g"], install.argv
    assert install.argv[-1] == f"{package}@{version}"
    # Under $HOME/.local: the agent user need not be root.
    assert install.env["NPM_CONFIG_PREFIX"] == "/root/.local"
    # node's version was checked, and the installed CLI answered --version.
    assert [c for c in run.calls("node", versions=True) if c.version_query]
    assert [c for c in run.calls(command, versions=True) if c.version_query]
    assert recorded_version(run) == version


@pytest.mark.parametrize("name", NPM)
async def test_npm_install_pins_a_given_version(
    tmp_path: Path, store: ObjectStore, name: str
) -> None:
    package = NPM_AGENTS[name][0]
    run = await run_npm_agent(tmp_path, store, name, npm_stand_ins(name), version="1.2.3")

    assert_no_error(run)
    assert only(run, "npm").argv[-1] == f"{package}@1.2.3"
    assert recorded_version(run) == "1.2.3"


@pytest.mark.parametrize("name", NPM)
async def test_npm_install_with_node_too_old_fetches_a_newer_one(
    tmp_path: Path, store: ObjectStore, name: str
) -> None:
    """node 16 is below the scripts' 18: install goes for the official node build (the stand-in
    curl fails, as without network), so the trial is agent_install_failed and npm is not run."""
    stand = npm_stand_ins(name).add("node", version="v16.20.2", passthrough=HOST_NODE)
    stand.add("curl", stderr="curl: (6) Could not resolve host\n", exit=6).add("apt-get")
    run = await run_npm_agent(tmp_path, store, name, stand)

    assert_failed(run, ErrorType.AGENT_INSTALL_FAILED)
    assert any("nodejs.org/dist/" in arg for arg in only(run, "curl").argv)
    assert not run.calls("npm")


async def test_opencode_runs_headless_on_the_instruction(
    tmp_path: Path, store: ObjectStore
) -> None:
    flags = ["--variant", "high"]
    run = await run_npm_agent(
        tmp_path, store, "opencode", npm_stand_ins("opencode", sh=opencode_sh()), flags=flags
    )

    assert_no_error(run)
    call = cli_call(run, "opencode")
    # https://opencode.ai/docs/cli/#run: `opencode run [message..]` runs non-interactively;
    # --format json prints the raw JSON events; --auto "auto-approve permissions that are not
    # explicitly denied" (`opencode run --help`, 1.18.33; without it a headless run prints
    # "permission requested: ...; auto-rejecting"). The words after "--" are the message.
    assert call.argv[0] == "run"
    assert call.has_flag("--format", "json")
    assert call.has_flag("--auto")
    assert prompt_after_dashes(call) == INSTRUCTION
    assert call.stdin == ""  # nothing waits on (or is added from) standard input
    # -m/--model: "Model to use in the form of provider/model"; the catalogue's default.
    assert call.has_flag("--model", "anthropic/claude-sonnet-4-5")
    # --variant: "model variant (provider-specific reasoning effort, e.g., high, max, minimal)".
    assert_flags_before_dashes(call, flags)
    assert call.env["ANTHROPIC_API_KEY"] == KEY
    # The CLI page's OPENCODE_DISABLE_AUTOUPDATE: the pinned version stays.
    assert call.env["OPENCODE_DISABLE_AUTOUPDATE"] == "true"
    assert call.cwd == "/app"
    # No step_finish event in the output: no usage recorded, and the trial does not mind.
    assert "logs/agent/usage.json" not in run.objects
    assert usage_of(run) is None


@pytest.mark.parametrize(
    ("model", "arg", "key"),
    [
        ("openai/gpt-5", "openai/gpt-5", "OPENAI_API_KEY"),
        ("google/gemini-2.5-pro", "google/gemini-2.5-pro", "GEMINI_API_KEY"),
        # A model without its provider is an Anthropic one (the catalogue's default key).
        ("claude-opus-4-1", "anthropic/claude-opus-4-1", "ANTHROPIC_API_KEY"),
    ],
)
async def test_opencode_gets_the_model_as_provider_slash_model(
    tmp_path: Path, store: ObjectStore, model: str, arg: str, key: str
) -> None:
    run = await run_npm_agent(
        tmp_path,
        store,
        "opencode",
        npm_stand_ins("opencode", sh=opencode_sh()),
        environ={key: KEY},
        model=model,
    )

    assert_no_error(run)
    call = cli_call(run, "opencode")
    assert call.has_flag("--model", arg), call.argv
    assert call.env[key] == KEY
    assert call.env["ROLLOUT_AGENT_MODEL"] == model


async def test_cline_runs_headless_on_the_instruction(tmp_path: Path, store: ObjectStore) -> None:
    flags = ["--thinking", "high"]
    run = await run_npm_agent(
        tmp_path,
        store,
        "cline",
        npm_stand_ins("cline", stdout='{"type":"run_result"}\n'),
        flags=flags,
    )

    assert_no_error(run)
    call = cli_call(run, "cline")
    # https://docs.cline.bot/cli/cli-reference (= `cline --help`, 3.0.65): "--json  Output
    # messages as JSON instead of styled text" (headless: docs.cline.bot/usage/cli-overview,
    # "Headless mode"); "--auto-approve <boolean>  Set tool auto-approval for all tools" (the
    # overview's "For fully unattended runs ... cline --auto-approve true"); the prompt is one
    # argument (main.ts refuses a prompt split over several).
    assert call.has_flag("--json")
    assert call.has_flag("--auto-approve", "true")
    assert prompt_after_dashes(call) == INSTRUCTION
    assert call.stdin == ""
    # "-P, --provider <id>  Provider id (default: cline)", "-m, --model <model-id>  Model to use
    # for the session with the selected provider": anthropic/claude-sonnet-4-5 is model
    # claude-sonnet-4-5 of provider anthropic.
    assert call.has_flag("--provider", "anthropic")
    assert call.has_flag("--model", "claude-sonnet-4-5")
    # "--thinking <level>  Set reasoning effort level between none|low|medium|high|xhigh".
    assert_flags_before_dashes(call, flags)
    # The key from the environment (README: "ANTHROPIC_API_KEY - API key for Anthropic"), never
    # on the command line with -k.
    assert call.env["ANTHROPIC_API_KEY"] == KEY
    assert "-k" not in call.argv
    assert "--key" not in call.argv
    assert KEY not in call.argv
    # The reference's CLINE_SESSION_BACKEND_MODE: sessions in this process, no hub daemon; and
    # no update away from the pinned version (CLINE_NO_AUTO_UPDATE, apps/cli/src/commands/
    # update.ts).
    assert call.env["CLINE_SESSION_BACKEND_MODE"] == "local"
    assert call.env["CLINE_NO_AUTO_UPDATE"] == "1"
    assert call.cwd == "/app"
    assert usage_of(run) is None


@pytest.mark.parametrize(
    ("model", "provider", "model_arg", "key"),
    [
        # README: `cline -P openrouter -m google/gemini-3-pro -k sk-... "Set up a storybook"`.
        (
            "openrouter/google/gemini-3-pro",
            "openrouter",
            "google/gemini-3-pro",
            "OPENROUTER_API_KEY",
        ),
        ("openai-native/gpt-5", "openai-native", "gpt-5", "OPENAI_API_KEY"),
        # No provider: cline's default one (cline) with its key.
        ("claude-sonnet-4.6", None, "claude-sonnet-4.6", "CLINE_API_KEY"),
    ],
)
async def test_cline_gets_the_provider_and_the_model_apart(
    tmp_path: Path,
    store: ObjectStore,
    model: str,
    provider: str | None,
    model_arg: str,
    key: str,
) -> None:
    run = await run_npm_agent(
        tmp_path, store, "cline", npm_stand_ins("cline"), environ={key: KEY}, model=model
    )

    assert_no_error(run)
    call = cli_call(run, "cline")
    assert call.has_flag("--model", model_arg), call.argv
    if provider is None:
        assert "--provider" not in call.argv
    else:
        assert call.has_flag("--provider", provider), call.argv
    assert call.env[key] == KEY


@needs_host_node
async def test_opencode_output_and_session_land_in_logs_agent(
    tmp_path: Path, store: ObjectStore
) -> None:
    # `opencode run --format json` prints each event as {"type", "timestamp", "sessionID",
    # ...} (as 1.18.33 prints them); the script exports that session (`opencode export`).
    events = (
        '{"type":"step_start","timestamp":1795740860600,"sessionID":"ses_3f1c2a9e",'
        '"part":{"type":"step-start"}}\n'
        '{"type":"text","timestamp":1795740861000,"sessionID":"ses_3f1c2a9e",'
        '"part":{"type":"text","text":"Done."}}\n'
    )
    stand = npm_stand_ins("opencode", sh=opencode_sh(events), stderr="a warning on stderr\n")
    run = await run_npm_agent(tmp_path, store, "opencode", stand)

    assert_no_error(run)
    log = run.text("logs/agent/opencode.txt")
    assert '"text":"Done."' in log
    assert "a warning on stderr" in log
    (export,) = [c for c in run.calls("opencode") if c.argv[:1] == ["export"]]
    assert export.argv == ["export", "ses_3f1c2a9e"]
    assert run.json("logs/agent/opencode-session.json")["info"] == {"id": "ses_3f1c2a9e"}


async def test_cline_output_and_session_files_land_in_logs_agent(
    tmp_path: Path, store: ObjectStore
) -> None:
    # Local sessions: <data dir>/sessions/<id>/<id>.json and <id>.messages.json (cline 3.0.65).
    session = "$HOME/.cline/data/sessions/1795740929965_hmrkd"
    stand = npm_stand_ins(
        "cline",
        stdout='{"type":"agent_event","event":{"type":"iteration_start","iteration":1}}\n',
        stderr="a warning on stderr\n",
        sh=f'mkdir -p "{session}" && echo \'{{"messages":[]}}\' > '
        f'"{session}/1795740929965_hmrkd.messages.json"',
    )
    run = await run_npm_agent(tmp_path, store, "cline", stand)

    assert_no_error(run)
    log = run.text("logs/agent/cline.txt")
    assert '"iteration_start"' in log
    assert "a warning on stderr" in log
    assert run.json(
        "logs/agent/cline-sessions/1795740929965_hmrkd/1795740929965_hmrkd.messages.json"
    ) == {"messages": []}


@pytest.mark.parametrize("name", NPM)
async def test_a_failing_npm_agent_is_agent_execution_failed(
    tmp_path: Path, store: ObjectStore, name: str
) -> None:
    if name == "opencode":
        stand = npm_stand_ins(name, sh=opencode_sh('{"type":"error"}\n', status=1))
    else:
        stand = npm_stand_ins(name, stdout='{"type":"error"}\n', exit=1)
    run = await run_npm_agent(tmp_path, store, name, stand)

    assert_failed(run, ErrorType.AGENT_EXECUTION_FAILED)
    # The log is kept all the same.
    assert '{"type":"error"}' in run.text(f"logs/agent/{name}.txt")


@needs_host_node
async def test_opencode_usage_is_recorded(tmp_path: Path, store: ObjectStore) -> None:
    """Each step_finish event's part has tokens {input, output, reasoning, cache: {read,
    write}} and cost (USD), per step: summed; opencode's input leaves out the cached tokens and
    its output the reasoning ones, so both are added back."""
    events = "".join(
        '{"type":"step_finish","timestamp":1795740862000,"sessionID":"ses_3f1c2a9e",'
        f'"part":{{"type":"step-finish","reason":"tool-calls","cost":{cost},'
        f'"tokens":{{"total":{i + o + r + cr + cw},"input":{i},"output":{o},"reasoning":{r},'
        f'"cache":{{"read":{cr},"write":{cw}}}}}}}}}\n'
        for i, o, r, cr, cw, cost in ((100, 20, 5, 1000, 50, 0.0041), (30, 40, 0, 1100, 0, 0.0013))
    )
    run = await run_npm_agent(
        tmp_path, store, "opencode", npm_stand_ins("opencode", sh=opencode_sh(events))
    )

    assert_no_error(run)
    assert usage_of(run) == (100 + 1000 + 50 + 30 + 1100, 20 + 5 + 40, 0.0054)


@needs_host_node
async def test_cline_usage_is_recorded(tmp_path: Path, store: ObjectStore) -> None:
    """--json ends with {"type":"run_result", "usage": {inputTokens (the cached ones included),
    outputTokens, cacheReadTokens, cacheWriteTokens, totalCost}, ...} (as 3.0.65 prints it)."""
    stdout = (
        '{"ts":"2026-11-27T00:55:30.017Z","type":"agent_event","event":{"type":"iteration_start",'
        '"iteration":1}}\n'
        '{"ts":"2026-11-27T00:56:32.103Z","type":"run_result","finishReason":"completed",'
        '"iterations":3,"usage":{"inputTokens":24763,"outputTokens":512,"cacheReadTokens":20000,'
        '"cacheWriteTokens":1200,"totalCost":0.02519},"durationMs":62080,"text":"Done."}\n'
    )
    run = await run_npm_agent(tmp_path, store, "cline", npm_stand_ins("cline", stdout=stdout))

    assert_no_error(run)
    assert usage_of(run) == (24763, 512, 0.02519)
    assert [c for c in run.calls("node") if c.argv[:1] == ["-e"]]


@needs_host_node
async def test_usage_of_a_failing_cline_run_is_recorded_too(
    tmp_path: Path, store: ObjectStore
) -> None:
    stdout = (
        '{"type":"run_result","finishReason":"error","iterations":1,"usage":{"inputTokens":9,'
        '"outputTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"totalCost":0}}\n'
    )
    run = await run_npm_agent(
        tmp_path, store, "cline", npm_stand_ins("cline", stdout=stdout, exit=1)
    )

    assert_failed(run, ErrorType.AGENT_EXECUTION_FAILED)
    # No cost when the CLI reports none (0).
    assert usage_of(run) == (9, 0, None)


# --- cpe: go install ---------------------------------------------------------------------------

CPE_MODULE = "github.com/spachava753/cpe"
GO_VERSION = "1.25.5"
"""The Go cpe v0.43.0 is built with (its go.mod: go 1.25.0; its own cpe_harbor/cpe.py at
v0.43.0: _GO_VERSION = "1.25.5"), as the seed's example installs it."""
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "amd64": "amd64"}.get(
    platform.machine(), platform.machine()
)
GO_URL = f"https://go.dev/dl/go{GO_VERSION}.linux-{GO_ARCH}.tar.gz"
PROMPT_URL = (
    "https://raw.githubusercontent.com/spachava753/cpe/{tag}/examples/agent_instructions.md"
)
SEEN = "/logs/agent/seen-config"
"""Where the cpe stand-in copies ~/.config/cpe/ (the config install wrote) for the test to read."""

# For a stand-in's `sh`: the argument after -o, and the last argument.
CURL_ARGS = (
    'out=; prev=; for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done\nurl="${@: -1}"\n'
)
# curl "downloads": the Go archive as go.dev lays it out (go/bin/go, go/bin/gofmt), whose go runs
# the go stand-in; the system prompt template.
CURL_DOWNLOADS = (
    CURL_ARGS + 'case "$url" in\n'
    "  https://go.dev/dl/*)\n"
    '    d=$(mktemp -d) && mkdir -p "$d/go/bin"\n'
    '    printf \'#!/bin/sh\\nexec /usr/local/bin/go "$@"\\n\' > "$d/go/bin/go"\n'
    '    cp "$d/go/bin/go" "$d/go/bin/gofmt" && chmod 755 "$d/go/bin/go" "$d/go/bin/gofmt"\n'
    '    tar -czf "$out" -C "$d" go ;;\n'
    "  */agent_instructions.md) printf 'You are {{.Model.DisplayName}}.\\n' > \"$out\" ;;\n"
    "esac\n"
)
# The cpe stand-in: keeps the config install wrote, and writes the conversation database where
# --db-path says.
CPE_SH = (
    f'mkdir -p {SEEN} && cp -R "$HOME/.config/cpe/." {SEEN}/\n'
    'prev=; for a in "$@"; do [ "$prev" = --db-path ] && printf "SQLite format 3" > "$a"; '
    "prev=$a; done\n"
)

# cpe.yaml's model profile fields at v0.43.0 (schema/cpe-config-schema.json, ModelConfig:
# "additionalProperties": false; the loader decodes with KnownFields(true)).
PROFILE_REQUIRED = {"ref", "display_name", "id", "type", "context_window", "max_output"}
PROFILE_FIELDS = PROFILE_REQUIRED | {
    "base_url",
    "api_key_env",
    "auth_method",
    "input_cost_per_million",
    "output_cost_per_million",
    "cache_read_cost_per_million",
    "cache_write_cost_per_million",
    "patchRequest",
    "mcpServers",
    "systemPromptPath",
    "generationParams",
    "timeout",
    "codeMode",
    "compaction",
}
CPE_TYPES = {"openai", "anthropic", "gemini", "responses", "groq", "cerebras", "openrouter", "zai"}


def cpe_stand_ins(
    *,
    go: str = f"go version go{GO_VERSION} linux/{GO_ARCH}",
    curl: str = CURL_DOWNLOADS,
    **cpe: Any,
) -> StandIns:
    """go (answering `go version` with `go`), curl (downloading as `curl` says) and cpe, which
    answers --version and otherwise runs CPE_SH (and `cpe`'s `sh`, if given) and does what
    `cpe` says."""
    sh = CPE_SH + cpe.pop("sh", "")
    return (
        StandIns()
        .add("go", version=go)
        .add("curl", sh=curl)
        .add("cpe", version="cpe version v0.43.0", stdin=True, sh=sh, **cpe)
    )


async def run_cpe(
    tmp_path: Path,
    store: ObjectStore,
    stand: StandIns,
    environ: dict[str, str] | None = None,
    **fields: object,
) -> BuiltinRun:
    return await run_builtin(
        tmp_path,
        store,
        {"name": "cpe", **fields},
        stand,
        environ=environ if environ is not None else {"ANTHROPIC_API_KEY": KEY},
    )


def go_install(run: BuiltinRun) -> Call:
    calls = [c for c in run.calls("go") if c.argv[:1] == ["install"]]
    assert len(calls) == 1, [c.argv for c in run.calls("go")]
    return calls[0]


def cpe_config(run: BuiltinRun) -> dict[str, Any]:
    config = yaml.safe_load(run.text("logs/agent/seen-config/cpe.yaml"))
    assert isinstance(config, dict)
    assert set(config) == {"version", "models"}
    for profile in config["models"]:
        assert PROFILE_REQUIRED <= set(profile) <= PROFILE_FIELDS, profile
        assert profile["type"] in CPE_TYPES
    return config


def profile(config: dict[str, Any], ref: str) -> dict[str, Any]:
    (found,) = [p for p in config["models"] if p["ref"] == ref]
    return found


async def test_cpe_install_builds_the_pinned_tag_with_the_go_there(
    tmp_path: Path, store: ObjectStore
) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins())

    assert_no_error(run)
    # https://github.com/spachava753/cpe/blob/v0.43.0/README.md#using-go:
    # `go install github.com/spachava753/cpe@latest`, here the pinned tag; into $HOME/.local/bin
    # (GOBIN), pure Go (its SQLite is ncruces/go-sqlite3, no cgo).
    install = go_install(run)
    assert install.argv == ["install", f"{CPE_MODULE}@v0.43.0"]
    assert install.env["GOBIN"] == "/root/.local/bin"
    assert install.env["CGO_ENABLED"] == "0"
    # go 1.25.5 was there (`go version` asked), so no Go download; cpe answered --version.
    assert [c for c in run.calls("go", versions=True) if c.version_query]
    assert [c for c in run.calls("cpe", versions=True) if c.version_query]
    (curl,) = run.calls("curl")
    assert curl.argv[-1] == PROMPT_URL.format(tag="v0.43.0")
    assert recorded_version(run) == "v0.43.0"
    # The seed's three Claude profiles, each with the template of the same tag as its system
    # prompt, the built-in text_edit tool and code mode (README: "Full Configuration Example",
    # "MCP Tool Integration", "Code Mode").
    config = cpe_config(run)
    assert [p["ref"] for p in config["models"]] == ["sonnet", "opus", "haiku"]
    sonnet = profile(config, "sonnet")
    assert sonnet["id"] == "claude-sonnet-4-5-20250929"
    assert sonnet["type"] == "anthropic"
    assert sonnet["api_key_env"] == "ANTHROPIC_API_KEY"
    assert (sonnet["input_cost_per_million"], sonnet["output_cost_per_million"]) == (3, 15)
    assert sonnet["systemPromptPath"] == "/root/.config/cpe/agent_instructions.md"
    assert sonnet["mcpServers"] == {"editor": {"type": "builtin", "enabledTools": ["text_edit"]}}
    assert sonnet["codeMode"] == {"enabled": True}
    assert run.text("logs/agent/seen-config/agent_instructions.md").startswith("You are")


@pytest.mark.parametrize("given", ["v0.42.0", "0.42.0"])
async def test_cpe_install_pins_a_given_tag(tmp_path: Path, store: ObjectStore, given: str) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins(), version=given)

    assert_no_error(run)
    assert go_install(run).argv == ["install", f"{CPE_MODULE}@v0.42.0"]
    assert only(run, "curl").argv[-1] == PROMPT_URL.format(tag="v0.42.0")
    assert recorded_version(run) == given


async def test_cpe_install_refuses_a_tag_without_the_one_shot_cli(
    tmp_path: Path, store: ObjectStore
) -> None:
    """From v0.44.0 on cpe is an ACP server (root.go keeps only --config and -v; v0.45 adds a
    bare prompt, without -n or --skip-stdin): install says so instead of building it."""
    run = await run_cpe(tmp_path, store, cpe_stand_ins(), version="v0.46.0")

    assert_failed(run, ErrorType.AGENT_INSTALL_FAILED)
    assert "cpe v0.46.0 has no one-shot CLI" in run.text("setup/stderr.txt")
    assert not [c for c in run.calls("go") if c.argv[:1] == ["install"]]
    assert not run.calls("cpe")


async def test_cpe_install_with_go_too_old_fetches_the_official_build(
    tmp_path: Path, store: ObjectStore
) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins(go="go version go1.21.13 linux/amd64"))

    assert_no_error(run)
    curls = [c.argv[-1] for c in run.calls("curl")]
    assert curls == [GO_URL, PROMPT_URL.format(tag="v0.43.0")]
    # The archive's go (unpacked under $HOME/.local/go, linked into $HOME/.local/bin) ran the
    # install: it execs the go stand-in, which recorded it.
    assert go_install(run).argv == ["install", f"{CPE_MODULE}@v0.43.0"]


async def test_cpe_install_without_network_is_agent_install_failed(
    tmp_path: Path, store: ObjectStore
) -> None:
    stand = cpe_stand_ins(go="go version go1.21.13 linux/amd64", curl="exit 6")
    run = await run_cpe(tmp_path, store, stand)

    assert_failed(run, ErrorType.AGENT_INSTALL_FAILED)
    assert [c.argv[-1] for c in run.calls("curl")] == [GO_URL]
    assert not [c for c in run.calls("go") if c.argv[:1] == ["install"]]


async def test_cpe_without_the_prompt_template_runs_without_a_system_prompt(
    tmp_path: Path, store: ObjectStore
) -> None:
    stand = cpe_stand_ins(curl="exit 22")  # the template's download fails (HTTP 404)
    run = await run_cpe(tmp_path, store, stand)

    assert_no_error(run)
    assert all("systemPromptPath" not in p for p in cpe_config(run)["models"])


async def test_cpe_runs_one_shot_on_the_instruction(tmp_path: Path, store: ObjectStore) -> None:
    flags = ["--timeout", "45m"]
    run = await run_cpe(tmp_path, store, cpe_stand_ins(stdout="Done.\n"), flags=flags)

    assert_no_error(run)
    call = only(run, "cpe")
    # README v0.43.0, "CLI Reference" (`cpe [flags] [prompt]`) and internal/cmd/root.go:
    # "-n, --new  Start a new conversation"; "--skip-stdin  Skip reading from stdin (useful in
    # scripts)"; "--db-path  Path to conversation SQLite database"; "--config  Path to YAML
    # configuration file"; the prompt is one positional argument (input.go: exactly one).
    assert call.has_flag("--config", "/root/.config/cpe/cpe.yaml")
    assert call.has_flag("-n")
    assert call.has_flag("--skip-stdin")
    assert call.has_flag("--db-path", "/logs/agent/cpe.cpeconvo")
    assert prompt_after_dashes(call) == INSTRUCTION
    assert call.stdin == ""
    # "-m, --model string  Specify the model profile to use": a ref of cpe.yaml.
    assert call.has_flag("--model", "sonnet")
    # "--timeout string  Request timeout (e.g., '5m', '30s')".
    assert_flags_before_dashes(call, flags)
    # api_key_env: ANTHROPIC_API_KEY in the sonnet profile.
    assert call.env["ANTHROPIC_API_KEY"] == KEY
    assert call.cwd == "/app"
    assert usage_of(run) is None


@pytest.mark.parametrize(
    ("model", "kind", "model_id", "key"),
    [
        ("responses/gpt-5", "responses", "gpt-5", "OPENAI_API_KEY"),
        ("gemini/gemini-2.5-pro", "gemini", "gemini-2.5-pro", "GEMINI_API_KEY"),
        ("openrouter/qwen/qwen3-max", "openrouter", "qwen/qwen3-max", "OPENROUTER_API_KEY"),
    ],
)
async def test_cpe_gets_a_profile_for_a_type_slash_model(
    tmp_path: Path, store: ObjectStore, model: str, kind: str, model_id: str, key: str
) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins(), environ={key: KEY}, model=model)

    assert_no_error(run)
    call = only(run, "cpe")
    assert call.has_flag("--model", model)
    assert call.env[key] == KEY
    added = profile(cpe_config(run), model)
    assert (added["type"], added["id"], added["api_key_env"]) == (kind, model_id, key)


async def test_cpe_model_opus_is_a_profile_of_the_config(
    tmp_path: Path, store: ObjectStore
) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins(), model="opus")

    assert_no_error(run)
    assert only(run, "cpe").has_flag("--model", "opus")
    assert profile(cpe_config(run), "opus")["id"] == "claude-opus-4-5-20251101"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("gpt-5", "cpe has no model profile 'gpt-5'"),
        ("bedrock/claude-sonnet", "cpe has no provider type 'bedrock'"),
    ],
)
async def test_cpe_refuses_a_model_it_has_no_profile_for(
    tmp_path: Path, store: ObjectStore, model: str, message: str
) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins(), model=model)

    assert_failed(run, ErrorType.AGENT_INSTALL_FAILED)
    assert message in run.text("setup/stderr.txt")
    assert not run.calls("cpe")


async def test_cpe_output_and_conversation_land_in_logs_agent(
    tmp_path: Path, store: ObjectStore
) -> None:
    run = await run_cpe(
        tmp_path, store, cpe_stand_ins(stdout="Done.\n", stderr="a tool call on stderr\n")
    )

    assert_no_error(run)
    log = run.text("logs/agent/cpe.txt")
    assert "Done." in log
    assert "a tool call on stderr" in log
    # The conversation database (--db-path) is in logs/agent: the trajectory.
    assert run.objects["logs/agent/cpe.cpeconvo"].startswith(b"SQLite format 3")


async def test_a_failing_cpe_is_agent_execution_failed(tmp_path: Path, store: ObjectStore) -> None:
    run = await run_cpe(tmp_path, store, cpe_stand_ins(stderr="Error: model error\n", exit=1))

    assert_failed(run, ErrorType.AGENT_EXECUTION_FAILED)
    assert "Error: model error" in run.text("logs/agent/cpe.txt")


# After each response cpe v0.43.0 prints on stderr, plain when not a terminal (runtime_lifecycle.go
# printTokenUsage, formatUsageLine, formatContextUtilizationLine, formatCostLine):
CPE_USAGE = (
    "I'll create the file.\n"
    "> input: `1200`, output: `300`, cache read: `1000`, cache write: `0`\n"
    "> context: `1500 / 200000` (`0.75%`)\n"
    "> estimated cost: input: `$0.000600`, output: `$0.004500`, cache read: `$0.000300`, "
    "total: `$0.005400`, cumulative: `$0.005400`\n"
    "Done.\n"
    "> input: `2400`, output: `45`\n"
    "> context: `2445 / 200000` (`1.22%`)\n"
    "> estimated cost: input: `$0.007200`, output: `$0.000675`, total: `$0.007875`, "
    "cumulative: `$0.013275`\n"
)


async def test_cpe_usage_is_recorded(tmp_path: Path, store: ObjectStore) -> None:
    """The tokens of every response summed; the cost is the last cumulative one (awk reads them:
    cpe needs neither node nor python)."""
    run = await run_cpe(tmp_path, store, cpe_stand_ins(stderr=CPE_USAGE))

    assert_no_error(run)
    assert usage_of(run) == (3600, 345, 0.013275)


async def test_cpe_usage_without_costs_has_no_cost(tmp_path: Path, store: ObjectStore) -> None:
    """A profile without costs (one install adds for TYPE/MODEL_ID) prints no cost line."""
    stderr = "> input: `500`, output: `20`\n> context: `520 / 400000` (`0.13%`)\n"
    run = await run_cpe(
        tmp_path,
        store,
        cpe_stand_ins(stderr=stderr, exit=3),
        environ={"OPENAI_API_KEY": KEY},
        model="responses/gpt-5",
    )

    assert_failed(run, ErrorType.AGENT_EXECUTION_FAILED)
    assert usage_of(run) == (500, 20, None)


def test_the_scripts_are_bash(tmp_path: Path) -> None:
    """Every script parses with bash -n, the library before it as the runner runs it."""
    for name in ("opencode", "cline", "cpe"):
        builtin = catalogue.get(name)
        assert builtin is not None
        for kind, script in (
            ("install", builtin.install_script),
            ("execute", builtin.execute_script),
        ):
            path = tmp_path / f"{name}-{kind}.sh"
            path.write_text(script)
            checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert checked.returncode == 0, (name, kind, checked.stderr)
