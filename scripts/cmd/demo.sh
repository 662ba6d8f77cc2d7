# help: the main job: release build with fault injection, then `reverb demo` (scripts/demo.sh)
# reverb's demo: a release build, then `reverb demo`: the Jacobi stencil on 8 ranks in 4
# nodes, failure-free (logging off, then causal + buddy checkpoints + Reed-Solomon), then
# with node 1 SIGKILLed mid-run and respawned. Fails unless the recovered run's checksum is
# the failure-free one. Extra arguments go to `reverb demo` (e.g. --provider verbs).
#
#   scripts/reverb-scripts demo [REVERB-DEMO-ARGS...]     (scripts/demo.sh runs this)
bash ci/deps.sh
# The demo kills a node through the runtime's fault hooks: they are only in builds with
# the fault-injection feature.
features=fault-injection
if [[ " $* " == *" verbs "* || " $* " == *"--provider=verbs"* ]]; then features+=,verbs; fi
rs_build --features "$features"
exec "$reverb" demo "$@"
