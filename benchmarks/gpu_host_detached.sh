#!/usr/bin/env bash
# The GPU-host sweep detached from the call that starts it: a lent machine's calls last
# at most 10 minutes, a run with more repeats (or longer windows) longer than that
# (benchmarks/README.md).
#   benchmarks/gpu_host_detached.sh start NAME
#       start run NAME (results/NAME) in its own session (setsid), --cores $(nproc)
#   benchmarks/gpu_host_detached.sh wait NAME SECONDS [OUT]
#       wait up to SECONDS for it; once it has finished, say its exit status and wall
#       seconds, and with OUT pack its records, references, logs and tables into
#       OUT/NAME.tgz beside its console log OUT/NAME.log. Still running: exit 3.
# SUITE (default benchmarks/suites/gpu-host.yaml) names another config.
set -euo pipefail
action=${1:?start or wait}
name=${2:?run name}
suite=${SUITE:-benchmarks/suites/gpu-host.yaml}
dir=results/$name
log=results/$name.console.log
finished=results/$name.exit
mkdir -p results
case $action in
start)
    if [ -e "$finished" ] || [ -e "$dir" ]; then
        echo "results/$name exists: choose another NAME" >&2
        exit 2
    fi
    setsid nohup bash -c '
        start=$(date +%s)
        .venv/bin/snakemake --cores "$(nproc)" --keep-going "$1/tables/runs.csv" \
            --configfile "$2" --config run_name="$3" && rc=0 || rc=$?
        echo "$rc $(( $(date +%s) - start ))" > "$4.tmp" && mv "$4.tmp" "$4"
    ' _ "$dir" "$suite" "$name" "$finished" > "$log" 2>&1 < /dev/null &
    echo "started $name (console: $log)"
    ;;
wait)
    limit=${3:?seconds to wait}
    out=${4:-}
    end=$(( $(date +%s) + limit ))
    while [ ! -e "$finished" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    if [ ! -e "$finished" ]; then
        echo "$name still running: $(tail -n 1 "$log")"
        exit 3
    fi
    read -r rc seconds < "$finished"
    echo "$name finished: exit $rc after $seconds s"
    if [ -n "$out" ]; then
        tar czf "$out/$name.tgz" -C "$dir" runs references logs tables
        cp "$log" "$out/$name.log"
    fi
    ;;
*)
    echo "unknown action $action: start or wait" >&2
    exit 2
    ;;
esac
