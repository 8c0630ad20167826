#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost for CI and for trying the slurm profile:
# munged + mariadbd + slurmdbd + slurmctld + slurmd, one partition, fake GPUs as gres/gpu.
#
#   sudo tests/slurm/slurm-local.sh start    # install (Debian/Ubuntu, apt) + start; idempotent
#   tests/slurm/slurm-local.sh status        # what runs, node state
#   sudo tests/slurm/slurm-local.sh stop     # scancel everything, stop ONLY the daemons we started
#
# Exit status of `start`: 0 = cluster up; 3 = cannot be set up here (not root, no apt, not
# Debian-like, packages unavailable; the reason is the last line of stderr); other = a failure.
#
# Environment knobs (defaults):
#   SLURM_LOCAL_DIR=/tmp/slurm-local   state, spool, logs, pid files, fake GPU device links
#   SLURM_LOCAL_CPUS=8                 CPUs the node advertises (may exceed the real cores)
#   SLURM_LOCAL_MEM_MB=65536           memory the node advertises (SlurmdParameters=config_overrides)
#   SLURM_LOCAL_GPUS=1                 fake GPUs (links to /dev/null) offered as gres/gpu
#   SLURM_LOCAL_PARTITION=debug        the only (default) partition
#   SLURM_LOCAL_CLUSTER=localcluster
#   SLURM_LOCAL_TIMEOUT=60             seconds to wait for each daemon / the node
#   SLURM_LOCAL_APT_BUDGET=600         seconds for all apt-get calls together (lock wait, update,
#                                      install); over budget = exit 3 (skip), not a hang
#
# Configs go to /etc/slurm (Debian's compiled-in default, so sbatch/sacct need no SLURM_CONF).
# Daemons run in the foreground under setsid; their PIDs go to $SLURM_LOCAL_DIR/pids/<name>.pid and
# `stop` signals exactly those PIDs (after checking /proc/PID/comm), never anything by name.
# A munged or mariadbd that was already running is reused and never stopped.
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
CPUS=${SLURM_LOCAL_CPUS:-8}
MEM_MB=${SLURM_LOCAL_MEM_MB:-65536}
GPUS=${SLURM_LOCAL_GPUS:-1}
PARTITION=${SLURM_LOCAL_PARTITION:-debug}
CLUSTER=${SLURM_LOCAL_CLUSTER:-localcluster}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
APT_BUDGET=${SLURM_LOCAL_APT_BUDGET:-600}
APT_T0=0
HOST=$(hostname -s)
ETC=/etc/slurm
PKGS=(munge slurm-client slurmctld slurmd slurmdbd mariadb-server mariadb-client)
DB_SOCK=/run/mysqld/mysqld.sock
DB_PASS=benchmaker-local-slurm

log() { echo "[slurm-local] $*" >&2; }
cannot() { log "SKIP: $*"; exit 3; }

pidfile() { echo "$DIR/pids/$1.pid"; }

# alive NAME COMM: the recorded PID runs and is the expected program
alive() {
    local f pid
    f=$(pidfile "$1")
    [[ -s $f ]] || return 1
    pid=$(cat "$f")
    [[ -r /proc/$pid/comm ]] && [[ $(cat "/proc/$pid/comm") == "$2"* ]]
}

# launch NAME COMM CMD...: start CMD in its own session, record its PID
launch() {
    local name=$1 comm=$2
    shift 2
    if alive "$name" "$comm"; then
        return 0
    fi
    setsid "$@" >"$DIR/log/$name.out" 2>&1 </dev/null &
    echo $! >"$(pidfile "$name")"
    sleep 0.3
    alive "$name" "$comm" || { log "$name died at start:"; tail -20 "$DIR/log/$name.out" >&2; return 1; }
    log "started $name (pid $(cat "$(pidfile "$name")"))"
}

