#!/bin/bash
# flat.sh BIN: BenchmarkThroughput, BenchmarkThroughputDeep and
# BenchmarkMixed of one market test binary at 100k, 1 M and 10 M
# iterations (wall / CPU ns per iteration, B/op, allocs/op).
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?market test binary}
echo "# $(date -u +%FT%TZ) $bin load: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in Throughput ThroughputDeep Mixed; do
  for n in 100000 1000000 10000000; do
    read -r ww cc mm aa < <("$here/run1.sh" "$bin" "Benchmark$w" "$n")
    echo "$w $n: wall $ww cpu $cc  $mm B/op  $aa allocs/op  (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
