#!/usr/bin/env bash
# Stop the Docker daemon that .ci/docker-setup.sh started, and only that one.
set -euo pipefail

PIDFILE="${LAUNCH_DOCKERD_PIDFILE:-/tmp/launch-ci-dockerd.pid}"
[[ -f "$PIDFILE" ]] || { echo "[docker-teardown] no daemon was started by docker-setup.sh"; exit 0; }
pid="$(cat "$PIDFILE")"
if kill -0 "$pid" 2>/dev/null; then
  echo "[docker-teardown] stopping dockerd (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
fi
rm -f "$PIDFILE"