wait_for() { # wait_for DESCRIPTION CMD...
    local what=$1 i
    shift
    for ((i = 0; i < TIMEOUT * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    log "timed out waiting for $what"
    return 1
}

# apt_get ARGS...: apt-get bounded by what is left of the APT_BUDGET seconds; waits for a dpkg lock
# held by e.g. unattended-upgrades on a freshly booted CI machine instead of failing at once
apt_get() {
    local left=$((APT_BUDGET - (SECONDS - APT_T0)))
    ((left > 10)) || { log "apt time budget (${APT_BUDGET}s) spent"; return 124; }
    timeout --kill-after=10 "$left" env DEBIAN_FRONTEND=noninteractive apt-get -q -y \
        -o DPkg::Lock::Timeout=$((left < 180 ? left : 180)) -o Acquire::Retries=3 \
        -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 "$@" >>"$DIR/log/apt.out" 2>&1
}

install_packages() {
    local missing=() p
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]} (apt budget ${APT_BUDGET}s; log: $DIR/log/apt.out)"
    local made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then # keep the distribution's units from starting
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    APT_T0=$SECONDS
    : >"$DIR/log/apt.out"
    local rc=0
    # a fresh machine often has no package lists at all: update first then; otherwise try the
    # install as is and update only if it fails (stale lists)
    if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
        apt_get update || true
    fi
    apt_get install --no-install-recommends "${missing[@]}" ||
        { apt_get update && apt_get install --no-install-recommends "${missing[@]}"; } || rc=$?
    ((made_policy)) && rm -f /usr/sbin/policy-rc.d
    if ((rc)); then
        tail -5 "$DIR/log/apt.out" >&2
        if ((rc == 124 || rc == 137)); then
            cannot "installing ${missing[*]} took longer than ${APT_BUDGET}s (SLURM_LOCAL_APT_BUDGET; see $DIR/log/apt.out)"
        fi
        cannot "apt-get install ${missing[*]} failed (no package source reachable? see $DIR/log/apt.out)"
    fi
    log "packages installed in $((SECONDS - APT_T0))s"
}

# write_if_changed PATH MODE: stdin -> PATH; returns 0 if the content changed
write_if_changed() {
    local tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [[ -f $1 ]] && cmp -s "$tmp" "$1"; then
        rm -f "$tmp"
        return 1
    fi
    install -m "$2" "$tmp" "$1"
    rm -f "$tmp"
    return 0
}

write_configs() {
    local changed=0 gres_line="" gres_node=""
    mkdir -p "$ETC" "$DIR"/{spool/ctld,spool/d,log,pids,fakegpu}
    if ((GPUS > 0)); then
        local i
        for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$DIR/fakegpu/gpu$i"; done
        gres_node=" Gres=gpu:$GPUS"
        gres_line="NodeName=$HOST Name=gpu File=$DIR/fakegpu/gpu[0-$((GPUS - 1))]"
    fi
    write_if_changed "$ETC/slurm.conf" 644 <<EOF && changed=1
# written by benchmaker tests/slurm/slurm-local.sh
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/pids/slurmctld.pidfile
SlurmdPidFile=$DIR/pids/slurmd.pidfile
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
EnforcePartLimits=ALL
MinJobAge=300
MailProg=/bin/true
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB$gres_node State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    write_if_changed "$ETC/gres.conf" 644 <<<"$gres_line" && changed=1
    write_if_changed "$ETC/slurmdbd.conf" 600 <<EOF || true
# written by benchmaker tests/slurm/slurm-local.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/pids/slurmdbd.pidfile
EOF
    return $((changed ? 0 : 1))
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0 # a working munged (ours or the host's)
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key; else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    launch munged munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F --force
    wait_for "munged" bash -c 'munge -n </dev/null | unmunge'
}

sql() { mariadb --protocol=socket -S "$DB_SOCK" -uroot -N -e "$1"; }

start_db() {
    if ! sql "select 1" >/dev/null 2>&1; then
        mkdir -p /run/mysqld
        chown mysql:mysql /run/mysqld
        if [[ ! -d /var/lib/mysql/mysql ]]; then
            mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$DIR/log/mariadb-install.out" 2>&1
        fi
        launch mariadbd mariadbd /usr/sbin/mariadbd --user=mysql --skip-networking --socket="$DB_SOCK" \
            --pid-file=/run/mysqld/mysqld.pid --innodb-buffer-pool-size=64M
        wait_for "mariadbd" sql "select 1"
    fi
    sql "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    # fresh controller state + old accounting DB = duplicate job ids in sacct: start both afresh
    if [[ ! -e $DIR/spool/ctld/job_state ]]; then
        sql "DROP DATABASE IF EXISTS slurm_acct_db;"
    fi
}

