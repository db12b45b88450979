#!/usr/bin/env bash
# Stop the one-node SLURM cluster started by .ci/slurm-up.sh.
#
# Stops only the PIDs recorded in $HEADGEOM_SLURM_STATE/pids (default /tmp/headgeom-slurm/pids),
# in reverse start order, and removes their pidfiles (also the daemons' own pidfiles, so that
# Debian's package scripts do not find stale ones). Never kills by name. Idempotent.
set -uo pipefail

STATE="${HEADGEOM_SLURM_STATE:-/tmp/headgeom-slurm}"
T0=$SECONDS
say() { printf '[slurm-down %3ds] %s\n' "$((SECONDS - T0))" "$*"; }

if [ ! -d "$STATE/pids" ]; then
    say "nothing to stop (no $STATE/pids)"
    exit 0
fi

rc=0
for name in slurmd slurmctld slurmdbd mariadbd munged; do
    f="$STATE/pids/$name.pid"
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 60); do            # up to 15 s for a clean shutdown
            [ -d "/proc/$pid" ] || break
            sleep 0.25
        done
        if [ -d "/proc/$pid" ]; then
            say "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
        fi
        if [ -d "/proc/$pid" ]; then
            say "ERROR: could not stop $name (pid $pid)"
            rc=1
            continue
        fi
        say "stopped $name (pid $pid)"
    else
        say "$name (pid ${pid:-?}) was not running; removing stale pidfile"
    fi
    rm -f "$f" "$STATE/run/$name.pid"
done
exit "$rc"
