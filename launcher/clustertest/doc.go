// Package clustertest holds the multi-host launch tests: real processes
// over real ssh into emulated hosts (network namespaces with their own
// sshd, from scripts/testcluster), a real Slurm (munged, slurmctld and
// slurmd started for the tests) and OpenMPI's mpirun. They need root,
// iproute2, openssh-server, slurmctld, slurmd, munge and OpenMPI; a
// missing one skips its tests through testenv.Missing (a failure under
// FLEXLINK_REQUIRE_SYSTEM=1, as in CI).
package clustertest
