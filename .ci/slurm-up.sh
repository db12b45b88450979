#!/usr/bin/env bash
# Start a real one-node SLURM cluster (with slurmdbd accounting) on this machine.
#
# Idempotent: installs what is missing (apt, --no-install-recommends), (re)writes the configs,
# starts only the daemons that are not already running from an earlier call, and waits until
# `sinfo` shows the node idle and `sacct` answers. Must run as root (CI runs as root).
#
#   .ci/slurm-up.sh            # bring the cluster up (or check that it is up)
#   .ci/slurm-down.sh          # stop exactly the daemons this script started
#
# Daemons run in the foreground under setsid (this image's policy-rc.d stops services
# from starting at install time, and there is no init system); their PIDs are recorded in
# $HEADGEOM_SLURM_STATE/pids (default /tmp/headgeom-slurm/pids), their output goes to
# $HEADGEOM_SLURM_STATE/log. Configs go to /etc/slurm, where sbatch/sacct look by default.
#
# Environment:
#   HEADGEOM_SLURM_STATE    state dir (default /tmp/headgeom-slurm)
#   HEADGEOM_SLURM_CLUSTER  cluster name (default headgeom)
#   HEADGEOM_SLURM_ACCOUNT  account registered for the calling user (default headgeom)
#   HEADGEOM_SLURM_WAIT     seconds to wait for each daemon (default 90)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TEMPLATES="$HERE/slurm"
STATE="${HEADGEOM_SLURM_STATE:-/tmp/headgeom-slurm}"
CLUSTER="${HEADGEOM_SLURM_CLUSTER:-headgeom}"
ACCOUNT="${HEADGEOM_SLURM_ACCOUNT:-headgeom}"
WAIT="${HEADGEOM_SLURM_WAIT:-90}"
ETC=/etc/slurm
MYSQL_SOCK=/run/mysqld/mysqld.sock
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
T0=$SECONDS

export DEBIAN_FRONTEND=noninteractive LC_ALL=C

say() { printf '[slurm-up %3ds] %s\n' "$((SECONDS - T0))" "$*"; }

