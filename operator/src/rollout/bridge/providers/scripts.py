"""The shell side of a bridge sandbox's commands, shared by the docker, modal, e2b and
daytona sandboxes.

No provider's API can kill an exec's whole process tree, or wait for one with a timeout, so a
sandbox runs each command under a wrapper of its own (`RUN_WRAPPER`, or a provider's variant of
it) that starts the command in a session of its own and keeps, in a run directory of
`PRIVATE_DIR`, the session's id, the command's output and its exit status, as a trial Pod's
shim does in its control directory. When the command's time is up a second exec, as root, ends
the session: every kill script is `kill_script` of a selection (which processes to end), so they
all escalate alike, TERM first and KILL after a grace, and report the processes that survived.

Here too is what every sandbox checks of a run before it starts one (`check_run`): the same
rules as a trial Pod's shim.
"""

from __future__ import annotations

from collections.abc import Mapping

from rollout_runner.environment import EnvironmentFailure
from rollout_runner.shim_requests import encode_env
from rollout_runner.transfer import USER_NAME

PRIVATE_DIR = "/.rollout-bridge"
"""The bridge's directory in a sandbox: each run's pid and output files (and archives)."""
KILL_GRACE_SEC = 5.0
"""How long a killed command gets between TERM and KILL."""
RESPONSE_TIMEOUT_SEC = 30.0
"""How long a killed command (or every process, for `kill_all`) may take to end beyond the
grace."""
IDS_SCRIPT = "id -u; id -g"
"""Prints the uid and gid of whoever runs it (`parse_ids` reads them)."""

# $1: the run's directory, $2: the working directory (empty: the sandbox's), $3: the command.
# The command runs in a session of its own (setsid, where there is one) that KILL_SCRIPT ends;
# rc, written last by a rename, holds its exit status: 128+N when signal N killed it.
RUN_WRAPPER = """r=$1
mkdir -m 700 "$r" || exit 125
fin() { echo $1 >"$r/rc.t" && mv -f "$r/rc.t" "$r/rc"; exit $1; }
if [ -n "$2" ]; then cd "$2" 2>>"$r/err" || fin 126; fi
S=; command -v setsid >/dev/null 2>&1 && S=setsid
$S /bin/sh -c "$3" </dev/null >>"$r/out" 2>>"$r/err" &
k=$!; echo $k >"$r/pid"
wait $k; fin $?"""

# Sets P, the pause between two looks at /proc, and D, that pause in ms: a fraction of a
# second where sleep takes one (busybox's and GNU's do), else a second; asked of a 1 ms sleep,
# as every kill pays for it.
_PACE = "if sleep 0.001 2>/dev/null; then P=0.05 D=50; else P=1 D=1000; fi"

# With G (the grace in ms) set and `pick` and `over` defined: TERM to what `pick` picks (T,
# " pid pid "), its rounds until `over` or the grace ends, then up to 100 rounds of KILL; prints
# the survivors (U, as `over` leaves them) when KILL did not end them all.
_ESCALATION = """pick; [ "$T" = " " ] && exit 0
S=$T; kill -15 $T 2>/dev/null
n=$((G / D))
while [ $n -gt 0 ]; do sleep $P; pick; over && exit 0; n=$((n - 1)); done
n=0
while [ $n -lt 100 ]; do
  S=$T; kill -9 $T 2>/dev/null; sleep $P; pick; over && exit 0; n=$((n + 1))
done
echo $U; exit 1"""


def kill_script(selection: str) -> str:
    """A kill script: `selection` sets G (the grace in ms between TERM and KILL) and defines
    `pick` (T: the processes to signal now, as " pid pid ", zombies left out) and `over` (true
    once no process that matters lives on; U: the survivors among those signalled, S); the
    script signals them, TERM first and KILL after the grace, and exits 0 when they are gone,
    else prints the survivors and exits 1."""
    return f"{_PACE}\n{selection}\n{_ESCALATION}"


