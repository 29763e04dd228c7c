# rollout shim: runs the runner's requests found in the control dir $1.
# POSIX sh (dash, bash --posix, busybox ash). Protocol: rollout/api/wire/shim.py.
C=${1:-/rollout}; Q=$C/req; W=$PWD; H=
mkdir -p "$Q" || exit 125
S=; command -v setsid >/dev/null 2>&1 && S=setsid
# Whether sleep takes fractions, asked of a sleep as short as it gets: the shim is not ready
# until it knows, and each trial waits for that.
if sleep 0.001 2>/dev/null; then P=0.05 D=50 L=0.25; else P=1 D=1000 L=1; fi
U=; for u in su runuser setpriv; do command -v $u >/dev/null 2>&1 && { U=$u; break; }; done
# The shim's own process group, and the shim with its ancestors: kill-all spares them.
{ read -r l </proc/$$/stat; } 2>/dev/null; set -- ${l##*) }; G=$3
X=" $$ "; p=$$
while [ "${p:-0}" -gt 1 ] && { read -r l </proc/$p/stat; } 2>/dev/null; do
  set -- ${l##*) }; p=$2; X="$X$p "
done
# The command's shell as another user: the env arrives in _RS_ENV (after any su), the command
# in $1.
I='e=$_RS_ENV; unset _RS_ENV; eval "$e"; exec /bin/sh -c "$1"'
# As the shim's user: it reads the env file $1 itself, then empties it, the command in $2; the
# shim starts no cat and no rm for it, and a shell of its own keeps the env's names (PATH, say)
# from reaching the shim's variables.
J='. "$1" || exit 126; { true >"$1"; } 2>/dev/null; exec /bin/sh -c "$2"'

# rc last: version 3 in one write (an empty rc is not written yet), version 1 by a rename (its
# presence means done). Then the request's id goes to the runner's FIFO $C/done, when it made
# one (opened read-write: the open never blocks, reader or not).
fin() {
  if [ $V = 3 ]; then echo "$2" >"$1/rc"
  else echo "$2" >"$1/rc.t" && mv "$1/rc.t" "$1/rc"
  fi
  [ -p "$C/done" ] && { echo "${1##*/}" 1<>"$C/done"; } 2>/dev/null
}

# Claim request $1 (its dir) and read its line into o a b; false when it is not ours to run.
# Version 3 creates `taken` exclusively (noclobber: O_EXCL; `true`, not `:`, whose failed
# redirection would end the shell), so neither claim nor answer starts a process; a runner that
# created it first cancelled the request. Version 1 renames `go` to `taken`.
claim() {
  if [ $V = 3 ]; then
    [ -e "$1/taken" ] && return 1
    set -C; { true >"$1/taken"; } 2>/dev/null; r=$?; set +C
    [ $r = 0 ] && read -r o a b <"$1/go"
  else
    mv "$1/go" "$1/taken" 2>/dev/null && read -r o a b <"$1/taken"
  fi
}

# The command from $d/cmd as $(cat) reads it, trailing newlines dropped; read by the shell
# itself unless it has more than 8 lines (no cat to start for the usual one-liner).
cmd_() {
  c=; l=; n=0
  while IFS= read -r l; do c="$c$l
"; n=$((n + 1)); [ $n -lt 9 ] || break; done <"$1/cmd"
  if [ $n -lt 9 ]; then c="$c$l"; else c=$(cat "$1/cmd"); fi
  while :; do case $c in *"
") c=${c%?} ;; *) break ;; esac; done
}

run_() {
  d=$1; w=$W; u=; e=; f=; cmd_ "$d"
  [ -f "$d/cwd" ] && IFS= read -r w <"$d/cwd"
  [ -f "$d/user" ] && read -r u <"$d/user"
  if [ ! -f "$d/env" ]; then :
  elif [ -n "$u" ]; then e=$(cat "$d/env"); rm -f "$d/env"
  else f=$d/env; case $f in /*) ;; *) f=$PWD/$f ;; esac  # before the cd below
  fi
  (
    cd "$w" || exit 126
    case $u$e$f in "") exec $S /bin/sh -c "$c" ;; esac  # nothing to apply: one shell less
    [ -z "$f" ] || exec $S /bin/sh -c "$J" sh "$f" "$c"
    _RS_ENV=$e; export _RS_ENV
    case $u:$U in
      :*) exec $S /bin/sh -c "$I" sh "$c" ;;
      *:su) exec $S su -s /bin/sh "$u" -c "$I" sh "$c" ;;
      *:runuser) exec $S runuser -u "$u" -- /bin/sh -c "$I" sh "$c" ;;
      *:setpriv) exec $S setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups \
        /bin/sh -c "$I" sh "$c" ;;
    esac
    echo "rollout-shim: no su, runuser or setpriv to run as $u" >&2; exit 126
  ) </dev/null >"$d/out" 2>"$d/err" &
  k=$!; echo $k >"$d/pid"  # one write: a reader finds it empty or whole
  wait $k; fin "$d" $?
}

# T := live processes to signal: K=all is every process but the shim's own; otherwise those of
# session or group K, K itself, their children, and whatever an earlier pick found (O).
pick() {
  T=" "; m=
  while [ "$m" != "$T" ]; do m=$T
    for f in /proc/[0-9]*/stat; do
      { read -r l <"$f"; } 2>/dev/null || continue
      p=${f#/proc/}; p=${p%/stat}
      case $T in *" $p "*) continue ;; esac
      set -- ${l##*) }
      case $1 in Z|X|x) continue ;; esac
      if [ "$K" = all ]; then
        case $X in *" $p "*) continue ;; esac
        [ -n "$S" ] && [ "$3" = "$G" ] && continue
        [ "$2" = $$ ] && case " $H " in *" $p "*) continue ;; esac
      elif [ "$4" != "$K" ] && [ "$3" != "$K" ] && [ "$p" != "$K" ]; then
        case "$O$T" in *" $2 "*|*" $p "*) ;; *) continue ;; esac
      fi
      T="$T$p "
    done
  done
  O="$O$T"
}

