#!/usr/bin/env bash
# Start, stop or inspect a real single-node Slurm cluster on this machine, built from Debian's
# packages (apt-get install slurm-wlm munge). sacbench's Slurm tests and CI use it; it is also a
# quick way to try `snakemake --profile profiles/slurm` on a workstation.
#
#   scripts/slurm-cluster.sh start    # munged (unless one already answers), slurmctld, slurmd;
#                                     # returns once the node is idle
#   scripts/slurm-cluster.sh status   # exit 0 when up and answering, 3 when not running
#   scripts/slurm-cluster.sh stop     # cancels jobs, kills what they left behind, stops what
#                                     # `start` started, by PID
#
# The node gets this machine's CPU count (nproc) and memory (free -m). There is no accounting
# database, so `sacct` does not work: use the executor's `slurm-status-command: squeue`, which
# MinJobAge below keeps reliable. The config goes to /etc/slurm/slurm.conf because the Slurm
# executor strips SLURM_CONF from its job steps; a slurm.conf this script did not write is never
# touched. Every daemon runs as root (or through sudo), so the script needs root or sudo.
#
# Settings (environment):
#   SACBENCH_SLURM_DIR        state, PID files and logs  [/var/lib/sacbench-slurm]
#   SACBENCH_SLURM_PARTITION  name of the one partition  [main]
#   SACBENCH_SLURM_KILL_WAIT  seconds between SIGTERM and SIGKILL when a job is cancelled,
#                             requeued or preempted: the trainer's time to checkpoint  [30]
#   SACBENCH_SLURM_TIMEOUT    seconds `start` waits for the node to become idle  [90]
#   SACBENCH_SLURM_CRED_EXPIRE  seconds before a requeued job may start again  [30]
set -euo pipefail

readonly CONF=/etc/slurm/slurm.conf
readonly CLUSTER_NAME=sacbench
readonly MARKER="# Written by sacbench scripts/slurm-cluster.sh"
readonly STATE_DIR="${SACBENCH_SLURM_DIR:-/var/lib/sacbench-slurm}"
readonly PARTITION="${SACBENCH_SLURM_PARTITION:-main}"
readonly KILL_WAIT="${SACBENCH_SLURM_KILL_WAIT:-30}"
readonly START_TIMEOUT="${SACBENCH_SLURM_TIMEOUT:-90}"
readonly CRED_EXPIRE="${SACBENCH_SLURM_CRED_EXPIRE:-30}"
readonly MUNGE_SOCKET_DIR=/run/munge
readonly MUNGE_PID_FILE="$STATE_DIR/munged.pid"
readonly CTLD_PID_FILE="$STATE_DIR/slurmctld.pid"
readonly SLURMD_PID_FILE="$STATE_DIR/slurmd.pid"

die() {
  echo "slurm-cluster: error: $*" >&2
  exit 1
}
say() { echo "slurm-cluster: $*" >&2; }

