# --- rollout built-in agent library ---------------------------------------------------------------
# Put before every built-in agent's install and execute script (`rollout agents show NAME` prints
# the whole script). Written for bash on Debian/Ubuntu (apt-get) and Alpine (apk) images; it never
# assumes root: tools go under $HOME/.local, whose bin/ comes first on PATH.

export PATH="$HOME/.local/bin:$PATH"
AGENT_LOGS=/logs/agent
mkdir -p "$HOME/.local/bin" "$AGENT_LOGS" 2>/dev/null || true

rollout_log() { printf '[rollout %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
rollout_fail() { rollout_log "$@"; exit 1; }

# Whether the program $1 is on PATH: an executable regular file (bash's `command -v` also
# names a path that cannot run).
rollout_has() {
  local found
  found=$(command -v "$1" 2>/dev/null) || return 1
  [ -f "$found" ] && [ -x "$found" ]
}

# debian | alpine | unknown, by the package manager the image has.
rollout_os() {
  if rollout_has apt-get; then echo debian
  elif rollout_has apk; then echo alpine
  else echo unknown; fi
}

_rollout_os_name() {
  (. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-$ID}") || echo "an image without /etc/os-release"
}

# Installs OS packages (Debian names; mapped where Alpine's differ), as root or with sudo.
rollout_packages() {
  local os sudo="" pkgs=() p
  os=$(rollout_os)
  if [ "$(id -u)" != 0 ]; then
    rollout_has sudo || rollout_fail "installing $* needs root (or sudo); the agent runs as $(id -un)"
    sudo="sudo"
  fi
  case "$os" in
    debian)
      rollout_log "apt-get install $*"
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 ;;
    alpine)
      for p in "$@"; do
        case "$p" in
          xz-utils) pkgs+=(xz) ;;
          python3-venv) pkgs+=(python3) ;;
          python3-pip) pkgs+=(py3-pip) ;;
          build-essential) pkgs+=(build-base) ;;
          ca-certificates|curl|git|tar|bzip2|unzip|bash|python3|nodejs|npm|jq) pkgs+=("$p") ;;
          *) pkgs+=("$p") ;;
        esac
      done
      rollout_log "apk add ${pkgs[*]}"
      $sudo apk add --no-cache "${pkgs[@]}" >&2 ;;
    *)
      rollout_fail "this agent's install needs a Debian/Ubuntu (apt-get) or Alpine (apk) based image to install $*; this one is $(_rollout_os_name) and has neither" ;;
  esac
}

# Installs the package of each command that is missing.
rollout_need() {
  local missing=() cmd
  for cmd in "$@"; do
    rollout_has "$cmd" && continue
    case "$cmd" in
      xz) missing+=(xz-utils) ;;
      pip3) missing+=(python3-pip) ;;
      *) missing+=("$cmd") ;;
    esac
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    case " ${missing[*]} " in *" curl "*) missing+=(ca-certificates) ;; esac
    rollout_packages "${missing[@]}"
  fi
}

_rollout_node_major() {
  rollout_has node || return 0
  node --version 2>/dev/null | sed -n 's/^v\{0,1\}\([0-9][0-9]*\).*/\1/p' || true
}

# node >= $1 and npm on PATH: one already there that is new enough, Alpine's packages, or the
# official nodejs.org build ($ROLLOUT_NODE_VERSION) under $HOME/.local.
rollout_node() {
  local min=$1 major arch version=${ROLLOUT_NODE_VERSION:-22.12.0}
  major=$(_rollout_node_major)
  if [ -n "$major" ] && [ "$major" -ge "$min" ] && rollout_has npm; then
    rollout_log "node $(node --version) is here"
    return 0
  fi
  case "$(rollout_os)" in
    alpine) rollout_packages nodejs npm ;;
    debian)
      rollout_need curl tar xz
      case "$(uname -m)" in
        x86_64|amd64) arch=x64 ;;
        aarch64|arm64) arch=arm64 ;;
        *) rollout_fail "no official node build for $(uname -m)" ;;
      esac
      rollout_log "installing node v$version ($arch) under $HOME/.local"
      curl -fsSL --retry 5 --retry-delay 2 -o /tmp/node.tar.xz \
        "https://nodejs.org/dist/v$version/node-v$version-linux-$arch.tar.xz"
      mkdir -p "$HOME/.local/lib/node"
      tar -xJf /tmp/node.tar.xz -C "$HOME/.local/lib/node" --strip-components=1
      rm -f /tmp/node.tar.xz
      ln -sf "$HOME/.local/lib/node/bin/node" "$HOME/.local/lib/node/bin/npm" \
        "$HOME/.local/lib/node/bin/npx" "$HOME/.local/bin/" ;;
    *) rollout_fail "this agent needs node >= $min and npm; this image ($(_rollout_os_name)) has neither them nor apt-get or apk to install them" ;;
  esac
  major=$(_rollout_node_major)
  if [ -z "$major" ] || [ "$major" -lt "$min" ]; then
    rollout_fail "this agent needs node >= $min; the image's package manager gave ${major:-none}"
  fi
}

# npm install -g PKG@VERSION under $HOME/.local (no root needed).
rollout_npm_install() {
  rollout_log "npm install -g $1@$2"
  NPM_CONFIG_PREFIX="$HOME/.local" npm install -g --no-fund --no-audit --loglevel=error "$1@$2" >&2
}

# A Python tool in a venv of its own: pip install PKG==VERSION; its commands linked into
# $HOME/.local/bin. Needs python3 >= 3.10 (installs python3 and venv where they are missing).
rollout_python_tool() {
  local pkg=$1 version=$2 venv="$HOME/.local/share/rollout-agents/$1" bin
  if ! rollout_has python3 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    rollout_packages python3 python3-venv python3-pip
  fi
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || rollout_fail "$pkg needs python >= 3.10; this image has $(python3 --version 2>&1)"
  rollout_log "pip install $pkg==$version"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pkg==$version" >&2
  for bin in "$venv"/bin/*; do
    case "$(basename "$bin")" in python*|pip*|activate*|Activate*) continue ;; esac
    ln -sf "$bin" "$HOME/.local/bin/"
  done
}

# /logs/agent/usage.json, which the runner records in result.json's rollout.usage. Never fails
# (under set -u a missing argument would end the script, and with it the agent's exit status).
rollout_usage() {
  local cost="" input=${1:-} output=${2:-}
  case "$input" in ''|*[!0-9]*) input="" ;; esac
  case "$output" in ''|*[!0-9]*) output="" ;; esac
  if [ -z "$input" ] || [ -z "$output" ]; then
    rollout_log "usage not recorded: tokens '${1:-}' '${2:-}' are not counts"
    return 0
  fi
  case "${3:-}" in
    "") ;;
    *[!0-9.]*|*.*.*|.*|*.) rollout_log "cost '$3' is not a number: left out" ;;
    *) cost=", \"cost_usd\": $3" ;;
  esac
  printf '{"input_tokens": %s, "output_tokens": %s%s}\n' "$input" "$output" "$cost" \
    > "$AGENT_LOGS/usage.json" || rollout_log "usage not recorded: $AGENT_LOGS is not writable"
}
# --- end of the library ---------------------------------------------------------------------------
