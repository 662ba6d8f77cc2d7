#!/usr/bin/env bash
# reverb's demo: a release build, then `reverb demo`: the Jacobi stencil on 8 ranks in 4
# nodes, failure-free (logging off, then causal + buddy checkpoints + Reed-Solomon), then
# with node 1 SIGKILLed mid-run and respawned. Fails unless the recovered run's checksum is
# the failure-free one. Extra arguments go to `reverb demo` (e.g. --provider verbs).
# The same as `scripts/reverb-scripts demo` (scripts/cmd/demo.sh), kept for the README.
set -euo pipefail
exec bash "$(dirname "$0")/reverb-scripts" demo "$@"
