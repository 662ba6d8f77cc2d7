# help: the one release build (reverb; --mpi adds reverb-mpi), then prints the binary's path
# The build step every subcommand shares (rs_build in scripts/lib/common.sh), alone: a release
# build of reverb [and reverb-mpi] [with features]. Prints the path of the reverb binary.
#
#   scripts/reverb-scripts build [--mpi] [--features fault-injection,verbs] [--debug]
rs_build "$@"
echo "$reverb"
