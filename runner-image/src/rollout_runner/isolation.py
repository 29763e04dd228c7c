"""The unprivileged agent user a job's `isolate_agents` asks for, made in any image.

The shim switches users with su, runuser or setpriv, and each of them needs the user in
/etc/passwd (a bare uid is refused), as do whoami, $HOME and most tools an agent runs. useradd and
adduser are missing from many images (and differ where present), so the runner writes the
entries itself with POSIX sh, as root (/etc/passwd, /etc/group, and /etc/shadow where the image
has one, for PAM's su): `rollout-agent`, uid and gid 10001, home /home/rollout-agent, shell
/bin/sh, no password (only root's su reaches it). An image that
already has a `rollout-agent` keeps its own. The agent's working directory (unless it is `/`) is
given to the user, because an agent must change the task's files; everything else root owns
stays closed to it, so an install script that needs root (apt-get) fails. An image whose /etc
cannot be written (a read-only root filesystem) fails the trial's setup, saying so.
"""

from __future__ import annotations

from rollout_runner.context import ISOLATED_AGENT_UID, ISOLATED_AGENT_USER

_NAME = ISOLATED_AGENT_USER
_HOME = f"/home/{ISOLATED_AGENT_USER}"


def create_agent_user_script() -> str:
    """The sh script that makes the agent user; run as root in the agent's working directory."""
    uid = ISOLATED_AGENT_UID
    return (
        "set -e\n"
        # Is there an entry named $2 in the file $1? (A last line without a newline counts.)
        'has() { while IFS=: read -r n r || [ -n "$n" ]; do [ "$n" != "$2" ] || return 0; '
        'done <"$1"; return 1; }\n'
        # Append the line $2 to the file $1, on a line of its own even when the file's last line
        # has no newline (it would swallow the entry).
        'add() { if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then echo >>"$1"; fi; '
        'echo "$2" >>"$1"; }\n'
        f"if ! has /etc/passwd {_NAME}; then\n"
        f"  add /etc/passwd '{_NAME}:x:{uid}:{uid}:rollout agent:{_HOME}:/bin/sh'\n"
        f"  has /etc/group {_NAME} 2>/dev/null || add /etc/group '{_NAME}:x:{uid}:'\n"
        # PAM's su refuses a user without a shadow entry where the image has a shadow file.
        f"  if [ -f /etc/shadow ] && ! has /etc/shadow {_NAME}; then\n"
        f"    add /etc/shadow '{_NAME}:*:19000:0:99999:7:::'\n"
        "  fi\n"
        f"  mkdir -p {_HOME}; chown {uid}:{uid} {_HOME}; chmod 0700 {_HOME}\n"
        "fi\n"
        f'd=$(pwd); if [ "$d" != / ]; then chown -R {_NAME} "$d"; fi\n'
    )
