#!/usr/bin/env bash
# Start a one-node Slurm cluster with simulated GPUs in a directory of its
# own, for developing and testing Suanli's Slurm backend and executor.
#
#   contrib/slurm/slurm-up.sh [-i] [-n NODES] [-g N] [-t TYPE] DIR
#   contrib/slurm/slurm-down.sh DIR
#
#   -i        install Debian's slurmctld, slurmd, slurm-client and munge first
#   -n NODES  number of compute nodes (default 2), each a slurmd of its own
#             on this machine: HOST, HOST-2, …
#   -g N      number of simulated GPUs per node (default 4)
#   -t TYPE   their gres type (default h100)
#
# DIR receives everything: slurm.conf, gres.conf, the munge key and socket,
# the controller's state, the logs and the GPU device nodes. The GPUs are
# character devices made with mknod (major 195, NVIDIA's), which is what
# slurmd needs to give a job exactly its GPUs (CUDA_VISIBLE_DEVICES); regular
# files would drain the node. Nothing outside DIR is written except the
# daemons' listening ports (SLURMCTLD_PORT, default 6817, and the next
# NODES for the slurmds). Run as root (slurmd needs it). When it returns 0
# every node is idle and `export SLURM_CONF=DIR/slurm.conf` points every
# Slurm command, and Suanli's -backend slurm, at the cluster. Several nodes
# on one machine (Debian's Slurm runs several slurmd, each with -N NAME)
# let multi-node jobs run for real; the default, 2 nodes of 4 GPUs, has
# the 8 GPUs of one DGX.
#
# The partitions are "gpu" (default, on-demand and reserved leases) and
# "spot" (a lower priority tier whose jobs are cancelled, after a SIGTERM
# and SPOT_GRACE seconds of grace, when a "gpu" job needs their GPUs).
set -euo pipefail

install=0 nnodes=2 gpus=4 gtype=h100
while getopts in:g:t: opt; do
  case $opt in
  i) install=1 ;;
  n) nnodes=$OPTARG ;;
  g) gpus=$OPTARG ;;
  t) gtype=$OPTARG ;;
  *) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d' >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -ne 1 ]; then
  echo "usage: $0 [-i] [-n NODES] [-g N] [-t TYPE] DIR" >&2
  exit 2
fi
case $gpus in '' | *[!0-9]*) echo "-g wants a number" >&2; exit 2 ;; esac
case $nnodes in '' | 0 | *[!0-9]*) echo "-n wants a number, at least 1" >&2; exit 2 ;; esac
dir=$(mkdir -p "$1" && cd "$1" && pwd)
port=${SLURMCTLD_PORT:-6817}
grace=${SPOT_GRACE:-10}

if [ "$install" = 1 ] && ! command -v slurmctld >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  for try in 1 2 3 4 5 6; do
    # apt may be held briefly by another installer.
    if apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      slurmctld slurmd slurm-client munge; then break; fi
    [ "$try" = 6 ] && exit 1
    sleep 10
  done
fi
for c in munged slurmctld slurmd sinfo; do
  command -v "$c" >/dev/null || { echo "$c is not installed (try -i)" >&2; exit 1; }
done

host=$(hostname -s)
# The nodes: HOST, HOST-2, …, HOST-NODES.
nodes=("$host")
for ((k = 2; k <= nnodes; k++)); do nodes+=("$host-$k"); done

mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
chmod 0700 "$dir/munge"
# Simulated GPUs: character devices with NVIDIA's major number, a
# directory per node (minor numbers go on across nodes, as if each node
# had its own /dev).
for ((k = 0; k < nnodes; k++)); do
  mkdir -p "$dir/dev/${nodes[k]}"
  for ((i = 0; i < gpus; i++)); do
    f="$dir/dev/${nodes[k]}/nvidia$i"
    [ -c "$f" ] || mknod "$f" c 195 $((k * gpus + i))
  done
done

# munge: a key and socket of our own, so a system munged is not needed
# (and not disturbed).
if [ ! -s "$dir/munge/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 0400 "$dir/munge/munge.key"
sock="$dir/munge/munge.sock"
if ! [ -S "$sock" ] || ! kill -0 "$(cat "$dir/munge/munged.pid" 2>/dev/null)" 2>/dev/null; then
  rm -f "$sock" "$sock.lock"
  munged --force --key-file="$dir/munge/munge.key" --socket="$sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
fi

# Slurm counts CPUs per job; a 2-core machine would run only two jobs at
# a time. config_overrides lets the node claim more than it has.
cat >"$dir/slurm.conf" <<EOF
# Written by contrib/slurm/slurm-up.sh: a one-node cluster for Suanli.
ClusterName=suanli
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
GresTypes=gpu
$(for ((k = 0; k < nnodes; k++)); do
  echo "NodeName=${nodes[k]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1 + k)) CPUs=64 Boards=1 SocketsPerBoard=1 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=1024 Gres=gpu:$gtype:$gpus State=UNKNOWN"
done)
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
PartitionName=spot Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=$grace
EOF
{
  echo "# Written by contrib/slurm/slurm-up.sh: simulated GPUs, one character device each."
  echo "AutoDetect=off"
  for n in "${nodes[@]}"; do
    for ((i = 0; i < gpus; i++)); do
      echo "NodeName=$n Name=gpu Type=$gtype File=$dir/dev/$n/nvidia$i"
    done
  done
} >"$dir/gres.conf"
cat >"$dir/env" <<EOF
export SLURM_CONF=$dir/slurm.conf
EOF
export SLURM_CONF="$dir/slurm.conf"

logs() {
  for f in "$dir"/log/slurmctld.log "$dir"/log/slurmd-*.log "$dir"/log/munged.log; do
    [ -f "$f" ] && { echo "== $f"; tail -n 60 "$f"; }
  done >&2
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
running "$dir/slurmctld.pid" || slurmctld -f "$SLURM_CONF"
for n in "${nodes[@]}"; do
  mkdir -p "$dir/spool/$n"
  running "$dir/slurmd-$n.pid" || slurmd -f "$SLURM_CONF" -N "$n"
done

# Wait (60 s at most) for every node to be idle.
idle() {
  local n=$1 state
  for _ in $(seq 120); do
    state=$(sinfo -h -N -n "$n" -o '%T' 2>/dev/null | head -n1 || true)
    case $state in
    idle | mixed | allocated) return 0 ;;
    esac
    if ! running "$dir/slurmctld.pid" || ! running "$dir/slurmd-$n.pid"; then
      state="not running (a daemon exited)"
      break
    fi
    case $state in
    drain* | down*)
      scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  echo "slurm-up: node $n is '$state', not idle, after 60s" >&2
  scontrol show node "$n" >&2 || true
  logs
  exit 1
}
for n in "${nodes[@]}"; do idle "$n"; done
echo "slurm-up: nodes ${nodes[*]} idle with $gpus simulated $gtype GPUs each; export SLURM_CONF=$SLURM_CONF"
