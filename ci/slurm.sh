#!/usr/bin/env bash
# `ballast run` over the shared-memory transport under a real one-node Slurm on localhost,
# started by this script: `srun -n 4 --mpi=none ballast run --transport shm` (srun's
# SLURM_PROCID/NTASKS give the ranks, SLURM_JOB_ID.SLURM_STEP_ID the job, no MPI) must write
# the same out.dat as one local rank.
# Usage: bash ci/slurm.sh /abs/path/to/ballast
#
# Optional: installs slurmctld, slurmd, slurm-client and munge with apt when missing (with
# no service started by their install), then starts munged, slurmctld and slurmd by hand
# (no systemd), as root, from a generated slurm.conf (SLURM_CONF) in a temporary directory:
# one node (this host, 127.0.0.1, its CPUs as `slurmd -C` reports them), one partition,
# select/cons_tres, proctrack/linuxproc, task/none (no cgroup), no accounting, its own munge
# key and socket, and free ports (from 6817 up). Skips (exit 0, a line starting
# `ci/slurm.sh: SKIP` with the reason and the daemons' log tails) when that Slurm cannot be
# installed, started, or launch a task; fails when srun ran but ballast failed or the
# outputs differ. On exit, whatever happens, it cancels the jobs, stops the daemons, kills by
# pid anything they started that is still there (found by a marker in its environment or a
# file of the temporary directory it holds open), and removes that directory
# (/tmp/ballast-slurm.lock, which keeps two runs apart, stays). About 3 s with the packages
# installed (10 s more to install them); at most about 5 min when every bounded wait runs out.
# In a container: no cgroup is needed (proctrack/linuxproc, task/none), nor systemd.
set -euo pipefail
t_start=$(date +%s)
say() { echo "ci/slurm.sh: $*"; }
die() { echo "ci/slurm.sh: FAIL: $*" >&2; exit 1; }

ballast_bin=${1:?usage: bash ci/slurm.sh /abs/path/to/ballast}
{ [ -x "$ballast_bin" ] && [ -f "$ballast_bin" ]; } || die "$ballast_bin is not an executable"
ballast_bin=$(cd "$(dirname "$ballast_bin")" && pwd)/$(basename "$ballast_bin")
cd "$(dirname "$0")/.."

