#!/usr/bin/env bash
# A real single-node Slurm on this machine, for the test suite and CI, set up as LUMI is
# where it matters to hplt-shard (issue #22):
#
#   bash tests/slurm/cluster.sh start    configure and start munged, MariaDB, slurmdbd,
#                                        slurmctld, slurmd; wait until the node is idle
#                                        (idempotent: a second start changes nothing)
#   bash tests/slurm/cluster.sh stop     stop all five daemons (those this script starts)
#   bash tests/slurm/cluster.sh status   print sinfo/squeue; non-zero if not up
#   bash tests/slurm/cluster.sh purge    stop, then remove everything start wrote (state, database,
#                                        password, the configuration files it wrote): the next
#                                        start is the first one on a fresh machine
#
# What it sets, and why:
#   - Accounting: slurmdbd backed by a private MariaDB (its own datadir, socket and port 6820
#     on 127.0.0.1; nothing of a system MariaDB is touched), so `sacct` and `sacctmgr` answer
#     as on LUMI and tests can read job states, reasons and MaxRSS from sacct.
#   - Enforced memory: task/cgroup with ConstrainRAMSpace=yes (cgroup v1, no swap allowed),
#     so a task past its --mem is killed and ends OUT_OF_MEMORY, as on LUMI. proctrack/cgroup
#     and jobacct_gather/cgroup go with it (sacct MaxRSS).
#   - The submit cap: AccountingStorageEnforce=associations,limits. The test user (the one
#     running this script, normally root) gets two associations: account `tests` (its default,
#     MaxSubmitJobs=200: out of the way of ordinary tests) and account `capped`
#     (MaxSubmitJobs=$HPLT_SHARD_SLURM_CAP, default 5): a test that passes --account=capped
#     meets sbatch's AssocMaxSubmitJobLimit for real. The limit is on the user's association
#     so `sacctmgr show assoc user=$USER format=account,maxsubmit` reads it, as the submitter does.
#   - MaxArraySize=33: small, so the layout's array chunking is exercised by ordinary runs
#     (LUMI's is larger, but any cap must be respected).
#   - MinJobAge=300 (LUMI's): finished jobs stay in squeue/scontrol for 5 minutes.
#
# Needs root and Debian's packages slurm-wlm, slurmdbd, munge and mariadb-server. Settings:
#   HPLT_SHARD_SLURM_STATE    state, spool, pid, database and log dir (default /var/lib/hplt-shard-slurm)
#   HPLT_SHARD_SLURM_TIMEOUT  seconds `start` waits for an idle node (default 60)
#   HPLT_SHARD_SLURM_CAP      MaxSubmitJobs of the `capped` account (default 5; applied at every start)
#   HPLT_SHARD_SLURM_FORCE=1  overwrite an /etc/slurm/slurm.conf this script did not write
set -euo pipefail

STATE_DIR=${HPLT_SHARD_SLURM_STATE:-/var/lib/hplt-shard-slurm}
TIMEOUT=${HPLT_SHARD_SLURM_TIMEOUT:-60}
# Debian's Slurm 22.05 is built with sysconfdir /etc/slurm: its tools read this exact file.
SLURM_CONF=/etc/slurm/slurm.conf
CGROUP_CONF=/etc/slurm/cgroup.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
CAP=${HPLT_SHARD_SLURM_CAP:-5}
[[ $CAP =~ ^[0-9]+$ ]] || { echo "cluster.sh: HPLT_SHARD_SLURM_CAP must be a number, got '$CAP'" >&2; exit 64; }
DB_DIR=$STATE_DIR/mariadb
DB_SOCK=$DB_DIR/mysqld.sock
DB_PIDFILE=$DB_DIR/mariadbd.pid
DB_PORT=6820
DB_PASSFILE=$STATE_DIR/slurmdbd.pass
DB_LOG=$STATE_DIR/log/mariadbd.log
DBD_PIDFILE=$STATE_DIR/slurmdbd.pid
DBD_LOG=$STATE_DIR/log/slurmdbd.log
MARKER="# Written by hplt-shard tests/slurm/cluster.sh"
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PIDFILE=/run/munge/munged.pid
MUNGE_LOG=/var/log/munge/munged.log
CTLD_PIDFILE=$STATE_DIR/slurmctld.pid
SLURMD_PIDFILE=$STATE_DIR/slurmd.pid
CTLD_LOG=$STATE_DIR/log/slurmctld.log
SLURMD_LOG=$STATE_DIR/log/slurmd.log
NODE=  # set once the packages are checked

