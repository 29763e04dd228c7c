"""The shim: a small POSIX sh program that runs the runner's requests in the environment container.

The trial Pod's `environment` container runs the task's image with `shim_command()` as its command,
so the shim works on any image that has /bin/sh (dash, bash, busybox ash). The runner container
cannot exec into it; everything it does there goes through files in the control directory, an
emptyDir mounted at `CONTROL_DIR` in both containers. The operator puts the shim in the Pod
(`rollout.controller.pod`); the runner's side is `rollout_runner.shim_environment`.

Protocol (version `PROTOCOL_VERSION`; paths relative to the control directory):

- Ready: at start the shim creates `req/` (and, version 3, `wake`) and writes `ready` (temp
  file, then rename) with `key=value` lines: `version` (1 or 3, below), `pid`, `dir` (the
  control directory as the shim sees it, for paths in commands), `cwd` (the container's working
  directory), `setsid` (`setsid` or empty), `su` (the tool used to switch user: `su`,
  `runuser`, `setpriv` or empty), `uid`, and `done=1` from a shim that announces each request's
  end (below; a runner ignores keys it does not know).
- Requests: the runner creates `req/<id>/` (ids sort in submission order), writes the request's
  files into it, then renames `go.tmp` to `go`. The shim scans `req/*/go` and claims a request:
  - version 3: by creating `taken` exclusively (the shell's noclobber, O_EXCL), `go` left where
    it is; a runner that created `taken` first has cancelled the request before it started. So
    neither the claim nor the answer (`rc`, below) costs the shim a process: under a task's small
    CPU limit, each process started is milliseconds of the trial (`mv` twice was about 40%
    of the CPU of a request to run `true`);
  - versions 1 and 2: by renaming `go` to `taken`; a runner that renames `go` away first has
    cancelled the request before it started.
  Between scans:
  - versions 2 and 3 (an image with `mkfifo` and `setsid`): the shim makes the FIFO `wake`
    (mode 0600) and holds it open read-write, so a writer never blocks and no wake is lost while
    it scans; it blocks reading one line from it. The runner writes a line after each request (open
    non-blocking, never waiting); a ticker of the shim's writes one every second as well, in
    case a wake could not be written. So a request is taken at once, and an idle shim runs
    one `sleep` a second, not twenty.
  - version 1 (neither): the shim polls every 0.05 s for about 2 s after a request and every
    0.25 s when idle (every 1 s where `sleep` takes no fractions).
  `go` holds one line:
  - `run`: run the command in `cmd` with `/bin/sh -c`. Optional files: `env` (lines
    `export NAME='value'`, mode 0600; with a `user`, read and deleted by the shim, the values
    travelling in the command's environment as `_RS_ENV` to be applied after the user switch, so
    that `su` cannot reset them; without one, read by the shell that starts the command, which
    empties it: either way before the command starts), `user` (run as this user with
    su/runuser/setpriv), `cwd` (default:
    the container's working directory). stdin is /dev/null; stdout and stderr go to `out` and
    `err`. The command runs in a session of its own (`setsid`); its session id is written to
    `pid` as soon as it starts (in one write: an empty `pid` is not written yet). When the
    command's main process ends, its exit status (128+N after signal N; 126 when the cwd or the
    user cannot be entered) is written to `rc`.
  - `kill <id> <grace_ms>`: send TERM to every process of request `<id>`'s session (and, where
    there is no setsid, to its process tree), wait up to `grace_ms` for them to go, then KILL
    until none is left. `rc` 0 when none is left, 1 when some survived (their pids in `out`).
  - `killall <grace_ms>`: the same for every process in the container except the shim itself,
    its ancestors and its helper processes. Daemons that left their command's session die here.
    A shim of version 1 takes no request meanwhile (it kills in the foreground, so that its own
    polling, which it could not tell apart without setsid, is not among what it kills).
  - `exit <code>`: write `rc`, then the shim exits with `<code>` (the Pod then completes).
  Every request ends with `rc`, written last: version 3 in one write, so an empty `rc` is not
  written yet; versions 1 and 2 through a rename. So a non-empty `rc` means done; the runner
  then reads what it needs and deletes `req/<id>/`.
- Done (a shim whose ready file says `done=1`, whatever its version): once `rc` is there, the shim
  writes the request's `<id>` and a newline to `done` when that is a FIFO, opened read-write so
  that the open never blocks, with or without a reader. The runner makes that FIFO (mode 0600,
  the shim's), holds it open read-write while it awaits requests and reads the ids as they come,
  so it learns of an answer at once instead of polling for `rc`; it still looks for `rc` every
  half second, in case a line is lost (three answers found that way, and it polls again), and
  polls as before a shim that says no `done`. The runner's fd is its own: nothing the shim does
  waits for it.
- File transfer uses ordinary `run` requests: the runner copies into `xfer/<id>/` and the command
  copies with `cp -RP` to the destination, or the other way round.

The control directory must be visible to the runner and the shim only (the runner makes it 0700);
whoever can write `req/` can run commands as the shim's user. The environment container must not
share its process namespace with the runner: `killall` kills everything it can see.
"""

from __future__ import annotations

from importlib import resources

CONTROL_DIR = "/rollout"
"""Where the control directory (an emptyDir) is mounted, in the runner and the environment."""

PROTOCOL_VERSION = 3
"""The `version` the shim writes to `ready` when it can wait on its wake FIFO (1 when it polls:
an image without mkfifo or setsid)."""
WAKE_VERSION = 2
"""From this version on, the runner wakes the shim after each request (`WAKE_FIFO`)."""
CLAIM_BY_CREATE_VERSION = 3
"""From this version on, the shim claims a request by creating `taken` (and the runner cancels
one the same way), and writes `rc` in one write."""
PROTOCOL_VERSIONS = (1, 2, 3)
"""The versions this runner speaks (2: an older operator's shim); it refuses a shim of another."""

READY_FILE = "ready"
WAKE_FIFO = "wake"
DONE_FIFO = "done"
REQUESTS_DIR = "req"
TRANSFER_DIR = "xfer"

# Names of the files inside one request directory.
GO_FILE = "go"
GO_TEMP_FILE = "go.tmp"
TAKEN_FILE = "taken"
CANCELLED_FILE = "cancelled"
COMMAND_FILE = "cmd"
ENV_FILE = "env"
USER_FILE = "user"
CWD_FILE = "cwd"
STDOUT_FILE = "out"
STDERR_FILE = "err"
PID_FILE = "pid"
RC_FILE = "rc"

SHIM_NAME = "rollout-shim"
"""`$0` of the shim's shell, so that it is recognisable in `ps`."""

MAX_ARGUMENT_BYTES = 128 * 1024 - 1
"""Linux refuses one argument or environment string longer than this (MAX_ARG_STRLEN); the
command and the encoded env each travel as one."""

SHIM_TEXT: str = resources.files("rollout.api.wire").joinpath("shim.sh").read_text(encoding="utf-8")
"""The shim's source, passed inline to `/bin/sh -c`."""


def shim_command(control_dir: str = CONTROL_DIR) -> list[str]:
    """The environment container's command: the shim, serving the control directory given."""
    return ["/bin/sh", "-c", SHIM_TEXT, SHIM_NAME, control_dir]