# TERM, up to $1 ms of grace, then KILL until nothing is left; prints the survivors.
zap() {
  O=" "; pick; [ "$T" = " " ] && return 0
  kill -TERM $T 2>/dev/null
  n=$(($1 / D))
  while [ $n -gt 0 ]; do sleep $P; pick; [ "$T" = " " ] && return 0; n=$((n - 1)); done
  n=0
  while [ $n -lt 100 ]; do
    kill -KILL $T 2>/dev/null; sleep $P; pick; [ "$T" = " " ] && return 0; n=$((n + 1))
  done
  echo $T; return 1
}

kill_() {
  d=$1; t=$Q/$2; n=$((5000 / D)); K=
  while [ -d "$t" ] && [ ! -s "$t/pid" ] && [ ! -f "$t/rc" ] && [ $n -gt 0 ]; do
    sleep $P; n=$((n - 1))
  done
  [ -s "$t/pid" ] && read -r K <"$t/pid"
  if [ -z "$K" ]; then fin "$d" 0; elif zap "$3" >"$d/out"; then fin "$d" 0; else fin "$d" 1; fi
}

all_() {
  read -r p l </proc/self/stat; X="$X$p " K=all  # spare this handler too
  if zap "$2" >"$1/out"; then fin "$1" 0; else fin "$1" 1; fi
}

# Version 3 blocks on the FIFO $C/wake, which the runner writes a line to after each request
# (held open read-write here, so no wake is lost while a scan runs); a ticker writes one every
# second in case one is. It needs setsid (the ticker and its sleeps stay in the shim's group,
# which kill-all spares). Without mkfifo or setsid: version 1, polling.
V=1 TK=
if [ -n "$S" ] && rm -f "$C/wake" && mkfifo -m 600 "$C/wake" 2>/dev/null \
  && command exec 3<>"$C/wake" 2>/dev/null
then V=3; (while sleep 1 && kill -0 $$ 2>/dev/null; do echo; done) >&3 & TK=$!; X="$X$TK "
fi
printf 'version=%s\npid=%s\ndir=%s\ncwd=%s\nsetsid=%s\nsu=%s\nuid=%s\ndone=1\n' \
  $V $$ "$C" "$W" "$S" "$U" "$(id -u 2>/dev/null)" >"$C/.ready" && mv "$C/.ready" "$C/ready" \
  || exit 125
echo "rollout-shim: ready (protocol $V), pid $$, control dir $C" >&2
i=0
while :; do
  for g in "$Q"/*/go; do
    [ -f "$g" ] || continue
    d=${g%/go}
    claim "$d" || continue
    i=0
    case $o in
      run) run_ "$d" 3<&- & H="$H $!" ;;
      kill) kill_ "$d" "$a" "$b" 3<&- & H="$H $!" ;;
      # Version 1 kills in the foreground: no polling sleep of the shim's (which kill-all, with no
      # setsid to tell the shim's group apart, would kill) runs meanwhile.
      killall) if [ $V = 3 ]; then all_ "$d" "$a" 3<&- & H="$H $!"; else all_ "$d" "$a"; fi ;;
      exit) fin "$d" 0; echo "rollout-shim: exit $a" >&2; [ -z "$TK" ] || kill $TK; exit "$a" ;;
      *) echo "rollout-shim: unknown request $o" >"$d/err"; fin "$d" 2 ;;
    esac
  done
  # Version 3: wait for the next wake. Version 1: poll fast for about 2 s after a request,
  # then gently.
  if [ $V = 3 ]; then read -r _ <&3
  else i=$((i + 1)); if [ $i -gt 40 ]; then sleep $L; else sleep $P; fi
  fi
done
