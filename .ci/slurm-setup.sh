#!/usr/bin/env bash
# Bring up a single-node Slurm cluster on this machine: munged, slurmctld, slurmd, one
# partition `debug` holding this host (../docs/testing.md#slurm-in-the-tests-and-ci).
#
# Idempotent: installs slurm-wlm and munge only when missing, writes the munge key and
# /etc/slurm/slurm.conf only when absent, and starts each daemon only when none runs.
# The pid of every daemon started here goes to $LAUNCH_SLURM_STATE/pids, so
# .ci/slurm-teardown.sh stops only those. Needs root. Exit 0 when `srun` runs a job.
set -euo pipefail

STATE="${LAUNCH_SLURM_STATE:-/tmp/launch-ci-slurm}"
PIDS="$STATE/pids"
mkdir -p "$STATE"
touch "$PIDS"
log() { echo "[slurm-setup] $*"; }
running() { pgrep -x "$1" >/dev/null 2>&1; }

missing=()
command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || missing+=(munge)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

HOST="$(hostname -s)"
if [[ ! -f /etc/munge/munge.key ]]; then
  log "creating /etc/munge/munge.key"
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  echo /etc/munge/munge.key >>"$STATE/created"
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge

if [[ ! -f /etc/slurm/slurm.conf ]]; then
  log "writing /etc/slurm/slurm.conf (node $HOST, $(nproc) CPUs, partition debug)"
  mkdir -p /etc/slurm
  cat >/etc/slurm/slurm.conf <<CONF
ClusterName=launch-ci
SlurmctldHost=$HOST
AuthType=auth/munge
CredType=cred/munge
# A requeued job (a preemption) starts again after cred_expire seconds: 120 by default.
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
NodeName=$HOST CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
  echo /etc/slurm/slurm.conf >>"$STATE/created"
fi
mkdir -p /var/spool/slurmctld /var/spool/slurmd

# Start a daemon in the foreground mode (-D) under setsid, so its pid is ours to stop.
start() {
  local name="$1"; shift
  if running "$name"; then log "$name already runs; not starting one"; return; fi
  log "starting $name"
  setsid "$@" >"$STATE/$name.out" 2>&1 </dev/null &
  echo "$name $!" >>"$PIDS"
}
# munged refuses to run as root with its directories owned by munge: run it as munge.
start munged setpriv --reuid=munge --regid=munge --init-groups munged -F
for _ in $(seq 1 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
munge -n | unmunge >/dev/null || { log "munge does not answer"; cat "$STATE/munged.out"; exit 1; }
start slurmctld slurmctld -D
for _ in $(seq 1 30); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 1; done
start slurmd slurmd -D
for _ in $(seq 1 60); do
  state="$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)"
  [[ "$state" == idle* || "$state" == mixed* || "$state" == alloc* ]] && break
  sleep 1
done
if ! timeout 60 srun -N1 -p debug hostname >/dev/null; then
  log "srun did not run a job; sinfo says: $(sinfo 2>&1 | tail -n +2)"
  tail -n 20 "$STATE"/slurmctld.log "$STATE"/slurmd.log 2>/dev/null || true
  exit 1
fi
log "ready: $(sinfo -h -o '%P %a %D %T %N')"
