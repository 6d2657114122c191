#!/usr/bin/env bash
# A real single-node Slurm (Debian 12: slurm-wlm 22.05, munge, MariaDB + slurmdbd so that
# `sacct` answers) for the cluster tests. Needs root and apt; no systemd.
#
#   tests/cluster/slurm.sh          install what is missing, start what is not running,
#                                   wait until the node is idle and a job really runs
#   tests/cluster/slurm.sh stop     stop the daemons this script started, by PID
#   tests/cluster/slurm.sh stop PIDFILE...   stop only those of them (the test fixture
#                                   stops just what its own start started)
#
# Idempotent: a second start only starts what is not running. Only daemons this script
# started are listed in $SLURM_BASE/started and stopped by `stop` (a munged or MariaDB
# that was already running is used and left alone). It writes /etc/slurm/slurm.conf,
# slurmdbd.conf and gres.conf, and refuses to replace such files that it did not write.
#
# The node offers one stand-in GPU (`Gres=gpu:1`, /dev/null as its device file), so a cell
# that asks for `--gpus=1` is scheduled and its request shows in sacct's AllocTRES;
# no CUDA is there, so such a cell records `unavailable`.
#
# Env: SLURM_BASE (default /tmp/trainbench-slurm), PARTITION (default debug).
# Adapted from the project's shared setup script (known to work on Debian 12).
set -euo pipefail
BASE=${SLURM_BASE:-/tmp/trainbench-slurm}
PARTITION=${PARTITION:-debug}
CLUSTER=trainbench
DBPASS=trainbench-slurm
HOST=$(hostname -s)
MARK="# written by trainbench tests/cluster/slurm.sh"
STARTED="$BASE/started"   # pid files of the daemons started here, one a line

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
started() { mkdir -p "$BASE"; echo "$1" >> "$STARTED"; }

stop_started() {   # [PIDFILE...]: only these (each must be listed in $STARTED)
  [ -s "$STARTED" ] || { echo "nothing started here to stop"; return 0; }
  local keep="$BASE/started.keep"
  : > "$keep"
  # reverse start order: slurmd, slurmctld, slurmdbd, mariadb, munged
  tac "$STARTED" | while read -r p; do
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF "$p"; then echo "$p" >> "$keep"; continue; fi
    if alive "$p"; then
      pid=$(cat "$p")
      kill "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
      echo "stopped $(basename "$p" .pid) (pid $pid)"
    fi
  done
  if [ -s "$keep" ]; then tac "$keep" > "$STARTED"; else rm -f "$STARTED"; fi
  rm -f "$keep"
}

if [ "$(id -u)" != 0 ]; then echo "tests/cluster/slurm.sh needs root" >&2; exit 2; fi
if [ "${1:-}" = stop ]; then shift; stop_started "$@"; exit 0; fi

# Write $2 to $1 unless a file there was not written by this script.
install_conf() {
  local dest=$1 new=$2
  if [ -e "$dest" ] && ! grep -qxF "$MARK" "$dest"; then
    echo "$dest exists and was not written by this script; not replacing it" >&2
    exit 3
  fi
  if cmp -s "$new" "$dest"; then rm -f "$new"; return 1; fi
  mv "$new" "$dest"
  return 0
}

# 1. packages
command -v apt-get >/dev/null || { echo "apt-get is not available" >&2; exit 4; }
pkgs="slurmctld slurmd slurm-client munge slurmdbd mariadb-server"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends $missing >/dev/null; }
fi

mkdir -p "$BASE"/{state,spool,log,mysql} /etc/slurm
getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >> /etc/hosts

# 2. munge (authentication between the Slurm daemons and clients)
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || {
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
  }
  chown -R munge:munge /etc/munge; chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge; chmod 755 /run/munge
  su -s /bin/sh munge -c '/usr/sbin/munged --force'
  for _ in $(seq 50); do munge -n | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  started /run/munge/munged.pid
fi

