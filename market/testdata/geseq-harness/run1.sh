#!/bin/bash
# run1.sh BIN BENCH N: one process, one benchmark at N iterations; prints
# "wall-ns cpu-ns B/op allocs/op" per iteration.
bin=$1 bench=$2 n=$3
out=$("$bin" -test.run='^$' -test.bench="^${bench}\$" -test.benchtime="${n}x" -test.benchmem -test.count=1 2>&1)
line=$(grep -E "^${bench}(-[0-9]+)?[[:space:]]" <<<"$out" | tail -1)
if [ -z "$line" ]; then echo "run1: no result from $bin $bench" >&2; echo "$out" | tail -5 >&2; echo "NaN NaN NaN NaN"; exit 1; fi
awk '{for(i=3;i<=NF;i++){if($i=="ns/op")w=$(i-1);if($i=="cpu-ns/op")c=$(i-1);if($i=="B/op")m=$(i-1);if($i=="allocs/op")a=$(i-1)} print w, c, m, a}' <<<"$line"