tmp=
daemons=() names=() # the `timeout` wrappers of munged, slurmctld, slurmd: pids, names
skip() {
    say "SKIP: $*"
    if [ -n "$tmp" ]; then
        local f
        for f in "$tmp"/log/*.out; do # each daemon's stderr (its log and what came before it)
            [ -s "$f" ] || continue
            echo "ci/slurm.sh: --- last lines of $(basename "$f" .out)"
            tail -n 12 "$f" | sed 's/^/    /'
        done
    fi
    exit 0
}

# Packages. Their postinst scripts start munge, slurmd and slurmctld through invoke-rc.d
# (init.d scripts without systemd): a policy-rc.d that denies it is put in place for the
# install when the machine has none (container images usually have one).
need_pkgs=()
for c in munged:munge slurmctld:slurmctld slurmd:slurmd srun:slurm-client sinfo:slurm-client; do
    command -v "${c%%:*}" >/dev/null 2>&1 || need_pkgs+=("${c#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || skip "no apt-get to install ${need_pkgs[*]}"
    [ "$(id -u)" = 0 ] || skip "not root: cannot install ${need_pkgs[*]}"
    mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
    say "installing ${need_pkgs[*]}"
    policy=/usr/sbin/policy-rc.d own_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    apt_log=$(mktemp)
    apt_ok=1
    { timeout 300 apt-get update -q && DEBIAN_FRONTEND=noninteractive timeout 600 \
        apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"; } >"$apt_log" 2>&1 || apt_ok=
    [ -z "$own_policy" ] || rm -f "$policy"
    if [ -z "$apt_ok" ]; then
        tail -n 10 "$apt_log" | sed 's/^/    /'
        rm -f "$apt_log"
        skip "apt-get could not install ${need_pkgs[*]} (above)"
    fi
    rm -f "$apt_log"
fi
[ "$(id -u)" = 0 ] || skip "not root: slurmd must run as root to start tasks"
# One run at a time on a machine (two would pick the same free ports); the lock file stays.
exec 9>/tmp/ballast-slurm.lock
timeout 300 flock 9 || skip "another ci/slurm.sh held /tmp/ballast-slurm.lock for 300 s"

# The temporary directory: munged wants its socket's directory searchable by all and its
# key's directory private.
tmp=$(mktemp -d /tmp/ballast-slurm.XXXXXX)
chmod 755 "$tmp"
mkdir -p "$tmp/munge-run" "$tmp/munge-key" "$tmp/state" "$tmp/spool" "$tmp/run" "$tmp/log" "$tmp/work"
chmod 700 "$tmp/munge-key"
# Every process started from here on (the daemons, srun and its tasks: srun exports the
# environment) carries this variable, which the clean-up looks for in /proc/*/environ.
export BALLAST_SLURM_CI=$tmp
cleanup() {
    local rc=$? pid i pids
    trap - EXIT INT TERM
    export -n BALLAST_SLURM_CI # so that the commands below do not carry the marker
    if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ] && [ ${#daemons[@]} -ge 2 ]; then
        timeout 10 scancel --full --quiet "--partition=ci" >/dev/null 2>&1 || true
        for i in $(seq 20); do
            [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do kill -TERM "${daemons[$i]}" 2>/dev/null || true; done
    for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null || true; done
    # Anything left (a step that did not end): a process with the marker in its environment
    # (the tasks, srun), or with a file of $tmp open (slurmstepd clears its environment but
    # keeps slurmd's log open). The daemons were stopped first so as to start nothing more.
    for i in 1 2; do
        mapfile -t pids < <({
            grep -lzx "BALLAST_SLURM_CI=$tmp" /proc/[0-9]*/environ 2>/dev/null || true
            find /proc/[0-9]*/fd -maxdepth 1 -lname "$tmp/*" 2>/dev/null || true
        } | cut -d/ -f3 | sort -u | grep -vx -e $$ -e "$BASHPID")
        [ ${#pids[@]} -gt 0 ] || break
        echo "ci/slurm.sh: killing what this run left: ${pids[*]}" >&2
        kill -KILL "${pids[@]}" 2>/dev/null || true
        sleep 0.5
    done
    cd /
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Free ports (a port answered on 127.0.0.1 is taken), from Slurm's defaults up.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p
    for p in $(seq "$1" $(($1 + 200))); do port_free "$p" && { echo "$p"; return 0; }; done
    return 1
}
ctld_port=$(free_port 6817) || skip "no free TCP port in 6817-7017"
slurmd_port=$(free_port $((ctld_port + 1))) || skip "no free TCP port above $ctld_port"

# The daemons run in the foreground of a `timeout` (stopped through it: timeout passes its
# TERM on, then KILLs after 5 s), a bound should this script be killed before its trap runs.
start() { # name, command...
    local name=$1
    shift
    timeout -k 5 900 "$@" >"$tmp/log/$name.out" 2>&1 9>&- &
    daemons+=($!) names+=("$name")
}

# munge: its own key and socket.
head -c 1024 /dev/urandom >"$tmp/munge-key/munge.key"
chmod 400 "$tmp/munge-key/munge.key"
munge_sock=$tmp/munge-run/munge.sock
start munged munged -F --socket="$munge_sock" --key-file="$tmp/munge-key/munge.key" \
    --pid-file="$tmp/munge-run/munged.pid" --seed-file="$tmp/munge-key/munged.seed" \
    --log-file="$tmp/log/munged.log"
for i in $(seq 50); do
    [ -S "$munge_sock" ] && break
    kill -0 "${daemons[0]}" 2>/dev/null || break
    sleep 0.2
done
timeout 10 munge -n -S "$munge_sock" 2>>"$tmp/log/munged.out" | timeout 10 unmunge -S "$munge_sock" >/dev/null 2>&1 \
    || skip "munged did not start (its own key and socket in $tmp)"

# slurm.conf: this host as the one node, at 127.0.0.1.
host=$(hostname -s)
hw=$(SLURM_CONF=/dev/null timeout 30 slurmd -C 2>/dev/null | sed -n 's/^NodeName=[^ ]* //p' | sed 's/ *RealMemory=[0-9]*//')
case "$hw" in *CPUs=[0-9]*) ;; *) skip "slurmd -C did not report this machine's CPUs" ;; esac
cpus=$(echo "$hw" | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
export SLURM_CONF=$tmp/slurm.conf
: >"$tmp/plugstack.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=ballastci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$tmp/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
InactiveLimit=0
MailProg=/bin/true
KillWait=5
MinJobAge=10
NodeName=$host NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=10 State=UP
EOF

start slurmctld slurmctld -D -i -f "$SLURM_CONF"
start slurmd slurmd -D -f "$SLURM_CONF"

# The node idle within 60 s.
state=
for i in $(seq 120); do
    state=$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null || true)
    [ "$state" = idle ] && break
    for j in "${!daemons[@]}"; do
        kill -0 "${daemons[$j]}" 2>/dev/null \
            || skip "${names[$j]} exited at start, saying '$(tail -n 1 "$tmp/log/${names[$j]}.out")'"
    done
    sleep 0.5
done
[ "$state" = idle ] || skip "node $host not idle within 60 s (sinfo says '${state:-nothing}')"
version=$(sinfo --version 2>/dev/null || echo slurm)
say "$version up: node $host ($cpus CPUs) idle, ports $ctld_port/$slurmd_port, in $(($(date +%s) - t_start)) s"

# A long command runs in the background and is waited for, so that a TERM or INT to this
# script runs the clean-up at once (bash runs traps only between foreground commands).
bounded() {
    "$@" &
    wait $!
}

cd "$tmp/work"
# Can this Slurm start tasks at all? If not, that is this machine, not ballast.
probe_log=$tmp/log/srun-probe.out
if ! bounded timeout 30 srun -n 4 -O --mpi=none -t 1 -J probe /bin/true >"$probe_log" 2>&1; then
    skip "Slurm is up but cannot launch tasks here: srun -n 4 /bin/true said '$(tail -n 1 "$probe_log")'"
fi

args=(run --synthetic 2000 --synapses-per-cell 150 --tstop 50 --memory-scale 0.001)
bounded timeout 60 "$ballast_bin" "${args[@]}" --ranks 1 --lb-mode RoundRobin --output ref >ref.log 2>&1 \
    || { tail -n 20 ref.log >&2; die "ballast run --ranks 1 (the reference) failed (above)"; }
rc=0
bounded timeout 90 srun -n 4 -O --mpi=none -t 1 --kill-on-bad-exit=1 -J ballast-shm \
    "$ballast_bin" "${args[@]}" --transport shm --output shm4 >shm4.log 2>&1 || rc=$?
if [ $rc != 0 ]; then
    tail -n 30 shm4.log >&2
    [ $rc != 124 ] || rc="124 (timed out after 90 s)"
    die "srun -n 4 ballast run --transport shm exited with $rc (above)"
fi
{ grep -q '"transport": "shm"' shm4/report.json && grep -q '"ranks": 4,' shm4/report.json; } \
    || die "shm4/report.json does not say transport shm over 4 ranks"
cmp ref/out.dat shm4/out.dat || die "srun -n 4 ballast run --transport shm: out.dat differs from local"
spikes=$(sed -n 's/^ *"spikes": \([0-9]*\),$/\1/p' shm4/report.json)
say "4 ranks over shm under srun, ${spikes:-?} spikes, $(($(date +%s) - t_start)) s in all"
say "srun -n 4 ballast run --transport shm: out.dat identical to local"