say() { printf 'cluster.sh: %s\n' "$*"; }
die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 1; }

require_packages() {
    local bin
    for bin in munged munge unmunge slurmctld slurmd slurmdbd sinfo squeue scontrol sbatch sacct sacctmgr \
        mariadbd mariadb mariadb-install-db mariadb-admin; do
        if ! command -v "$bin" >/dev/null 2>&1; then
            echo "cluster.sh: '$bin' not found." >&2
            echo "Debian packages slurm-wlm, slurmdbd, munge and mariadb-server are required:" \
                "apt-get install slurm-wlm slurmdbd munge mariadb-server" >&2
            exit 2
        fi
    done
}

# The daemons live in /usr/sbin, which a non-login root shell may lack on PATH.
PATH="$PATH:/usr/sbin:/sbin"

# True if the process exists and is not a zombie: a killed daemon can linger as a zombie
# (still in /proc, same name) until it is reaped, and must count as gone.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }   # fields after "(comm) "; the first is the state letter
    [[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

# pid from a pid file if that process is alive and has the expected name, else empty.
# Name check: a stale pid file must never make us signal an unrelated process.
live_pid() {
    local pidfile=$1 name=$2 pid
    [[ -r $pidfile ]] || return 0
    pid=$(tr -dc '0-9' <"$pidfile")
    [[ -n $pid ]] && alive "$pid" || return 0
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] && echo "$pid"
    return 0
}

munged_pid() { live_pid "$MUNGE_PIDFILE" munged; }
ctld_pid() { live_pid "$CTLD_PIDFILE" slurmctld; }
slurmd_pid() { live_pid "$SLURMD_PIDFILE" slurmd; }
mariadb_pid() { live_pid "$DB_PIDFILE" mariadbd; }
dbd_pid() { live_pid "$DBD_PIDFILE" slurmdbd; }

# Value of KEY in the installed slurm.conf (read as text, never sourced), empty if absent.
conf_value() {
    [[ -r $SLURM_CONF ]] || return 0
    awk -F= -v key="$1" '$1 == key {print substr($0, length(key) + 2); exit}' "$SLURM_CONF"
}

# State of our node as sinfo sees it ("idle", "down*", "drained", ...), empty if no answer.
node_state() {
    timeout 10 sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -n 1 || true
}

show_logs() {
    local f
    for f in "$CTLD_LOG" "$SLURMD_LOG" "$DBD_LOG" "$DB_LOG" "$MUNGE_LOG"; do
        [[ -r $f ]] || continue
        echo "----- last lines of $f -----" >&2
        tail -n 25 "$f" >&2
    done
}

# The slurm.conf we want, on stdout. RealMemory stays below the machine's: slurmd drains a
# node whose configured memory exceeds what it finds.
render_conf() {
    local mem_kib mem_mib real_mem cpus
    mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    mem_mib=$((mem_kib / 1024))
    real_mem=$((mem_mib - mem_mib / 20))   # 95%
    cpus=$(nproc)
    cat <<EOF
$MARKER -- do not edit, rerun it instead.
ClusterName=hplt-shard-test
# Addresses pinned to loopback so no DNS lookup of the host name is needed.
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
# No mail on this machine; the default /bin/mail is absent and slurmctld logs an error.
MailProg=/bin/true
SwitchType=switch/none
# cgroups as on LUMI: a task past its --mem is killed (cgroup.conf: ConstrainRAMSpace=yes).
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
JobAcctGatherFrequency=task=5
# Accounting through slurmdbd, so sacct and sacctmgr answer; limits of the associations
# (MaxSubmitJobs) are enforced at submit time, as on LUMI.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageEnforce=associations,limits
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job with no --mem takes the whole node's memory (one job at a time).
DefMemPerCPU=1000
# Small, so that array chunking is met by ordinary test runs.
MaxArraySize=33
# LUMI's value: finished jobs stay visible (squeue, scontrol, --dependency) for 5 minutes.
MinJobAge=300
# A node that was DOWN comes back by itself once slurmd registers with a valid config.
ReturnToService=2
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=$CTLD_PIDFILE
SlurmdPidFile=$SLURMD_PIDFILE
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_mem State=UNKNOWN
PartitionName=small Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

render_cgroup_conf() {
    cat <<EOF
$MARKER -- do not edit, rerun it instead.
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=yes
# No swap on a test machine; with AllowedSwapSpace=0 the limit is the RAM limit.
ConstrainSwapSpace=yes
AllowedSwapSpace=0
EOF
}

render_dbd_conf() {
    cat <<EOF
$MARKER -- do not edit, rerun it instead.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
PidFile=$DBD_PIDFILE
LogFile=$DBD_LOG
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$DB_PASSFILE")
StorageLoc=slurm_acct_db
EOF
}

# Writes $2 (text) to file $1 with mode $3 unless it already holds exactly that; refuses to
# overwrite a file this script did not write. Sets CONF_CHANGED=1 when it writes.
write_conf_file() {
    local path=$1 want=$2 mode=$3
    if [[ -f $path ]]; then
        [[ $(cat "$path") == "$want" ]] && return 0
        if ! head -n 1 "$path" | grep -qF "$MARKER" && [[ ${HPLT_SHARD_SLURM_FORCE:-} != 1 ]]; then
            die "$path exists and was not written by this script; set HPLT_SHARD_SLURM_FORCE=1 to overwrite it"
        fi
    fi
    mkdir -p "$(dirname "$path")"
    (umask 077; printf '%s\n' "$want" >"$path.tmp")
    chmod "$mode" "$path.tmp"
    mv "$path.tmp" "$path"
    CONF_CHANGED=1
}

# Installs cgroup.conf and slurmdbd.conf; a change stops the daemons that read them.
install_side_confs() {
    local changed_before=$CONF_CHANGED
    CONF_CHANGED=0
    write_conf_file "$CGROUP_CONF" "$(render_cgroup_conf)" 0644
    write_conf_file "$DBD_CONF" "$(render_dbd_conf)" 0600   # slurmdbd refuses a readable one
    if ((CONF_CHANGED)); then
        say "cgroup.conf or slurmdbd.conf changes; stopping daemons started with the old ones"
        stop_daemon slurmd "$SLURMD_PIDFILE"
        stop_daemon slurmctld "$CTLD_PIDFILE"
        stop_daemon slurmdbd "$DBD_PIDFILE"
    fi
    CONF_CHANGED=$((CONF_CHANGED | changed_before))
}

# Installs the slurm.conf we want. If it differs from the installed one, slurm daemons running
# with the old one are stopped first (found through the old file's pid files, which differ
# when HPLT_SHARD_SLURM_STATE changed): they read slurm.conf only at start and would hold
# the ports the new ones need.
install_conf() {
    local want
    want=$(render_conf)
    if [[ -f $SLURM_CONF ]]; then
        [[ $(cat "$SLURM_CONF") == "$want" ]] && return 0
        # Never clobber a slurm.conf someone else wrote (a real cluster's) without being told.
        if ! head -n 1 "$SLURM_CONF" | grep -qF "$MARKER" && [[ ${HPLT_SHARD_SLURM_FORCE:-} != 1 ]]; then
            die "$SLURM_CONF exists and was not written by this script; set HPLT_SHARD_SLURM_FORCE=1 to overwrite it"
        fi
        say "slurm.conf changes; stopping daemons started with the old one"
        stop_daemon slurmd "$(conf_value SlurmdPidFile)"
        stop_daemon slurmctld "$(conf_value SlurmctldPidFile)"
    fi
    stop_daemon slurmd "$SLURMD_PIDFILE"
    stop_daemon slurmctld "$CTLD_PIDFILE"
    mkdir -p "$(dirname "$SLURM_CONF")"
    printf '%s\n' "$want" >"$SLURM_CONF.tmp"
    mv "$SLURM_CONF.tmp" "$SLURM_CONF"
    CONF_CHANGED=1
}
CONF_CHANGED=0

start_munge() {
    if [[ -n $(munged_pid) ]]; then
        return 0
    fi
    if [[ ! -s $MUNGE_KEY ]]; then
        say "creating munge key $MUNGE_KEY"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey -c -k "$MUNGE_KEY"
        else
            create-munge-key
        fi
        chown munge:munge "$MUNGE_KEY"
        chmod 0400 "$MUNGE_KEY"
    fi
    # munged refuses to start unless its directories belong to it (no systemd to make them).
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge
    install -d -o munge -g munge -m 0711 /var/lib/munge
    say "starting munged"
    runuser -u munge -- munged
}

# A private MariaDB for slurmdbd: created on first start in $DB_DIR, listening on 127.0.0.1
# only. The slurm database user's password is made once and kept in $DB_PASSFILE.
start_mariadb() {
    local i
    mkdir -p "$STATE_DIR/log"
    if [[ -z $(mariadb_pid) ]]; then
        if [[ ! -d $DB_DIR/mysql ]]; then
            say "creating the accounting database in $DB_DIR"
            install -d -o mysql -g mysql -m 0750 "$DB_DIR"
            mariadb-install-db --user=mysql --datadir="$DB_DIR" --skip-test-db \
                >"$STATE_DIR/log/mariadb-install.log" 2>&1 \
                || { tail -n 20 "$STATE_DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
        fi
        touch "$DB_LOG" && chown mysql:mysql "$DB_LOG"
        say "starting mariadbd"
        setsid mariadbd --user=mysql --datadir="$DB_DIR" --socket="$DB_SOCK" --pid-file="$DB_PIDFILE" \
            --bind-address=127.0.0.1 --port="$DB_PORT" --log-error="$DB_LOG" \
            --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
            </dev/null >/dev/null 2>&1 &
        for ((i = 0; i < 600; i++)); do
            mariadb-admin --socket="$DB_SOCK" ping >/dev/null 2>&1 && break
            sleep 0.1
        done
        mariadb-admin --socket="$DB_SOCK" ping >/dev/null 2>&1 || { show_logs; die "mariadbd did not answer in 60 s"; }
    fi
    # root reaches the server through its socket (unix_socket auth, Debian's default).
    mariadb --socket="$DB_SOCK" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$DB_PASSFILE")';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not set up the slurm database user"
}

make_db_password() {
    [[ -s $DB_PASSFILE ]] && return 0
    mkdir -p "$STATE_DIR"
    # A bounded read, then the cut in the shell: `tr </dev/urandom | head` ends with tr killed by
    # SIGPIPE, which pipefail and set -e turn into a failed first start on a fresh machine.
    local letters
    letters=$(head -c 4096 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z')
    (umask 077; printf '%s' "${letters:0:24}" >"$DB_PASSFILE")
}

start_dbd() {
    local i
    if [[ -z $(dbd_pid) ]]; then
        say "starting slurmdbd"
        slurmdbd
    fi
    for ((i = 0; i < 300; i++)); do
        timeout 10 sacctmgr -n show cluster >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    show_logs
    die "slurmdbd did not answer in 60 s (sacctmgr show cluster)"
}

# The cluster, the two accounts and the test user's associations (idempotent: sacctmgr -i
# add of an existing entity only says it exists). Limits are set on the user's associations.
setup_associations() {
    local user got
    user=$(id -un)
    timeout 30 sacctmgr -i add cluster hplt-shard-test >/dev/null 2>&1 || true
    timeout 30 sacctmgr -i add account tests,capped cluster=hplt-shard-test \
        description=hplt-shard-tests organization=hplt-shard >/dev/null 2>&1 || true
    timeout 30 sacctmgr -i add user "$user" account=tests,capped defaultaccount=tests >/dev/null 2>&1 || true
    timeout 30 sacctmgr -i modify user "$user" set defaultaccount=tests >/dev/null 2>&1 || true
    timeout 30 sacctmgr -i modify user "$user" where account=tests set maxsubmitjobs=200 >/dev/null 2>&1 || true
    timeout 30 sacctmgr -i modify user "$user" where account=capped set maxsubmitjobs="$CAP" >/dev/null 2>&1 || true
    got=$(timeout 30 sacctmgr -nP show assoc user="$user" account=capped format=maxsubmit 2>/dev/null | sed -n 1p)
    [[ $got == "$CAP" ]] || die "the association of $user in account capped has MaxSubmitJobs='$got', wanted $CAP"
}

# Epoch second at which we last started slurmd (0: it was already running).
SLURMD_STARTED=0

start_slurm() {
    mkdir -p "$STATE_DIR/ctld" "$STATE_DIR/slurmd" "$STATE_DIR/log"
    if [[ -z $(ctld_pid) ]]; then
        say "starting slurmctld"
        slurmctld
    fi
    if [[ -z $(slurmd_pid) ]]; then
        say "starting slurmd"
        SLURMD_STARTED=$(date +%s)
        slurmd
    fi
}

# True once the controller has heard from the slurmd we started. A restarted slurmctld
# reports the node state it saved ("idle") before slurmd has registered again.
slurmd_registered() {
    local started
    ((SLURMD_STARTED)) || return 0
    started=$(timeout 10 scontrol show node -o "$NODE" 2>/dev/null | grep -o "SlurmdStartTime=[^ ]*" | cut -d= -f2 || true)
    [[ -n $started && $started != None ]] || return 1
    (($(date -d "$started" +%s) >= SLURMD_STARTED - 1))
}

# Sends SIGTERM to a daemon by its pid file and waits for it to go; SIGKILL after 30 s.
stop_daemon() {
    local name=$1 pidfile=$2 pid i
    [[ -n $pidfile ]] || return 0
    pid=$(live_pid "$pidfile" "$name")
    [[ -n $pid ]] || return 0
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        alive "$pid" || return 0
        sleep 0.1
    done
    say "$name did not exit in 30 s, killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_stop() {
    stop_daemon slurmd "$SLURMD_PIDFILE"
    stop_daemon slurmctld "$CTLD_PIDFILE"
    stop_daemon slurmdbd "$DBD_PIDFILE"
    stop_daemon mariadbd "$DB_PIDFILE"
    stop_daemon munged "$MUNGE_PIDFILE"
    say "stopped"
}

# Everything `start` writes, so the next start meets what a fresh machine has. A configuration
# file is removed only when this script wrote it (its first line is the marker).
cmd_purge() {
    local path
    cmd_stop
    for path in "$SLURM_CONF" "$CGROUP_CONF" "$DBD_CONF"; do
        if [[ -f $path ]] && head -n 1 "$path" | grep -qF "$MARKER"; then
            rm -f "$path"
        fi
    done
    rm -rf "$STATE_DIR"
    say "purged $STATE_DIR and the configuration files this script wrote"
}

# Waits until sinfo shows the node usable; resumes a node left DOWN or DRAINED.
wait_idle() {
    local deadline state resumed=0
    deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)); do
        state=$(node_state)
        case $state in
            idle | mixed | allocated | completing)
                slurmd_registered && return 0 ;;
            down* | drain* | fail*)
                # Left down by a crash or a stop with running jobs; the '*' suffix means
                # slurmd has not registered yet, so a resume would not stick.
                if [[ $state != *'*' ]] && ((resumed < 3)); then
                    say "node $NODE is $state, resuming it"
                    scontrol update nodename="$NODE" state=resume || true
                    resumed=$((resumed + 1))
                fi ;;
        esac
        sleep 0.5
    done
    echo "cluster.sh: error: node $NODE not idle after ${TIMEOUT}s (sinfo says: '${state:-no answer}')" >&2
    timeout 10 scontrol show node "$NODE" >&2 2>/dev/null || true
    show_logs
    exit 1
}

