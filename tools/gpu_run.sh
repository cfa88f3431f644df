#!/usr/bin/env bash
# Runs labelled steps on the GPU machine, each under its own time limit, writing one log per
# step and a summary straight into the device tool's $OUT (so that a run cut short at its
# limit still returns what it did); tools/gpu_check.sh's own logs go to /tmp/flagos-out.
# Usage: tools/gpu_run.sh LABEL:SECONDS:COMMAND ...   (COMMAND runs under bash -c)
set -u
export RESULTS=${OUT:-/tmp/flagos-results}; mkdir -p "$RESULTS"
export OUT=/tmp/flagos-out; mkdir -p "$OUT"
for spec in "$@"; do
  label=${spec%%:*}; rest=${spec#*:}; secs=${rest%%:*}; cmd=${rest#*:}
  start=$(date +%s)
  timeout "$secs" bash -c "$cmd" > "$RESULTS/$label.txt" 2>&1
  rc=$?
  echo "== $label rc=$rc $(( $(date +%s) - start ))s" | tee -a "$RESULTS/summary.txt"
  tail -n 6 "$RESULTS/$label.txt" | tee -a "$RESULTS/summary.txt"
done
