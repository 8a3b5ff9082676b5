#!/usr/bin/env bash
# Stop the cluster contrib/slurm/slurm-up.sh started in DIR: cancel its
# jobs, stop every slurmd, slurmctld and munged (each by the pid file it wrote),
# and leave DIR for the logs.
#
#   contrib/slurm/slurm-down.sh DIR
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
[ -f "$dir/slurm.conf" ] || exit 0
export SLURM_CONF="$dir/slurm.conf"
timeout 10 scancel --full --quiet --user=root >/dev/null 2>&1 || true
stop() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}
for f in "$dir"/slurmd-*.pid "$dir/slurmd.pid"; do stop "$f"; done
stop "$dir/slurmctld.pid"
stop "$dir/munge/munged.pid"
rm -f "$dir/munge/munge.sock"