# 3. slurm.conf and gres.conf (node size from `slurmd -C`; ~1 GB left for the OS)
read -r CPUS SOCK CORES THREADS MEM < <(slurmd -C | head -1 | sed -E \
  's/.*CPUs=([0-9]+).*SocketsPerBoard=([0-9]+).*CoresPerSocket=([0-9]+).*ThreadsPerCore=([0-9]+).*RealMemory=([0-9]+).*/\1 \2 \3 \4 \5/')
MEM=$(( MEM > 2048 ? MEM - 1024 : MEM ))
cat > "$BASE/slurm.conf.new" <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
# Without a default, a job without --mem takes all of the node's memory.
DefMemPerCPU=1000
MinJobAge=300
MpiDefault=none
JobAcctGatherType=jobacct_gather/linux
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
NodeName=$HOST CPUs=$CPUS Boards=1 SocketsPerBoard=$SOCK CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$MEM Gres=gpu:1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
# slurmd drops a GPU without a device file; /dev/null stands in (nothing is bound: TaskPlugin=task/none)
printf '%s\nNodeName=%s Name=gpu File=/dev/null\n' "$MARK" "$HOST" > "$BASE/gres.conf.new"
CONF_CHANGED=0
install_conf /etc/slurm/slurm.conf "$BASE/slurm.conf.new" && CONF_CHANGED=1
install_conf /etc/slurm/gres.conf "$BASE/gres.conf.new" && CONF_CHANGED=1

# 4. MariaDB + slurmdbd (accounting: the executor plugin checks job states with sacct)
DB="$BASE/mysql"
if ! mariadb -uroot -e 'select 1' >/dev/null 2>&1; then
  mkdir -p /run/mysqld; chown mysql:mysql "$DB" /run/mysqld
  [ -d "$DB/mysql" ] || mariadb-install-db --user=mysql --datadir="$DB" >/dev/null
  nohup /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB" \
    --socket=/run/mysqld/mysqld.sock --pid-file="$DB/mariadb.pid" \
    --bind-address=127.0.0.1 --port=3306 --log-error="$DB/mariadb.err" \
    --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 >/dev/null 2>&1 &
  for _ in $(seq 150); do mariadb -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  started "$DB/mariadb.pid"
fi
mariadb -uroot <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
cat > "$BASE/slurmdbd.conf.new" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/slurmdbd.pid
EOF
chmod 600 "$BASE/slurmdbd.conf.new"
install_conf /etc/slurm/slurmdbd.conf "$BASE/slurmdbd.conf.new" || true
if ! alive "$BASE/slurmdbd.pid"; then
  /usr/sbin/slurmdbd
  for _ in $(seq 100); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.2; done
  started "$BASE/slurmdbd.pid"
fi

# 5. slurmctld + slurmd (restarted when the configuration changed)
for d in slurmctld slurmd; do
  if alive "$BASE/$d.pid" && [ "$CONF_CHANGED" = 1 ]; then
    pid=$(cat "$BASE/$d.pid"); kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  if ! alive "$BASE/$d.pid"; then
    /usr/sbin/$d
    for _ in $(seq 50); do alive "$BASE/$d.pid" && break; sleep 0.1; done
    grep -qxF "$BASE/$d.pid" "$STARTED" 2>/dev/null || started "$BASE/$d.pid"
  fi
done

# 6. wait until the node is idle and sacct answers; register the cluster
for i in $(seq 120); do
  st=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
  case "$st" in
    idle|mixed|allocated) break ;;
    down*|drain*|inval*) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 0.5
done
if [ "$i" -ge 120 ]; then
  echo "node not idle: '$st'" >&2
  tail -n 20 "$BASE/log/slurmctld.log" "$BASE/log/slurmd.log" >&2
  exit 1
fi
for _ in $(seq 60); do
  sacct -n -X >/dev/null 2>&1 \
    && sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" && break
  sleep 0.5
done
sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" \
  || sacctmgr -i add cluster "$CLUSTER" >/dev/null
timeout 120 srun -N1 -n1 -t 1 true   # smoke test: a job really runs
sinfo
echo "Slurm ready: partition $PARTITION, account root"
