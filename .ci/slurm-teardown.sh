#!/usr/bin/env bash
# Stop the Slurm and munge daemons that .ci/slurm-setup.sh started, and only those.
set -euo pipefail

STATE="${LAUNCH_SLURM_STATE:-/tmp/launch-ci-slurm}"
PIDS="$STATE/pids"
[[ -s "$PIDS" ]] || { echo "[slurm-teardown] no daemon was started by slurm-setup.sh"; exit 0; }
# Reverse order: slurmd, slurmctld, then munged.
tac "$PIDS" | while read -r name pid; do
  if kill -0 "$pid" 2>/dev/null; then
    echo "[slurm-teardown] stopping $name (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  fi
done
: >"$PIDS"