# Print a clear failure message, the tail of every daemon log, and exit non-zero.
die() {
    printf '[slurm-up %3ds] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2
    if [ -d "$STATE/log" ]; then
        for f in "$STATE"/log/*.log; do
            [ -s "$f" ] || continue
            printf -- '----- last lines of %s -----\n' "$f" >&2
            tail -n 25 "$f" >&2
        done
    fi
    exit 1
}
trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages and starts system daemons)"
if [ ! -f "$TEMPLATES/slurm.conf.in" ] || [ ! -f "$TEMPLATES/slurmdbd.conf.in" ]; then
    die "config templates missing in $TEMPLATES"
fi
mkdir -p "$STATE"/{pids,log,run,spool/slurmd,spool/slurmctld}
chmod 755 "$STATE"
chmod 1777 "$STATE/run"   # daemons that drop to slurm/mysql write their pidfiles here

# ---------------------------------------------------------------- packages
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null || die "apt-get not found; install ${missing[*]} yourself"
    say "installing ${missing[*]} (apt-get, --no-install-recommends)"
    t=$SECONDS
    apt-get update -qq >"$STATE/log/apt.log" 2>&1 || { cat "$STATE/log/apt.log" >&2; die "apt-get update failed"; }
    if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$STATE/log/apt.log" 2>&1 </dev/null; then
        die "apt-get install ${missing[*]} failed (full log: $STATE/log/apt.log)"
    fi
    say "packages installed in $((SECONDS - t))s"
else
    say "packages present: ${PACKAGES[*]}"
fi
for c in munged munge unmunge mariadbd mariadb mariadb-admin slurmdbd slurmctld slurmd sinfo sacct sacctmgr scontrol setpriv setsid; do
    command -v "$c" >/dev/null || die "required command '$c' not found after installation"
done
for u in slurm munge mysql; do
    id "$u" >/dev/null 2>&1 || die "system user '$u' missing (package postinst should create it)"
done

# ---------------------------------------------------------------- pid bookkeeping
chown slurm:slurm "$STATE/spool/slurmctld"

# ours NAME -> 0 if the PID we recorded for NAME is alive and still that program.
ours() {
    local f="$STATE/pids/$1.pid" pid
    [ -s "$f" ] || return 1
    pid=$(cat "$f")
    [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}
# foreign NAME -> print PIDs of NAME processes that we did not start.
foreign() {
    local mine=""
    ours "$1" && mine=$(cat "$STATE/pids/$1.pid")
    pgrep -x "$1" | grep -vx "${mine:-none}" || true
}
# start NAME CMD... : run CMD in the foreground in its own session, record its PID.
start() {
    local name=$1; shift
    local others
    others=$(foreign "$name")
    [ -z "$others" ] || die "a $name not started by this script is running (pid $others); stop it first"
    # Not a process-group leader (no job control in scripts), so setsid execs in place
    # and $! is the daemon itself.
    setsid "$@" >>"$STATE/log/$name.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$STATE/pids/$name.pid"
    # $! is the forked shell until it has exec'd setsid (and setpriv) into the daemon:
    # wait for that, so that `ours` (which checks the program name) is reliable after this.
    for _ in $(seq 1 100); do
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && break
        [ -d "/proc/$pid" ] || die "$name exited right after start (log: $STATE/log/$name.log)"
        sleep 0.05
    done
    ours "$name" || die "pid $pid did not become $name (log: $STATE/log/$name.log)"
    say "started $name (pid $pid)"
}
# wait_for WHAT CMD... : poll CMD until it succeeds, or die after $WAIT seconds.
# Between attempts checks that the daemon NAME (if given via WATCH) is still alive.
wait_for() {
    local what=$1 watch=$2; shift 2
    local deadline=$((SECONDS + WAIT))
    until "$@" >/dev/null 2>&1; do
        if [ -n "$watch" ] && ! ours "$watch"; then
            die "$watch exited while waiting for $what (log: $STATE/log/$watch.log)"
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${WAIT}s waiting for $what"
        sleep 0.5
    done
}

# ---------------------------------------------------------------- configs
node_line=$(slurmd -C | head -n 1)
case "$node_line" in NodeName=*) ;; *) die "unexpected 'slurmd -C' output: $node_line" ;; esac
node_name=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node_line")
host=$(hostname -s)
render() {
    sed -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@HOST@|$host|g" -e "s|@STATE@|$STATE|g" \
        -e "s|@NODELINE@|$node_line|g" -e "s|@NODENAME@|$node_name|g" "$1"
}
mkdir -p "$ETC"
changed=0
new=$(render "$TEMPLATES/slurm.conf.in")
if [ ! -f "$ETC/slurm.conf" ] || [ "$new" != "$(cat "$ETC/slurm.conf")" ]; then
    printf '%s\n' "$new" >"$ETC/slurm.conf"; changed=1
fi
chmod 644 "$ETC/slurm.conf"
new=$(render "$TEMPLATES/slurmdbd.conf.in")
if [ ! -f "$ETC/slurmdbd.conf" ] || [ "$new" != "$(cat "$ETC/slurmdbd.conf")" ]; then
    printf '%s\n' "$new" >"$ETC/slurmdbd.conf"; changed=1
fi
chown slurm:slurm "$ETC/slurmdbd.conf"
chmod 600 "$ETC/slurmdbd.conf"
say "configs in $ETC ($node_line)"
if [ "$changed" = 1 ]; then
    # A running slurm daemon would keep the old config: restart the ones we started.
    for d in slurmd slurmctld slurmdbd; do
        if ours "$d"; then
            say "config changed: stopping our $d to restart it"
            kill "$(cat "$STATE/pids/$d.pid")" || true
            for _ in $(seq 1 40); do ours "$d" || break; sleep 0.25; done
            rm -f "$STATE/pids/$d.pid"
        fi
    done
fi

# ---------------------------------------------------------------- munge
if [ ! -s /etc/munge/munge.key ]; then
    say "creating munge key"
    setpriv --reuid=munge --regid=munge --init-groups mungekey --create --keyfile=/etc/munge/munge.key
fi
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
if ours munged; then
    say "munged already running (pid $(cat "$STATE/pids/munged.pid"))"
elif [ -n "$(foreign munged)" ] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "using a munged that is already running (not ours: pid $(foreign munged))"
else
    start munged setpriv --reuid=munge --regid=munge --init-groups munged -F
fi
wait_for "munge credentials" "" bash -c 'munge -n | unmunge'

# ---------------------------------------------------------------- mariadb
if [ ! -d /var/lib/mysql/mysql ]; then
    say "initialising MariaDB data dir"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
        >>"$STATE/log/mariadb-install-db.log" 2>&1 || die "mariadb-install-db failed"
fi
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
if ours mariadbd; then
    say "mariadbd already running (pid $(cat "$STATE/pids/mariadbd.pid"))"
elif [ -n "$(foreign mariadbd)" ] && mariadb-admin --socket="$MYSQL_SOCK" ping >/dev/null 2>&1; then
    say "using a mariadbd that is already running (not ours: pid $(foreign mariadbd))"
else
    start mariadbd mariadbd --user=mysql --datadir=/var/lib/mysql --socket="$MYSQL_SOCK" \
        --skip-networking --skip-log-bin --pid-file="$STATE/run/mariadbd.pid" \
        --innodb-buffer-pool-size=1G --innodb-lock-wait-timeout=900
fi
wait_for "MariaDB on $MYSQL_SOCK" mariadbd mariadb-admin --socket="$MYSQL_SOCK" ping
# The OS user slurm logs in over the unix socket (unix_socket auth, no password).
mariadb --socket="$MYSQL_SOCK" -e "
    CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
    GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'localhost';" \
    || die "could not create the slurm database user in MariaDB"

# ---------------------------------------------------------------- slurmdbd
if ours slurmdbd; then
    say "slurmdbd already running (pid $(cat "$STATE/pids/slurmdbd.pid"))"
else
    start slurmdbd slurmdbd -D
fi
wait_for "slurmdbd (sacctmgr list cluster)" slurmdbd sacctmgr -n list cluster

# Register cluster, account and the calling user (sacctmgr -i: no prompt, no stdin needed).
if [ -z "$(sacctmgr -n -P list cluster "$CLUSTER" format=cluster)" ]; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
    say "registered cluster $CLUSTER"
fi
if [ -z "$(sacctmgr -n -P list account "$ACCOUNT" format=account)" ]; then
    sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" \
        description="headgeom CI" organization=headgeom >/dev/null
    say "registered account $ACCOUNT"
fi
for u in root ${SUDO_USER:-}; do
    if [ -z "$(sacctmgr -n -P list assoc user="$u" account="$ACCOUNT" cluster="$CLUSTER" format=user)" ]; then
        sacctmgr -i add user "$u" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null
        say "added user $u to account $ACCOUNT"
    fi
done

# ---------------------------------------------------------------- slurmctld + slurmd
if ours slurmctld; then
    say "slurmctld already running (pid $(cat "$STATE/pids/slurmctld.pid"))"
else
    # -i: ignore state from an earlier run (jobs and nodes start fresh).
    start slurmctld slurmctld -D -i
fi
wait_for "slurmctld (scontrol ping)" slurmctld bash -c 'scontrol ping | grep -q UP'
if ours slurmd; then
    say "slurmd already running (pid $(cat "$STATE/pids/slurmd.pid"))"
else
    start slurmd slurmd -D
fi

node_idle() {
    local st
    st=$(sinfo -h -n "$node_name" -o '%T' 2>/dev/null | head -n 1)
    case "$st" in
        idle|mixed|allocated) return 0 ;;
        drain*|down*)
            # ReturnToService=2 should make this rare; resume once it registered.
            scontrol update nodename="$node_name" state=resume >/dev/null 2>&1 || true
            return 1 ;;
        *) return 1 ;;
    esac
}
wait_for "node $node_name to become idle (sinfo)" slurmd node_idle
wait_for "sacct" slurmctld sacct -n -X -S now-1hours
say "cluster $CLUSTER up: $(sinfo -h -o '%P %a %D %T %c CPUs %m MB') (state: $STATE)"
