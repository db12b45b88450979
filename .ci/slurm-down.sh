#!/usr/bin/env bash
# Stop the one-node SLURM cluster started by .ci/slurm-up.sh.
#
# Stops only the PIDs recorded in $HEADGEOM_SLURM_STATE/pids (default /tmp/headgeom-slurm/pids)
# -- SLURM daemons first, then slurmdbd, then MariaDB and munge -- and removes their
# pidfiles (also the daemons' own pidfiles, so no stale ones are left for Debian's package
# scripts to trip over). Never kills by name. Idempotent. Packages and configs stay, so the
# next slurm-up.sh is fast.
set -uo pipefail

STATE="${HEADGEOM_SLURM_STATE:-/tmp/headgeom-slurm}"
T0=$SECONDS
say() { printf '[slurm-down %3ds] %s\n' "$((SECONDS - T0))" "$*"; }

if [ ! -d "$STATE/pids" ]; then
    say "nothing to stop (no $STATE/pids)"
    exit 0
fi

alive() {  # alive NAME PID: PID is running and is still that program
    [ -n "$2" ] && [ -d "/proc/$2" ] && [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "$1" ]
}

rc=0
# stop NAME...: SIGTERM all of them at once, wait up to 15 s, then SIGKILL leftovers.
stop() {
    local name pid names=() pids=()
    for name in "$@"; do
        [ -f "$STATE/pids/$name.pid" ] || continue
        pid=$(cat "$STATE/pids/$name.pid")
        if alive "$name" "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            names+=("$name"); pids+=("$pid")
        else
            say "$name (pid ${pid:-?}) was not running; removing stale pidfile"
            rm -f "$STATE/pids/$name.pid" "$STATE/run/$name.pid"
        fi
    done
    local k
    for k in "${!names[@]}"; do
        name=${names[$k]} pid=${pids[$k]}
        for _ in $(seq 1 60); do alive "$name" "$pid" || break; sleep 0.25; done
        if alive "$name" "$pid"; then
            say "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
        fi
        if alive "$name" "$pid"; then
            say "ERROR: could not stop $name (pid $pid)"
            rc=1
            continue
        fi
        say "stopped $name (pid $pid)"
        rm -f "$STATE/pids/$name.pid" "$STATE/run/$name.pid"
    done
}

stop slurmd slurmctld
stop slurmdbd
stop mariadbd munged
[ "$rc" -ne 0 ] || say "no daemons left running from $STATE"
exit "$rc"
