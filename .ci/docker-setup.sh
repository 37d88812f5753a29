#!/usr/bin/env bash
# Make a Docker daemon answer, then make the local base image and the tf-cpu image.
#
# Idempotent: installs docker.io and debootstrap only when missing, starts dockerd
# only when no daemon answers (and records its pid in $LAUNCH_DOCKERD_PIDFILE so
# .ci/docker-teardown.sh stops only a daemon this script started), and the launch
# commands reuse what already exists. Needs root. See ../docs/docker.md.
set -euo pipefail

PIDFILE="${LAUNCH_DOCKERD_PIDFILE:-/tmp/launch-ci-dockerd.pid}"
LOGFILE="${LAUNCH_DOCKERD_LOG:-/tmp/launch-ci-dockerd.log}"
LAUNCH=("${PYTHON:-python3}" -m launcher)

log() { echo "[docker-setup] $*"; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if docker info >/dev/null 2>&1; then
  log "a Docker daemon already answers; not starting one"
else
  log "starting dockerd (no bridge, no iptables); log: $LOGFILE"
  # setsid: the daemon must not receive the CI shell's Ctrl-C or hang-up.
  setsid dockerd --iptables=false --bridge=none >"$LOGFILE" 2>&1 < /dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "dockerd exited; last lines of $LOGFILE:"; tail -n 20 "$LOGFILE"; exit 1
    fi
    sleep 1
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not answer within 60 s"; exit 1; }
fi
log "daemon: $(docker version --format '{{.Server.Version}}')"

"${LAUNCH[@]}" image bootstrap-base
"${LAUNCH[@]}" image build image=tf-cpu image.base=local
