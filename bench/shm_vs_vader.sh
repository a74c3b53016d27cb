#!/usr/bin/env bash
# Ballast's shared-memory transport (BALLAST_TRANSPORT=shm, one rank per process, every rank
# on this node) beside Open MPI's own shared memory, the `sm` BTL (vader:
# `mpirun --mca pml ob1 --mca btl self,vader`), side by side in one run, as ratios (issue 36):
#   1. ping-pong (bench/c/shm_pingpong.c, one program, -n 2, each rank bound to a core): blocks
#      of MPI_Send/MPI_Recv on MPI_COMM_WORLD alternating with blocks of ballast_send +
#      ballast_recv over shm, at 8 B, 64 KiB and 1 MiB: the median block's half round trip
#      (ns) and SIZE over it (MB/s, 10^6 B), and the median of the per-block ratios; 64 KiB
#      and 1 MiB also with BALLAST_SHM_CMA=off (chunked through the rings instead of one
#      process_vm_readv: vader uses CMA above its 4 KiB eager limit);
#   2. memory of the node at N = 4, 16, 64 processes (bench/c/shm_memory.c, oversubscribed):
#      in 20 rounds every rank sends 8 B to every other rank and receives 8 B from each (20
#      messages per pair and direction, past vader's btl_vader_fbox_threshold of 16, so that
#      every pair's fast box exists), then a barrier, then
#      the sum over the ranks of smaps_rollup's Pss (and Pss_Anon, Pss_File, Pss_Shmem, Rss):
#      raw MPI over vader; Ballast over shm with no MPI at all (a libballast built without
#      mpi; the ranks meet at the node's socket named by Open MPI's job id) at its defaults
#      and at vader's eager buffering (below) (shm never locks its pool or segment: only the
#      pages written are resident); and each program doing nothing but the
#      reading (`none`: no MPI_Init, no Ballast), the baseline that the growth is measured
#      from;
#   3. the seed's fanout (rank 0 sends 10 integers to each other rank) at N = 4, 16, 64:
#      `ballast fanout --transport shm --json` beside `--transport mpi` (Ballast on MPI's
#      native path over vader), both under the same mpirun (pml ob1, btl self,vader: the
#      shm run uses MPI only to meet), and shm from a `ballast` built without mpi (no MPI in
#      the process), and the seed's own MPI program over vader: rank 0's VmRSS and footprints
#      as `ballast fanout --json` gives them (docs/OUTPUT.md). VmRSS counts every resident
#      page a process maps, shared ones in full: over shm, the peers' segments rank 0 wrote
#      into; part 2's Pss divides them among the processes mapping them.
# Equal eager buffering: vader (Open MPI 4.1) buffers eager messages in fast boxes, one per
# sender-receiver pair once the sender passed btl_vader_fbox_threshold sends, at most
# btl_vader_fbox_max per receiver, btl_vader_fbox_size bytes each, and in eager fragments
# of btl_vader_eager_limit bytes taken from free lists of btl_vader_free_list_num fragments
# at start (growing on demand), in the sender's segment; its FIFO holds no buffers (4.1 has no
# btl_vader_fifo_size: a FIFO is a list of the senders' fragments). Ballast's per rank is its
# receive ring (srq_depth cells of buffer_size) plus its pool (buffer_count x buffer_size).
# The equal setting read from ompi_info: buffer_size = eager_limit, srq_depth = fbox_max (one
# cell per fast box a rank can receive into), buffer_count = free_list_num (one pool buffer
# per eager fragment a rank has to send from): 32 x 4 KiB + 8 x 4 KiB = 160 KiB per rank on
# both sides at Open MPI 4.1's defaults.
# Usage: bash bench/shm_vs_vader.sh [ROUNDS]   (default 5: each line is the median of ROUNDS
# runs; release builds into CARGO_TARGET_DIR, default the repository's target/)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

