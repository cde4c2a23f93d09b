#!/bin/sh
# The remote-shell agent mpirun uses in multihost_test.sh (--mca plm_rsh_agent): Open MPI calls
# it as it would call ssh, with a host and then the daemon's command line, quoted for a remote
# shell. Host 10.77.0.K is network namespace ${AG_NETNS_PREFIX}h(K-1); the command runs there, in a
# UTS namespace of its own named h(K-1): Open MPI names its session directory after the host
# name, and the namespaces share one /tmp, where two daemons of one name would collide.
host=$1
shift
case $host in
  10.77.0.[1-9]) k=$((${host##*.} - 1)) ;;
  *)
    echo "agent.sh: unknown host $host" >&2
    exit 255
    ;;
esac
exec ip netns exec "${AG_NETNS_PREFIX:?}h$k" unshare --uts sh -c "hostname h$k; $*"
