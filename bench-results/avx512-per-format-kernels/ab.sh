#!/bin/bash
# usage: ab.sh OUTDIR BIN_A BIN_B  — alternating rounds on both models
source /work/wt/env.sh
out=$1; a=$2; b=$3; rounds=${ROUNDS:-2}
mkdir -p $out
for r in $(seq $rounds); do for m in Q4KM GEMMA3; do for bin in $a $b; do
  f=$(eval echo \$KILN_TEST_$m); tag=$(basename $bin)
  l0=$(cut -d' ' -f1 /proc/loadavg)
  nice -n 5 $bin --model $f --long-context 0 --decode-steps 64 --prefill-len 64 --skip-kernel-rates --profile-passes 2 --output-json $out/$m-$tag-r$r.json > $out/$m-$tag-r$r.txt 2>&1
  l1=$(cut -d' ' -f1 /proc/loadavg)
  echo "$m $tag r$r load $l0-$l1: $(grep -E '^\| decode \|' $out/$m-$tag-r$r.txt | awk -F'|' '{printf "%s:%s ", $3, $5}') head: $(grep 'output head' $out/$m-$tag-r$r.txt | awk -F'|' '{print $3"ms "$6"GB/s"}')"
done; done; done