# Builds: libballast with mpi (the ping-pong meets through MPI) and without (the memory
# runs: no MPI in the process), the `ballast` command with and without mpi.
build() { "$@" >>"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; echo "bench/shm_vs_vader.sh: failed: $*" >&2; exit 1; }; }
build bash ci/install-capi.sh "$work/prefix-mpi" --features mpi
build bash ci/install-capi.sh "$work/prefix"
build cargo build --release --locked -p ballast --features ballast/mpi
cp "$CARGO_TARGET_DIR/release/ballast" "$work/ballast-mpi"
build cargo build --release --locked -p ballast
cp "$CARGO_TARGET_DIR/release/ballast" "$work/ballast-nompi"
pc() { PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --cflags --libs ballast; }
# shellcheck disable=SC2046 # pkg-config's flags are words
mpicc -O2 -std=c11 -Wall -Wextra -Werror bench/c/shm_pingpong.c $(pc "$work/prefix-mpi") -o "$work/shm_pingpong"
mpicc -O2 -std=c11 -Wall -Wextra -Werror -DSHM_MEMORY_MPI bench/c/shm_memory.c -o "$work/shm_memory_mpi"
# shellcheck disable=SC2046
cc -O2 -std=c11 -Wall -Wextra -Werror -DSHM_MEMORY_BALLAST bench/c/shm_memory.c $(pc "$work/prefix") -o "$work/shm_memory_ballast"
mpicc -O2 -Wall -Werror bench/seed/seed_fanout.c -o "$work/seed_fanout"
if ldd "$work/shm_memory_ballast" "$work/ballast-nompi" | grep -q libmpi; then
    echo "bench/shm_vs_vader.sh: the no-MPI programs link libmpi" >&2
    exit 1
fi

base=(--oversubscribe)
[ "$(id -u)" = 0 ] && base+=(--allow-run-as-root)
vader=(--mca pml ob1 --mca btl self,vader)
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# The median of each of the columns FIRST..LAST of FILE's lines, space-separated.
medians() {
    local f=$1 k out=()
    for k in $(seq "$2" "$3"); do out+=("$(awk -v k="$k" '{print $k}' "$f" | median)"); done
    echo "${out[*]}"
}

vparam() { ompi_info --param btl vader --level 9 --parsable | sed -n "s/^mca:btl:vader:param:btl_vader_$1:value://p"; }
fbox_max=$(vparam fbox_max)
fbox_size=$(vparam fbox_size)
eager_limit=$(vparam eager_limit)
list_num=$(vparam free_list_num)
equal=(BALLAST_SRQ_DEPTH="$fbox_max" BALLAST_BUFFER_SIZE="$eager_limit" BALLAST_BUFFER_COUNT="$list_num")

echo "shm_vs_vader: $rounds rounds, $(date -u +%FT%TZ), $(git describe --always --dirty 2>/dev/null || echo unknown), load $(cut -d' ' -f1-3 /proc/loadavg), nproc $(nproc), $(mpirun --version 2>/dev/null | head -n 1), $(uname -r)"
echo "CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

# ---- 1. ping-pong ----
echo
echo "## 1. ping-pong, 2 processes (median of $rounds runs; in each run the median block and the median per-block ratio)"
echo "command: BALLAST_TRANSPORT=shm [BALLAST_SHM_CMA=off] mpirun ${base[*]} ${vader[*]} --bind-to core -x BALLAST_TRANSPORT [-x BALLAST_SHM_CMA] -n 2 shm_pingpong SIZE ITERS BLOCKS"
echo "ballast: cma = its defaults (messages above 32 KiB by one process_vm_readv), rings = BALLAST_SHM_CMA=off (every message in chunks through the rings)"
printf '%-8s %-7s %6s %6s %10s %12s %11s %13s %10s %10s\n' size ballast iters blocks "mpi ns" "ballast ns" "mpi MB/s" "ballast MB/s" "lat b/m" "bw b/m"
for run in 8:cma 65536:cma 65536:rings 1048576:cma 1048576:rings; do
    size=${run%%:*}
    how=${run#*:}
    case $size in
        8) args=(5000 21) ;;
        65536) args=(200 21) ;;
        *) args=(50 21) ;;
    esac
    envs=(BALLAST_TRANSPORT=shm)
    [ "$how" = rings ] && envs+=(BALLAST_SHM_CMA=off)
    xs=()
    for e in "${envs[@]}"; do xs+=(-x "${e%%=*}"); done
    : >"$work/pp"
    for _ in $(seq "$rounds"); do
        env "${envs[@]}" mpirun "${base[@]}" "${vader[@]}" --bind-to core "${xs[@]}" -n 2 \
            "$work/shm_pingpong" "$size" "${args[@]}" 2>"$work/pp.err" >>"$work/pp" \
            || { cat "$work/pp.err" >&2; exit 1; }
    done
    sed 's/^/  run: /' "$work/pp"
    grep -m 1 '^#' "$work/pp.err" | sed 's/^# /  ballast /'
    # shellcheck disable=SC2046
    printf '%-8s %-7s %6s %6s %10.1f %12.1f %11.2f %13.2f %10.4f %10.4f\n' "$size" "$how" "${args[@]}" $(medians "$work/pp" 5 10)
