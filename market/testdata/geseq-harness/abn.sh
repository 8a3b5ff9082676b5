#!/bin/bash
# abn.sh WORKLOAD N ROUNDS BIN...: the binaries in turn each round, one
# process per measurement (BenchmarkWORKLOAD at N iterations); prints CPU
# (and wall) ns per iteration per round, then each binary's medians and its
# per-round CPU ratio to the first binary. Run under flock /work/simnet.lock.
here=$(cd "$(dirname "$0")" && pwd)
w=$1 n=$2 rounds=$3; shift 3
med() { sort -g | awk '{a[NR]=$1} END{if(NR%2)print a[(NR+1)/2]; else printf "%.4g\n",(a[NR/2]+a[NR/2+1])/2}'; }
tmp=$(mktemp -d)
echo "# $(date -u +%FT%TZ) $w N=$n rounds=$rounds load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  line="round $r:"; i=0
  for bin in "$@"; do
    read -r ww cc mm aa < <("$here/run1.sh" "$bin" "Benchmark$w" "$n")
    echo "$cc" >>"$tmp/c$i"; echo "$ww" >>"$tmp/w$i"
    line="$line  [$i] ${cc} (${ww} wall, ${mm} B, ${aa} allocs)"; i=$((i+1))
  done
  echo "$line  (load $(cut -d' ' -f1 /proc/loadavg))"
done
i=0
for bin in "$@"; do
  echo "== [$i] $bin: median CPU $(med <"$tmp/c$i") wall $(med <"$tmp/w$i"); CPU/[0] per round $(paste "$tmp/c$i" "$tmp/c0" | awk '{printf "%.3f ", $1/$2}') median $(paste "$tmp/c$i" "$tmp/c0" | awk '{print $1/$2}' | med)"
  i=$((i+1))
done
rm -rf "$tmp"
