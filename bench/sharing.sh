#!/usr/bin/env bash
# Sharing benchmark (bench/README.md, "Fleet (month scale)"): what DRA attribution and measured
# sharing cost a month. One simulated month written twice, with and without the pod labels on
# the DRA pool's series (`simulate --dra-pod-labels false`: those samples reach their pods only
# through the ResourceClaims' reservations), then `gpuledger ledger --full` alternating
#   pods/even      the pod labels, sharing = "even" (the example configuration)
#   pods/measured  the pod labels, sharing = "measured"
#   claims/even    the claims' reservations, sharing = "even"
# ROUNDS times each. Wall time and peak RSS (/usr/bin/time) and the ledger's own timings, summed
# over the day units, of the two steps the rules touch: keeping `pod_samples` (the join with the
# claims' reservations) and the states (`40_states.sql` with its kept MIG pieces, and the
# `gpu_state_hours` day table: where share groups and measured shares split a span). The
# chargeback of claims/even must equal that of pods/even, byte for byte. With PEER_BIN (another
# gpuledger build, an earlier commit's say) each round first runs it on the pods store too
# (peer/even, with PEER_CONFIG: an earlier build may not know every key of today's example).
#   GPUS=64 DAYS=30 SCRAPE=300s ROUNDS=2 BIN=... [PEER_BIN=... PEER_CONFIG=...] bash bench/sharing.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
GPUS=${GPUS:-64}
DAYS=${DAYS:-30}
SCRAPE=${SCRAPE:-300s}
ROUNDS=${ROUNDS:-2}
bench_setup sharing bench-data/sharing

for variant in pods claims; do
  if [ ! -f "$W/$variant/.gpuledger-store" ] || [ "$(cat "$W/$variant.params" 2>/dev/null)" != "$GPUS $DAYS $SCRAPE" ]; then
    rm -rf "$W/$variant"
    labels=true; [ "$variant" = claims ] && labels=false
    say "simulating $GPUS GPUs x $DAYS days at $SCRAPE into $W/$variant (DRA pod labels: $labels)"
    /usr/bin/time -f '%e s, peak %M KiB' "$BIN" simulate --store "$W/$variant" --gpus "$GPUS" --days "$DAYS" --seed 42 \
      --scrape-interval "$SCRAPE" --start 2026-10-01T00:00:00Z --dra-pod-labels "$labels" --progress off >&2
    echo "$GPUS $DAYS $SCRAPE" > "$W/$variant.params"
  fi
done
ROWS=$("$BIN" query --store "$W/pods" --format csv "SELECT count(*) AS n FROM gpu_samples" | tail -1)
CLAIMS=$("$BIN" query --store "$W/pods" --format csv "SELECT count(*) AS n FROM resource_claims" | tail -1)
say "$ROWS GPU rows, $CLAIMS ResourceClaim rows"

sed 's/^sharing = "even"/sharing = "measured"/' examples/gpuledger.toml > "$W/measured.toml"
grep -q '^sharing = "measured"' "$W/measured.toml" || { say "examples/gpuledger.toml sets no sharing line to change"; exit 2; }

# The seconds of the last run's steps matching $1, summed: a step line names the SQL file run or
# the view kept (its SELECT), once per day unit.
step() { grep 'step done' "$W/log" | grep -E "step=($1) seconds" | sed -E 's/.* seconds=([0-9.]+).*/\1/' | awk '{s += $1} END {printf "%.1f", s}'; }

printf '%-15s %5s %9s %9s %14s %10s\n' run round seconds peak_MiB pod_samples_s states_s
for round in $(seq 1 "$ROUNDS"); do
  for run in ${PEER_BIN:+peer/even} pods/even pods/measured claims/even; do
    store=$W/${run%%/*} bin=$BIN
    config=examples/gpuledger.toml; [ "${run#*/}" = measured ] && config=$W/measured.toml
    [ "$run" = peer/even ] && store=$W/pods bin=$PEER_BIN config=${PEER_CONFIG:-examples/gpuledger.toml}
    GPULEDGER_LOG=gpuledger_ledger::timings=debug /usr/bin/time -f '%e %M' -o "$W/time" \
      "$bin" ledger --store "$store" --config "$config" --full --progress off > /dev/null 2> "$W/log"
    read -r secs kib < "$W/time"
    printf '%-15s %5s %9s %9d %14s %10s\n' "$run" "$round" "$secs" $((kib / 1024)) "$(step 'SELECT \* FROM pod_samples')" \
      "$(step '40_states.sql|SELECT \* FROM gpu_state_hours')"
    if [ "$run" = pods/even ] || [ "$run" = claims/even ]; then
      "$BIN" query --store "$store" --format csv "SELECT * FROM chargeback_monthly ORDER BY month, team" > "$W/${run%%/*}.chargeback.csv"
    fi
  done
  cmp -s "$W/pods.chargeback.csv" "$W/claims.chargeback.csv" || { say "round $round: the chargeback through the claims differs from the one through the pod labels"; exit 1; }
done
say "the chargeback through the claims equals the one through the pod labels ($(($(wc -l < "$W/pods.chargeback.csv") - 1)) rows)"