done

# ---- 2. memory of the node ----
echo
echo "## 2. memory of the node, the sum over the N processes (kB; median of $rounds runs)"
echo "vader (ompi_info --param btl vader --level 9):"
ompi_info --param btl vader --level 9 | grep -E "fbox|fifo|segment|eager|max_send|rndv|free_list" | grep 'parameter "' \
    | sed 's/^ *MCA btl vader: parameter /  /; s/, data source.*//'
echo "equal eager buffering per rank: vader fbox_max $fbox_max x fbox_size $fbox_size + free_list_num $list_num x eager_limit $eager_limit = $((fbox_max * fbox_size + list_num * eager_limit)) B;" \
    "Ballast ${equal[*]}: srq_depth x buffer_size + buffer_count x buffer_size = $((fbox_max * eager_limit + list_num * eager_limit)) B" \
    "(defaults: 64 x 8192 + 64 x 8192 = 1048576 B)"
xrounds=20
echo "commands (DIR empty, N processes; ${xrounds} exchange rounds of 8 B):"
echo "  none:    mpirun ${base[*]} -n N shm_memory_{mpi,ballast} none $xrounds 8 DIR"
echo "  mpi:     mpirun ${base[*]} ${vader[*]} -n N shm_memory_mpi mpi $xrounds 8 DIR"
echo "  ballast: BALLAST_TRANSPORT=shm [${equal[*]}] mpirun ${base[*]} -x BALLAST_... -n N shm_memory_ballast ballast $xrounds 8 DIR"
echo "growth = Pss - the same program's \`none\`, growth a+s = the same of Pss_Anon + Pss_Shmem, /N = per process; fp0 = rank 0's ballast_footprint total and shm_segment (B); node shm = the sum of the ranks' shm_segment (B)"
mem() { # label n [VAR=value...] -- [mpirun-flags...] -- program mode: one reading appended to $work/mem.<label>.<n>
    local label=$1 n=$2 envs=() flags=() d
    shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    while [ "$1" != -- ]; do flags+=("$1"); shift; done
    shift
    d=$(mktemp -d "$work/dir.XXXXXX")
    local xs=() e
    for e in "${envs[@]}"; do xs+=(-x "${e%%=*}"); done
    env "${envs[@]}" mpirun "${base[@]}" "${flags[@]}" "${xs[@]}" -n "$n" "$@" "$xrounds" 8 "$d" \
        2>>"$work/mem.err" >>"$work/mem.$label.$n" || { cat "$work/mem.err" >&2; exit 1; }
    rm -rf "$d"
}
labels=(none-mpi mpi none-ballast ballast ballast-equal)
for n in 4 16 64; do
    for _ in $(seq "$rounds"); do # interleaved: every configuration once per round
        mem none-mpi "$n" -- -- "$work/shm_memory_mpi" none
        mem mpi "$n" -- "${vader[@]}" -- "$work/shm_memory_mpi" mpi
        mem none-ballast "$n" -- -- "$work/shm_memory_ballast" none
        mem ballast "$n" BALLAST_TRANSPORT=shm -- -- "$work/shm_memory_ballast" ballast
        mem ballast-equal "$n" BALLAST_TRANSPORT=shm "${equal[@]}" -- -- "$work/shm_memory_ballast" ballast
    done
