#!/usr/bin/env bash
# Data-parallel training across two and three hosts, and faults between them. Each host is a
# network namespace with one link (a veth pair) into a bridge; mpirun runs in host 0 and starts
# the other hosts' daemons through multihost/agent.sh, as it would over ssh, and every byte
# between ranks crosses those links over TCP (shared memory is excluded).
#   1. 2 and 3 hosts: each rank runs in its own namespace; train_log.csv and both checkpoints are
#      byte for byte those of one process with --grad-accum N; the bytes crossing a host's link
#      per step are what docs/distributed.md predicts, 2 (N - 1)/N of the gradient each way;
#   2. delay (5 ms each way) and loss (1 %) on one host's link (tc netem, or multihost/wire.py
#      where the kernel has no netem): still byte-identical, slower by a measured amount;
#   3. one host's link limited to 1 Gbit/s and to 10 Mbit/s (tc tbf): still byte-identical; at
#      10 Mbit/s a run takes at least its bytes over the rate a step;
#   4. one host's link cut mid-run: every rank and mpirun exit within 60 s (Open MPI's keepalive
#      set to notice in about 11 s), naming the host lost; the last checkpoint evaluates; resumed
#      by one process it ends byte for byte where the run never cut ends, and resumed on two
#      hosts where one process resuming with --grad-accum 2 ends.
# In the suite `long` (scripts/test --full). Skipped (77), saying why, without MPI or where
# namespaces, veth pairs or bridges cannot be made (not root, a container without them).
# Usage: multihost_test.sh MINIGPT HAVE_MPI
# Single quotes that keep $ for the ranks' own sh are meant.
# shellcheck disable=SC2016
set -euo pipefail
minigpt=$1
have_mpi=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/multihost
skip() {
  echo "skipped: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
[ "$have_mpi" = true ] || skip "this build has no MPI"
[ "$(id -u)" -eq 0 ] || skip "network namespaces and links need root"
for c in ip tc mpirun unshare python3 bc; do command -v $c > /dev/null || skip "$c is not installed"; done

# Namespace names carry this run's pid, so two runs never touch each other's links.
pfx=ag$$
export AG_NETNS_PREFIX=$pfx
net=10.77.0
dir=$(mktemp -d)
wires=()
# Everything this run made: relays, processes left in its namespaces, the namespaces (their
# links go with them), the scratch directory.
teardown() {
  local p n
  for p in "${wires[@]}"; do
    kill "$p" 2> /dev/null || true
    wait "$p" 2> /dev/null || true
  done
  wires=()
  for n in $(ip netns list | awk -v p="$pfx" 'index($1, p) == 1 { print $1 }'); do
    for p in $(ip netns pids "$n" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
    ip netns del "$n" 2> /dev/null || true
  done
}
trap 'teardown; rm -rf "$dir"' EXIT

# What the machine allows, tried on a namespace of its own.
probe=${pfx}probe
ip netns add $probe 2> /dev/null || skip "cannot make network namespaces (ip netns add failed)"
ip netns exec $probe true 2> /dev/null || skip "ip netns exec fails"
ip netns exec $probe unshare --uts true 2> /dev/null || skip "cannot make UTS namespaces"
ip -n $probe link add name pa type veth peer name pb 2> /dev/null || skip "cannot make veth pairs"
ip -n $probe link add name pbr type bridge 2> /dev/null || skip "cannot make bridges"
ip -n $probe link set pa up
have_netem=false have_tbf=false have_tap=false
ip netns exec $probe tc qdisc add dev pa root netem delay 1ms 2> /dev/null && have_netem=true
ip netns exec $probe tc qdisc del dev pa root 2> /dev/null || true
ip netns exec $probe tc qdisc add dev pa root tbf rate 1mbit burst 32kb latency 100ms 2> /dev/null && have_tbf=true
[ -c /dev/net/tun ] && ip -n $probe tuntap add dev pt mode tap 2> /dev/null && have_tap=true
ip netns del $probe

# hosts_up N: hosts 0 to N-1, host K at $net.(K+1) on eth0, its link's other end vK on the bridge.
hosts_up() {
  local k
  ip netns add "${pfx}net"
  ip -n "${pfx}net" link set lo up
  ip -n "${pfx}net" link add br0 type bridge
  ip -n "${pfx}net" link set br0 up
  for k in $(seq 0 $(($1 - 1))); do
    ip netns add "${pfx}h$k"
    ip -n "${pfx}h$k" link set lo up
    ip -n "${pfx}net" link add "v$k" type veth peer name eth0 netns "${pfx}h$k"
    ip -n "${pfx}net" link set "v$k" master br0 up
    ip -n "${pfx}h$k" addr add "$net.$((k + 1))/24" dev eth0
    ip -n "${pfx}h$k" link set eth0 up
  done
}
# on_link K QDISC...: the same queueing discipline on both ends of host K's link.
on_link() {
  ip netns exec "${pfx}h$1" tc qdisc add dev eth0 root "${@:2}"
  ip netns exec "${pfx}net" tc qdisc add dev "v$1" root "${@:2}"
}
# relay_link K DELAY_MS LOSS_PCT: host K's link becomes two tap devices joined by wire.py.
relay_link() {
  local k=$1
  ip -n "${pfx}net" link del "v$k"
  ip -n "${pfx}h$k" tuntap add dev eth0 mode tap
  ip -n "${pfx}net" tuntap add dev "v$k" mode tap
  python3 "$here/wire.py" "${pfx}h$k" eth0 "${pfx}net" "v$k" "$2" "$3" &
  wires+=($!)
  ip -n "${pfx}h$k" addr add "$net.$((k + 1))/24" dev eth0
  ip -n "${pfx}h$k" link set eth0 up
  ip -n "${pfx}net" link set "v$k" master br0 up
}
# link_bytes K: bytes through host K's link so far, both ways.
link_bytes() {
  ip netns exec "${pfx}net" cat "/sys/class/net/v$1/statistics/tx_bytes" "/sys/class/net/v$1/statistics/rx_bytes" |
    paste -sd+ | bc
}

export AG_NUM_THREADS=1
# Open MPI notices a lost daemon by TCP keepalive: by default after 300 s of silence and 9 probes
# 20 s apart (8 minutes, measured 502 s). These settings notice in 5 + 3 x 2 = 11 s.
keepalive=(--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3)
# mpi N ARGS...: one rank on each of hosts 0 to N-1, mpirun in host 0, TCP over the links only.
mpi() {
  local n=$1 k
  shift
  for k in $(seq 1 "$n"); do echo "$net.$k slots=1"; done > "$dir/hosts$n"
  mkdir -p "$dir/sessions"
  # (Open MPI waits for a daemon that never starts without end: the timeout turns that into a failure.)
  timeout -k 10 300 ip netns exec "${pfx}h0" unshare --uts sh -c 'hostname h0 && exec "$@"' sh \
    mpirun --allow-run-as-root --oversubscribe --hostfile "$dir/hosts$n" -np "$n" \
    --mca plm_rsh_agent "$here/agent.sh" --mca plm_rsh_no_tree_spawn 1 --mca orte_tmpdir_base "$dir/sessions" \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
    "${keepalive[@]}" -x AG_NUM_THREADS "$@"
}
for i in $(seq 1 80); do printf 'the cat sat on the mat; a dog lay on the log. %d\n' "$i"; done > "$dir/corpus.txt"
train=("$minigpt" train --corpus "$dir/corpus.txt" --batch 4 --block 16 --layers 2 --heads 2 --embd 32
  --eval-interval 10 --eval-batches 3 --sample-tokens 5)
same_run() {
  local f
  for f in train_log.csv minigpt.safetensors minigpt.train.safetensors; do
    cmp -s "$1/$f" "$2/$f" || fail "$f of $(basename "$1") and $(basename "$2") differ"
  done
}
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }

# One process's reference runs, and the gradient's size: the bytes of the model's tensors, all
# float32, each one a gradient (train_log.csv and both checkpoints are compared, not the bytes).
for n in 2 3; do "${train[@]}" --steps 120 --grad-accum $n --out "$dir/accum$n" > /dev/null; done
gradient_bytes=$(python3 - "$dir/accum2/minigpt.safetensors" << 'PY'
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
print(sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__"))
PY
)

# timed N NAME: 20 steps, then 120 on N hosts; the 120 must equal --grad-accum N. Sets ms_step and
# bytes_step: the time and the bytes through host 1's link (both ways) of one step, from the
# difference of the two runs (start-up and the first checkpoint cancel out).
timed() {
  local n=$1 name=$2 start b0 b20 t20 t120 b120 out="$dir/${2//[^A-Za-z0-9]/_}.n$1"
  b0=$(link_bytes 1)
  start=$(date +%s%N)
  mpi "$n" "${train[@]}" --steps 20 --out "$out.20" > "$out.20.log" 2>&1 || { cat "$out.20.log"; fail "$name: mpirun -np $n failed"; }
  t20=$(ms_since "$start")
  b20=$(link_bytes 1)
  start=$(date +%s%N)
  mpi "$n" "${train[@]}" --steps 120 --out "$out" > "$out.log" 2>&1 || { cat "$out.log"; fail "$name: mpirun -np $n failed"; }
  t120=$(ms_since "$start")
  b120=$(link_bytes 1)
  same_run "$dir/accum$n" "$out"
  ms_step=$(echo "scale=1; ($t120 - $t20) / 100" | bc)
  ms_whole=$(echo "scale=1; $t120 / 120" | bc)  # start-up included: never less than a step takes
  bytes_step=$(((b120 - b20 - (b20 - b0)) / 100))
  printf '  %-28s %d hosts: %6.1f ms a step, %7d bytes a step through host 1'"'"'s link; byte-identical to --grad-accum %d\n' \
    "$name" "$n" "$ms_step" "$bytes_step" "$n"
}

echo "the gradient: $gradient_bytes bytes (float32)"
# 1. Two and three hosts.
for n in 2 3; do
  hosts_up $n
  mpi $n sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname) $(readlink /proc/self/ns/net) $(ip -o -4 addr show eth0 | awk "{print \$4}")"' |
    sort > "$dir/where$n"
  for k in $(seq 0 $((n - 1))); do
    grep -Fqx "$k h$k $(ip netns exec "${pfx}h$k" readlink /proc/self/ns/net) $net.$((k + 1))/24" "$dir/where$n" ||
      { cat "$dir/where$n"; fail "rank $k is not in host $k's namespace"; }
  done
  timed $n "plain link"
  # Each rank sends 2 (N - 1)/N of the gradient a step and receives as much: the prediction, both
  # ways; TCP/IP headers and the few other messages add a little.
  predicted=$((4 * (n - 1) * gradient_bytes / n))
  ratio=$(echo "scale=3; $bytes_step / $predicted" | bc)
  echo "  predicted: $predicted bytes a step (2 x 2 (N - 1)/N of the gradient); measured / predicted = $ratio"
  awk -v r="$ratio" 'BEGIN { exit !(r >= 0.98 && r <= 1.15) }' || fail "$n hosts: $bytes_step bytes a step, predicted $predicted"
  teardown
done

# 2. Delay and loss on host 1's link, three hosts.
if $have_netem || $have_tap; then
  # The baseline is the same link without the fault: through the relay too when it is the relay.
  hosts_up 3
  if $have_netem; then how=netem; else
    relay_link 1 0 0
    how="the relay (no netem in this kernel)"
  fi
  timed 3 "no fault"
  base=$ms_step
  teardown
  for fault in "5 0" "0 1" "5 1"; do
    read -r delay loss <<< "$fault"
    hosts_up 3
    if $have_netem; then
      args=()
      [ "$delay" = 0 ] || args+=(delay "${delay}ms")
      [ "$loss" = 0 ] || args+=(loss "$loss%")
      on_link 1 netem "${args[@]}"
    else
      relay_link 1 "$delay" "$loss"
    fi
    timed 3 "${delay} ms, ${loss} % loss"
    printf '    by %s: %.1f ms a step slower than without the fault\n' "$how" "$(echo "$ms_step - $base" | bc)"
    teardown
  done
else
  echo "delay and loss: skipped (neither tc netem nor a tap device)"
fi

# 3. Rate limits on host 1's link.
if $have_tbf; then
  for n in 2 3; do
    for rate in 1000 10; do
      hosts_up $n
      on_link 1 tbf rate "${rate}mbit" burst 32kb latency 100ms
      timed $n "${rate} Mbit/s"
      # The most a link carries one way: a step's bytes (half of both ways) take at least this long.
      # Checked against the whole run's time a step, start-up included, which a busy machine can
      # only make longer (the difference of two runs can come out short by start-up's noise).
      least=$(echo "scale=1; $bytes_step / 2 * 8 / ($rate * 1000)" | bc)
      printf '    one way at %s Mbit/s the bytes take at least %.1f ms; the whole run took %.1f ms a step\n' \
        "$rate" "$least" "$ms_whole"
      [ "$rate" != 10 ] || awk -v m="$ms_whole" -v l="$least" 'BEGIN { exit !(m >= 0.95 * l) }' ||
        fail "$n hosts at $rate Mbit/s: $ms_whole ms a step, less than its bytes take ($least ms)"
      teardown
    done
  done
else
  echo "rate limits: skipped (no tc tbf)"
fi

# 4. Host 1's link cut mid-run.
steps=600
"${train[@]}" --steps $steps --checkpoint-interval 10 --grad-accum 3 --out "$dir/never_cut3" > /dev/null
hosts_up 3
mpi 3 "${train[@]}" --steps $steps --checkpoint-interval 10 --out "$dir/cut" > "$dir/cut.log" 2>&1 &
launcher=$!
deadline=$((SECONDS + 120))
until [ "$(lines "$dir/cut/train_log.csv")" -gt 30 ]; do
  kill -0 $launcher 2> /dev/null || { cat "$dir/cut.log"; fail "mpirun ended before the cut"; }
  [ $SECONDS -lt $deadline ] || { cat "$dir/cut.log"; fail "no 30 steps in 120 s"; }
  sleep 0.05
done
ip -n "${pfx}h1" link set eth0 down
cut_at=$(date +%s%N)
echo "link of host 1 cut after step $(($(lines "$dir/cut/train_log.csv") - 1))"
while kill -0 $launcher 2> /dev/null; do
  [ "$(ms_since "$cut_at")" -lt 60000 ] || { tail -20 "$dir/cut.log"; fail "mpirun still running 60 s after the cut"; }
  sleep 0.1
done
code=0
wait $launcher || code=$?
[ "$code" -ne 0 ] || fail "mpirun exited 0 after the cut"
echo "  mpirun exited $code after $(ms_since "$cut_at") ms"
grep -q "lost communication with a remote daemon" "$dir/cut.log" && grep -q "on node $net.2" "$dir/cut.log" ||
  { cat "$dir/cut.log"; fail "the error does not name the host lost ($net.2)"; }
sleep 1
for k in 0 1 2; do
  [ -z "$(ip netns pids "${pfx}h$k")" ] || fail "processes left in host $k after the cut"
done
echo "  no process left on any host; $(grep -m1 'Remote daemon' "$dir/cut.log" | sed 's/^ *//')"
teardown
"$minigpt" eval --checkpoint "$dir/cut/minigpt.safetensors" --file "$dir/corpus.txt" > "$dir/eval.log" ||
  { cat "$dir/eval.log"; fail "the last checkpoint does not evaluate"; }
echo "  the last checkpoint evaluates: $(grep '^loss' "$dir/eval.log")"
cp -a "$dir/cut" "$dir/cut2"
cp -a "$dir/cut" "$dir/cut2_ref"
"${train[@]}" --steps $steps --checkpoint-interval 10 --out "$dir/cut" --resume > "$dir/resume1.log"
same_run "$dir/never_cut3" "$dir/cut"
echo "  $(grep -o 'resuming from step [0-9]*' "$dir/resume1.log") on one process: byte-identical to the run never cut"
hosts_up 2
mpi 2 "${train[@]}" --steps $steps --checkpoint-interval 10 --out "$dir/cut2" --resume > "$dir/resume2.log" 2>&1 ||
  { cat "$dir/resume2.log"; fail "--resume on two hosts failed"; }
teardown
"${train[@]}" --steps $steps --checkpoint-interval 10 --grad-accum 2 --out "$dir/cut2_ref" --resume > /dev/null
same_run "$dir/cut2_ref" "$dir/cut2"
echo "  resumed on two hosts: byte-identical to one process resuming with --grad-accum 2"
echo "ok"
