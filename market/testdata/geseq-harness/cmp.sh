#!/bin/bash
# cmp.sh: geseq/orderbook against Suanli's market, alternating, one process
# per measurement.
#   N=1000000 ROUNDS=5 MARKET=/tmp/ours.test [BEFOREBIN=/tmp/main.test] \
#     [WORKLOADS="Throughput ThroughputDeep"] [GESEQ=/work/geseq/geseq.test] cmp.sh
# Per round and workload it runs geseq, ours, then before (if BEFOREBIN is
# set), and prints wall and CPU ns per iteration, B/op, allocs/op and the
# ratios geseq/ours (wall, CPU); then the medians. Run it under
# flock /work/simnet.lock.
here=$(cd "$(dirname "$0")" && pwd)
N=${N:-1000000} ROUNDS=${ROUNDS:-5}
GESEQ=${GESEQ:-$here/geseq.test}
MARKET=${MARKET:?set MARKET to a market test binary}
WORKLOADS=${WORKLOADS:-"Throughput ThroughputDeep"}
med() { sort -g | awk '{a[NR]=$1} END{if(NR%2)print a[(NR+1)/2]; else printf "%.4g\n",(a[NR/2]+a[NR/2+1])/2}'; }
tmp=$(mktemp -d)
echo "# $(date -u +%FT%TZ) N=$N ROUNDS=$ROUNDS MARKET=$MARKET BEFOREBIN=${BEFOREBIN:-none} load: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in $WORKLOADS; do
  for r in $(seq 1 "$ROUNDS"); do
    read -r gw gc _ ga < <("$here/run1.sh" "$GESEQ" "BenchmarkCmp$w" "$N")
    read -r ow oc om oa < <("$here/run1.sh" "$MARKET" "Benchmark$w" "$N")
    line="$w round $r: geseq ${gw}/${gc} (allocs $ga)  ours ${ow}/${oc} (${om} B, $oa allocs)"
    rw=$(awk -v a="$gw" -v b="$ow" 'BEGIN{printf "%.3f", a/b}')
    rc=$(awk -v a="$gc" -v b="$oc" 'BEGIN{printf "%.3f", a/b}')
    echo "$rw $rc" >>"$tmp/$w.ours"
    line="$line ratio ${rw}/${rc}"
    if [ -n "$BEFOREBIN" ]; then
      read -r bw bc bm ba < <("$here/run1.sh" "$BEFOREBIN" "Benchmark$w" "$N")
      bw2=$(awk -v a="$gw" -v b="$bw" 'BEGIN{printf "%.3f", a/b}')
      bc2=$(awk -v a="$gc" -v b="$bc" 'BEGIN{printf "%.3f", a/b}')
      echo "$bw2 $bc2" >>"$tmp/$w.before"
      echo "$oc $bc" >>"$tmp/$w.ob"
      line="$line  before ${bw}/${bc} ratio ${bw2}/${bc2}"
    fi
    echo "$gc" >>"$tmp/$w.g"; echo "$oc" >>"$tmp/$w.o"
    echo "$line   (load $(cut -d' ' -f1 /proc/loadavg))"
  done
  echo "== $w: median CPU ns geseq $(med <"$tmp/$w.g") ours $(med <"$tmp/$w.o");" \
    "median ratio geseq/ours wall $(cut -d' ' -f1 "$tmp/$w.ours" | med) CPU $(cut -d' ' -f2 "$tmp/$w.ours" | med)"
  if [ -n "$BEFOREBIN" ]; then
    echo "== $w: before: median ratio wall $(cut -d' ' -f1 "$tmp/$w.before" | med) CPU $(cut -d' ' -f2 "$tmp/$w.before" | med);" \
      "ours/before CPU per round: $(awk '{printf "%.3f ", $1/$2}' "$tmp/$w.ob") median $(awk '{print $1/$2}' "$tmp/$w.ob" | med)"
  fi
done
rm -rf "$tmp"