done
# Medians per configuration; growth = the reading minus the same program's `none`, of Pss
# and of Pss_Anon + Pss_Shmem (the job's own memory: Pss_File, the libraries' pages, is
# divided with every other process on the machine mapping them, so it moves with what else
# runs, e.g. other MPI jobs).
declare -A pss own
printf '%-4s %-14s %9s %9s %9s %9s %10s %9s %8s %9s %8s %9s %9s %10s\n' N run Pss Pss_Anon Pss_File Pss_Shmem Rss \
    "growth" "/N" "growth a+s" "/N" "fp0 B" "fp0 shm B" "node shm B"
for n in 4 16 64; do
    for label in "${labels[@]}"; do
        # columns: 6 Pss, 7 Pss_Anon, 8 Pss_File, 9 Pss_Shmem, 10 Rss, 11 fp0 total, 12 fp0 shm, 13 sum total, 14 sum shm
        read -r p anon file shmem rss fp0 fp0shm _ nodeshm <<<"$(medians "$work/mem.$label.$n" 6 14)"
        pss[$label.$n]=$p
        own[$label.$n]=$((anon + shmem))
        case $label in
            none-*) ref=$label ;;
            mpi) ref=none-mpi ;;
            *) ref=none-ballast ;;
        esac
        g=$((p - ${pss[$ref.$n]}))
        ga=$((${own[$label.$n]} - ${own[$ref.$n]}))
        pss[$label.$n.growth]=$g
        own[$label.$n.growth]=$ga
        printf '%-4s %-14s %9s %9s %9s %9s %10s %9s %8s %9s %8s %9s %9s %10s\n' "$n" "$label" "$p" "$anon" "$file" "$shmem" "$rss" \
            "$g" "$((g / n))" "$ga" "$((ga / n))" "$fp0" "$fp0shm" "$nodeshm"
    done
done
echo "ratios, Ballast / MPI: Pss sums, Pss growth, Pss_Anon + Pss_Shmem growth (a+s)"
printf '%-4s %-14s %10s %10s %12s\n' N run "Pss" "growth" "growth a+s"
for n in 4 16 64; do
    for label in ballast ballast-equal; do
        awk -v n="$n" -v l="$label" -v p="${pss[$label.$n]}" -v mp="${pss[mpi.$n]}" \
            -v g="${pss[$label.$n.growth]}" -v mg="${pss[mpi.$n.growth]}" \
            -v a="${own[$label.$n.growth]}" -v ma="${own[mpi.$n.growth]}" \
            'BEGIN {printf "%-4s %-14s %10.4f %10.4f %12.4f\n", n, l, p / mp, g / mg, a / ma}'
    done
done
echo "runs (mode N rounds size Pss Pss_Anon Pss_File Pss_Shmem Rss fp0 fp0_shm fp_sum fp_shm_sum):"
for n in 4 16 64; do for label in "${labels[@]}"; do sed "s/^/  $label: /" "$work/mem.$label.$n"; done; done

# ---- 3. the seed's fanout ----
echo
echo "## 3. the seed's fanout: rank 0 sends 10 integers to each of N-1 ranks (rank 0's process, KiB; footprints B; median of $rounds runs)"
echo "commands: mpirun ${base[*]} ${vader[*]} -n N ballast fanout --transport shm|mpi --json;" \
    "mpirun ${base[*]} -n N ballast(no mpi) fanout --transport shm --json; mpirun ${base[*]} ${vader[*]} -n N seed_fanout"