# $1: `all` (every process but those `spared` names) or a run's directory (its session or group,
# its first process and their children); $2: the grace in ms between TERM and KILL. Done when
# no process it signalled lives on (for a run: when none of the run is left); prints the
# survivors of 100 rounds of KILL otherwise. A process born since (PID 1's next sleep) is none.
_RUN_SELECTION_HEAD = """G=$2 K=all
if [ "$1" != all ]; then
  n=$((5000 / D)); K=
  while [ ! -s "$1/pid" ] && [ $n -gt 0 ]; do sleep $P; n=$((n - 1)); done
  [ -s "$1/pid" ] && read -r K <"$1/pid"
  case $K in ""|*[!0-9]*) exit 0 ;; esac
fi
pick() {
  T=" "; m=
  while [ "$m" != "$T" ]; do m=$T
    for f in /proc/[0-9]*/stat; do
      { read -r l <"$f"; } 2>/dev/null || continue
      p=${f#/proc/}; p=${p%/stat}
      case $T in *" $p "*) continue ;; esac
      set -- ${l##*) }
      case $1 in Z|X|x) continue ;; esac
      if [ $K = all ]; then
"""
_RUN_SELECTION_TAIL = """
      elif [ "$4" != $K ] && [ "$3" != $K ] && [ $p != $K ]; then
        case $T in *" $2 "*) ;; *) continue ;; esac
      fi
      T="$T$p "
    done
  done
}
over() {
  U=; for p in $S; do case $T in *" $p "*) U="$U $p" ;; esac; done
  if [ $K = all ]; then [ -z "$U" ]; else [ "$T" = " " ]; fi
}"""


def run_kill_script(spared: str, setup: str = "") -> str:
    """A kill script of `all` or of a run (`KILL_SCRIPT`'s arguments) that spares, of `all`,
    what `spared` passes over: shell lines run in `pick` for each process p (its /proc stat
    fields from $1, its parent's pid in $2) that `continue` past a process to leave alive.
    `setup` runs first, with the script's arguments, which it must leave as they were."""
    spare = "\n".join(f"        {line}" for line in spared.splitlines())
    return kill_script(f"{setup}{_RUN_SELECTION_HEAD}{spare}{_RUN_SELECTION_TAIL}")


KILL_SCRIPT = run_kill_script("if [ $p = 1 ] || [ $p = $$ ]; then continue; fi")
"""Spares, of `all`, PID 1 and itself."""


def check_run(command: str, env: Mapping[str, str], user: str | None, cwd: str | None) -> str:
    """What `Environment.run` takes (a command without NUL, a user name, a non-empty cwd, env
    names and values as a trial Pod's shim checks them): ValueError otherwise. Returns `env`
    encoded as the shim's `env` request file (`export NAME='value'` lines)."""
    if "\0" in command:
        raise ValueError("command must hold no NUL")
    if user is not None and not USER_NAME.match(user):
        raise ValueError(f"user must be a user name, got {user!r}")
    if cwd is not None and ("\0" in cwd or not cwd):
        raise ValueError(f"cwd must be a non-empty path, got {cwd!r}")
    return encode_env(env)


def cwd_argument(cwd: str | None) -> str:
    """A wrapper's working directory argument: empty for the sandbox's own; "./" keeps a
    relative one from meaning `cd -` or searching CDPATH."""
    if cwd is None:
        return ""
    return cwd if cwd.startswith("/") else f"./{cwd}"


def parse_ids(out: bytes) -> tuple[int, int] | None:
    """The uid and gid `IDS_SCRIPT` printed; None when it printed no such thing (no `id`)."""
    words = out.split()
    if len(words) != 2 or not all(word.isdigit() for word in words):
        return None
    return int(words[0]), int(words[1])


def check_survivors(out: bytes) -> None:
    """EnvironmentFailure naming the processes a kill script of `kill_all` printed as having
    survived SIGKILL; nothing when it printed none."""
    if out.strip():
        raise EnvironmentFailure(
            f"processes survived SIGKILL in the environment: {out.decode().split()}"
        )