as_root() {
  if [[ $EUID -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo -n "$@"
  else
    die "need root or passwordless sudo to run: $*"
  fi
}

require_binaries() {
  local missing=()
  for binary in munged slurmctld slurmd sinfo scontrol squeue sbatch scancel; do
    command -v "$binary" >/dev/null || [[ -x /usr/sbin/$binary ]] || missing+=("$binary")
  done
  if ((${#missing[@]})); then
    die "missing ${missing[*]}; install them with: apt-get install -y slurm-wlm munge"
  fi
}

# Whether process PID runs. A daemon that exited stays a zombie until PID 1 reaps it, which on
# some machines takes seconds, and `kill -0` succeeds on a zombie.
alive() {
  local pid=$1 state
  as_root kill -0 "$pid" 2>/dev/null || return 1
  state=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

pid_from() { # pid_from FILE: print the PID recorded in FILE when that process is alive
  local file=$1 pid
  pid=$(as_root cat "$file" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && echo "$pid"
}

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_answers; then
    say "munged already answers; using it"
    return
  fi
  if ! as_root test -s /etc/munge/munge.key; then
    say "creating /etc/munge/munge.key"
    as_root mungekey --create --keyfile=/etc/munge/munge.key
    as_root chown munge:munge /etc/munge/munge.key
    as_root chmod 0400 /etc/munge/munge.key
  fi
  as_root install -d -o munge -g munge -m 0755 "$MUNGE_SOCKET_DIR"
  as_root install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  # munged refuses to run as root; run it as the package's munge user, and keep its PID file
  # in a directory munge can write, then copy it to our state dir so `stop` knows the PID.
  as_root runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_SOCKET_DIR/munged.pid"
  for _ in $(seq 50); do
    munge_answers && break
    sleep 0.1
  done
  munge_answers || die "munged did not start; see /var/log/munge/munged.log"
  as_root cp "$MUNGE_SOCKET_DIR/munged.pid" "$MUNGE_PID_FILE"
}

write_config() {
  if as_root test -e "$CONF" && ! as_root grep -qxF "$MARKER" "$CONF"; then
    die "$CONF exists and was not written by this script; refusing to replace a real cluster's" \
      "configuration"
  fi
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(free -m | awk '/^Mem:/ {print $2}')
  [[ $cpus =~ ^[0-9]+$ && $mem_mb =~ ^[0-9]+$ ]] || die "cannot read CPUs ($cpus) or memory ($mem_mb)"
  as_root install -d -m 0755 /etc/slurm "$STATE_DIR"
  as_root install -d -m 0755 "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
  local tmp
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
$MARKER
# Stop with scripts/slurm-cluster.sh stop, which also removes this file.
ClusterName=$CLUSTER_NAME
# Loopback addresses: no dependence on how (or whether) the host name resolves.
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again once its old credential expired (default 120 s); shorter here
# so that preemption tests do not idle.
AuthInfo=cred_expire=$CRED_EXPIRE
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=$CTLD_PID_FILE
SlurmdPidFile=$SLURMD_PID_FILE
SlurmctldLogFile=$STATE_DIR/slurmctld.log
SlurmdLogFile=$STATE_DIR/slurmd.log
# Containers and CI runners rarely allow Slurm to manage cgroups; linuxproc tracks a job's
# processes by parentage, so signals (time-limit warnings, requeue, preemption) still reach every
# process of a step, the trainer included.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# Look for startable jobs every few seconds (defaults: 60 s and 30 s), so that a requeued job
# whose hold has expired starts promptly.
SchedulerParameters=sched_interval=5,bf_interval=5
# The executor's squeue status check needs finished jobs to stay visible for a while (>= 120 s).
MinJobAge=300
# Time between SIGTERM and SIGKILL on cancel, requeue, preemption and time limit.
KillWait=$KILL_WAIT
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  as_root install -m 0644 "$tmp" "$CONF"
  rm -f "$tmp"
  say "wrote $CONF: node $host, $cpus CPUs, $mem_mb MB, partition $PARTITION"
}

node_state() { sinfo -h -N -o %t 2>/dev/null | head -n 1; }

wait_until_idle() {
  local deadline=$((SECONDS + START_TIMEOUT)) state=""
  while ((SECONDS < deadline)); do
    state=$(node_state || true)
    case $state in
      idle | mix | alloc) return 0 ;;
    esac
    sleep 0.5
  done
  say "node state after ${START_TIMEOUT}s: '${state:-no answer}'"
  as_root tail -n 20 "$STATE_DIR/slurmctld.log" "$STATE_DIR/slurmd.log" >&2 || true
  die "the node did not become idle"
}

cmd_start() {
  require_binaries
  if cmd_status >/dev/null 2>&1; then
    say "already running"
    wait_until_idle
    return
  fi
  as_root install -d -m 0755 "$STATE_DIR"
  start_munge
  write_config
  if ! pid_from "$CTLD_PID_FILE" >/dev/null; then
    # -c: start from an empty state, so a previous run's jobs never come back.
    as_root /usr/sbin/slurmctld -c
  fi
  if ! pid_from "$SLURMD_PID_FILE" >/dev/null; then
    as_root /usr/sbin/slurmd
  fi
  wait_until_idle
  say "up: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %t')"
}

cmd_status() {
  local ctld slurmd
  ctld=$(pid_from "$CTLD_PID_FILE" || true)
  slurmd=$(pid_from "$SLURMD_PID_FILE" || true)
  if [[ -z $ctld || -z $slurmd ]]; then
    echo "not running (slurmctld: ${ctld:-none}, slurmd: ${slurmd:-none})"
    return 3
  fi
  echo "slurmctld PID $ctld, slurmd PID $slurmd, munged PID $(pid_from "$MUNGE_PID_FILE" ||
    echo 'not ours')"
  sinfo
  squeue
}

stop_pid_file() { # stop_pid_file NAME FILE: SIGTERM the recorded PID, SIGKILL if it lingers
  local name=$1 file=$2 pid
  pid=$(pid_from "$file") || {
    as_root rm -f "$file"
    return 0
  }
  as_root kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    say "$name (PID $pid) ignored SIGTERM; sending SIGKILL"
    as_root kill -KILL "$pid" 2>/dev/null || true
  fi
  as_root rm -f "$file"
  say "stopped $name (PID $pid)"
}

# The PIDs of processes that this cluster's jobs left running after they ended, all but this
# script and its callers. proctrack/linuxproc finds a job's processes by parentage, so a process
# whose parent exited (PID 1 adopts it) outlives its job: a job-step Snakemake that hangs in its
# SIGTERM handler after a requeue, for one. Slurm gives every job process SLURM_CLUSTER_NAME.
leftover_job_pids() {
  local pid ours=" " files
  pid=$BASHPID # this subshell, then the script and its callers
  while [[ $pid =~ ^[0-9]+$ ]] && ((pid > 1)); do
    ours+="$pid "
    pid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ') || break
  done
  files=$(as_root grep -lzxF "SLURM_CLUSTER_NAME=$CLUSTER_NAME" /proc/[0-9]*/environ 2>/dev/null) ||
    true
  for file in $files; do
    pid=${file#/proc/}
    pid=${pid%/environ}
    # grep itself matched if this script runs in a job; it has exited by now.
    [[ $ours == *" $pid "* ]] || ! alive "$pid" || echo "$pid"
  done
}

kill_leftover_job_processes() {
  local pids=() remaining=() pid listed
  mapfile -t pids < <(leftover_job_pids)
  ((${#pids[@]})) || return 0
  listed=$(ps -o pid=,args= -p "$(IFS=,; echo "${pids[*]}")" 2>/dev/null | cut -c1-160) || true
  as_root kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 20); do
    remaining=()
    for pid in "${pids[@]}"; do alive "$pid" && remaining+=("$pid"); done
    ((${#remaining[@]})) || break
    sleep 0.1
  done
  ((${#remaining[@]} == 0)) || as_root kill -KILL "${remaining[@]}" 2>/dev/null || true
  say "stopped ${#pids[@]} process(es) that ended jobs had left running (SIGTERM, then SIGKILL" \
    "to any still running 2 s later):"
  echo "$listed" | sed 's/^ */slurm-cluster:   /' >&2
}

cmd_stop() {
  if pid_from "$CTLD_PID_FILE" >/dev/null && pid_from "$SLURMD_PID_FILE" >/dev/null; then
    # Jobs' slurmstepd processes outlive slurmd; cancel the jobs first and give them KillWait.
    if [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
      say "cancelling jobs: $(squeue -h -o %i | tr '\n' ' ')"
      as_root scancel --full $(squeue -h -o %i) 2>/dev/null || true
      local deadline=$((SECONDS + KILL_WAIT + 15))
      while ((SECONDS < deadline)) && [[ -n $(squeue -h -t R,CG,PD -o %i 2>/dev/null) ]]; do
        sleep 0.5
      done
    fi
  fi
  kill_leftover_job_processes
  stop_pid_file slurmd "$SLURMD_PID_FILE"
  stop_pid_file slurmctld "$CTLD_PID_FILE"
  stop_pid_file munged "$MUNGE_PID_FILE"
  if as_root test -e "$CONF" && as_root grep -qxF "$MARKER" "$CONF"; then
    as_root rm -f "$CONF"
  fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