fan() { # label n mpirun-flags... -- command...: one line appended to $work/fan.<label>.<n>
    local label=$1 n=$2 flags=()
    shift 2
    while [ "$1" != -- ]; do flags+=("$1"); shift; done
    shift
    mpirun "${base[@]}" "${flags[@]}" -n "$n" "$@" >"$work/fan.out" 2>>"$work/fan.err" || { cat "$work/fan.err" >&2; exit 1; }
    if [ "$label" = seed ]; then # seed_fanout stage=... vm_rss_kb=..: start, after init, after sends
        awk '/^seed_fanout/ {for (i = 2; i <= NF; i++) {split($i, kv, "="); v[$2, kv[1]] = kv[2]}}
             END {s = v["stage=before_init", "vm_rss_kb"]; i = v["stage=after_init", "vm_rss_kb"]; a = v["stage=after_sends", "vm_rss_kb"];
                  print s, i, a, a - s, v["stage=after_sends", "vm_lck_kb"], 0, 0, 0, "-"}' "$work/fan.out" >>"$work/fan.$label.$n"
    else
        python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
s, b, a = j["start"], j["before"], j["after"]
print(s["vm_rss_kb"], b["vm_rss_kb"], a["vm_rss_kb"], a["vm_rss_kb"] - s["vm_rss_kb"], a["vm_lck_kb"],
      a["footprint_bytes"], a["world_footprint_bytes"], j["predicted_footprint_bytes"],
      "yes" if j["model_matches_accounting"] else "no", j["transport"])' "$work/fan.out" >>"$work/fan.$label.$n"
    fi
}
fan_labels=(shm mpi shm-no-mpi seed)
for n in 4 16 64; do
    for _ in $(seq "$rounds"); do
        fan shm "$n" "${vader[@]}" -- "$work/ballast-mpi" fanout --transport shm --json
        fan mpi "$n" "${vader[@]}" -- "$work/ballast-mpi" fanout --transport mpi --json
        fan shm-no-mpi "$n" -- "$work/ballast-nompi" fanout --transport shm --json
        fan seed "$n" "${vader[@]}" -- "$work/seed_fanout"
    done
done
echo "columns: VmRSS at start (before MPI_Init / the transport), VmRSS before the fanout (seed: after MPI_Init), after, after - start, VmLck after;"
echo "  footprint rank 0, all ranks, predicted rank 0, model = accounting on every rank"
printf '%-4s %-11s %9s %9s %9s %9s %8s %10s %12s %12s %6s\n' N run start before after "after-st" VmLck "fp rank 0" "fp all" "pred rank 0" model
for n in 4 16 64; do
    for label in "${fan_labels[@]}"; do
        read -r st be af d lck fp0 fpall pred <<<"$(medians "$work/fan.$label.$n" 1 8)"
        model=$(awk '{print $9}' "$work/fan.$label.$n" | sort -u | tr '\n' ' ')
        [ "$label" = seed ] && fp0=- fpall=- pred=- # MPI's own program: no footprint
        printf '%-4s %-11s %9s %9s %9s %9s %8s %10s %12s %12s %6s\n' "$n" "$label" "$st" "$be" "$af" "$d" "$lck" "$fp0" "$fpall" "$pred" "$model"
    done
done
echo "ratios of the medians: after-start VmRSS shm / mpi and shm-no-mpi / mpi; footprint rank 0 and all ranks shm / mpi"
echo "  (over mpi the footprint is Ballast's own state only: MPI's buffers are in VmRSS, not modelled)"
printf '%-4s %12s %19s %12s %12s\n' N "VmRSS shm/mpi" "shm-no-mpi/mpi" "fp0 shm/mpi" "fp all"
for n in 4 16 64; do
    read -r _ _ _ sd _ sf sa _ <<<"$(medians "$work/fan.shm.$n" 1 8)"
    read -r _ _ _ md _ mf ma _ <<<"$(medians "$work/fan.mpi.$n" 1 8)"
    read -r _ _ _ nd _ <<<"$(medians "$work/fan.shm-no-mpi.$n" 1 8)"
    awk -v n="$n" -v sd="$sd" -v md="$md" -v nd="$nd" -v sf="$sf" -v mf="$mf" -v sa="$sa" -v ma="$ma" \
        'BEGIN {printf "%-4s %12.4f %19.4f %12.4f %12.4f\n", n, sd / md, nd / md, sf / mf, sa / ma}'
done
echo "end: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