cmd_start() {
    local t0=$SECONDS was_up=0
    [[ $EUID -eq 0 ]] || die "must run as root (slurmd and munged need it)"
    if [[ -n $(munged_pid) && -n $(mariadb_pid) && -n $(dbd_pid) && -n $(ctld_pid) && -n $(slurmd_pid) ]]; then
        was_up=1
    fi
    [[ -d /sys/fs/cgroup/memory ]] \
        || die "no cgroup v1 memory controller at /sys/fs/cgroup/memory (task/cgroup with ConstrainRAMSpace needs it)"
    make_db_password
    install_conf
    install_side_confs
    if ((CONF_CHANGED)); then was_up=0; fi
    start_munge
    if ! munge -n | unmunge >/dev/null 2>&1; then
        show_logs
        die "munge does not work (munge -n | unmunge failed)"
    fi
    start_mariadb
    start_dbd
    # before slurmctld: it enforces associations, and loads them from slurmdbd when it starts
    setup_associations
    start_slurm
    wait_idle
    if ((was_up)); then
        say "already running: node $NODE is $(node_state)"
    else
        say "up in $((SECONDS - t0)) s: node $NODE is $(node_state), partition small"
    fi
}

cmd_status() {
    local ok=0 name pid
    for name in munged mariadbd slurmdbd slurmctld slurmd; do
        case $name in
            munged) pid=$(munged_pid) ;;
            mariadbd) pid=$(mariadb_pid) ;;
            slurmdbd) pid=$(dbd_pid) ;;
            slurmctld) pid=$(ctld_pid) ;;
            slurmd) pid=$(slurmd_pid) ;;
        esac
        if [[ -n $pid ]]; then
            echo "$name: running (pid $pid)"
        else
            echo "$name: not running"
            ok=1
        fi
    done
    if ! timeout 10 sinfo; then
        ok=1
    else
        timeout 10 squeue || true
    fi
    case $(node_state) in
        idle | mixed | allocated | completing) ;;
        *) ok=1 ;;
    esac
    return $ok
}

case ${1:-} in
    start | stop | status | purge) ;;
    *) echo "usage: $0 start|stop|status|purge" >&2; exit 64 ;;
esac
require_packages
NODE=$(hostname -s)
case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    purge) cmd_purge ;;
esac
