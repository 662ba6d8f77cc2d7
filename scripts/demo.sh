#!/usr/bin/env bash
# reverb's demo (until the recovery demo exists): a release build, then the shm provider's
# latency and bandwidth sweeps for put and tagged send, run as two local ranks.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/deps.sh
cargo build --release -p reverb
reverb=target/release/reverb

# Two cores or more: pin the two ranks apart, as a real intra-node pair would be.
cores=()
if (($(nproc) >= 2)); then cores=(--cores 0,1); fi

sizes=${SIZES:-2-1M}
for op in put send; do
    "$reverb" bench lat --op "$op" --sizes "$sizes" "${cores[@]}"
    echo
done
for op in put send; do
    "$reverb" bench bw --op "$op" --sizes "$sizes" "${cores[@]}"
    echo
done
"$reverb" bench memcpy --sizes 64k,1M