node_state() { sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1; }

start() {
    [[ $(id -u) == 0 ]] || cannot "needs root (apt-get, munge key, /etc/slurm)"
    command -v apt-get >/dev/null && command -v dpkg-query >/dev/null || cannot "no apt-get/dpkg (not Debian/Ubuntu)"
    command -v setsid >/dev/null && command -v setpriv >/dev/null || cannot "setsid/setpriv missing (util-linux)"
    command -v timeout >/dev/null || cannot "timeout missing (coreutils)"
    mkdir -p "$DIR"/{log,pids}
    install_packages
    local restart=0
    write_configs && restart=1
    start_munge
    start_db
    launch slurmdbd slurmdbd /usr/sbin/slurmdbd -D
    wait_for "slurmdbd" sacctmgr -n list cluster
    sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
    if ((restart)) && { alive slurmctld slurmctld || alive slurmd slurmd; }; then
        log "configuration changed: restarting slurmctld and slurmd"
        stop_one slurmd slurmd
        stop_one slurmctld slurmctld
    fi
    launch slurmctld slurmctld /usr/sbin/slurmctld -D -i
    wait_for "slurmctld" scontrol ping
    launch slurmd slurmd /usr/sbin/slurmd -D -N "$HOST"
    local i st
    for ((i = 0; i < TIMEOUT * 2; i++)); do
        st=$(node_state)
        case $st in
        idle* | mixed* | allocated*) break ;;
        drain* | down* | inval* | fail*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    st=$(node_state)
    [[ $st == idle* || $st == mixed* || $st == allocated* ]] || {
        log "node $HOST is '$st'"
        scontrol show node "$HOST" >&2 || true
        tail -20 "$DIR/log/slurmd.log" "$DIR/log/slurmctld.log" >&2 || true
        return 1
    }
    wait_for "cluster registration in slurmdbd" bash -c "sacctmgr -n -P list cluster format=cluster,controlhost | grep -q '^$CLUSTER|.'"
    timeout "$TIMEOUT" srun -N1 -n1 -t 1 true
    if ((GPUS > 0)); then
        timeout "$TIMEOUT" srun -N1 -n1 -t 1 --gpus=1 true
    fi
    log "up: cluster $CLUSTER, node $HOST ($CPUS cpus, $MEM_MB MB, $GPUS gpu), partition $PARTITION"
}

stop_one() { # stop_one NAME COMM: SIGTERM our recorded PID, wait, SIGKILL
    local name=$1 comm=$2 pid i
    alive "$name" "$comm" || { rm -f "$(pidfile "$name")"; return 0; }
    pid=$(cat "$(pidfile "$name")")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        alive "$name" "$comm" || break
        sleep 0.2
    done
    if alive "$name" "$comm"; then
        log "$name ($pid) ignored SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$(pidfile "$name")"
    log "stopped $name ($pid)"
}

stop() {
    if alive slurmctld slurmctld; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        [[ -z $jobs ]] || { log "cancelling jobs: $(echo $jobs)"; scancel $jobs 2>/dev/null || true; sleep 1; }
    fi
    stop_one slurmd slurmd
    stop_one slurmctld slurmctld
    stop_one slurmdbd slurmdbd
    stop_one mariadbd mariadbd
    stop_one munged munged
}

status() {
    local n
    for n in munged:munged mariadbd:mariadbd slurmdbd:slurmdbd slurmctld:slurmctld slurmd:slurmd; do
        if alive "${n%%:*}" "${n##*:}"; then echo "${n%%:*}: running (pid $(cat "$(pidfile "${n%%:*}")"))"; else echo "${n%%:*}: not started by us"; fi
    done
    command -v sinfo >/dev/null && sinfo 2>/dev/null || true
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
