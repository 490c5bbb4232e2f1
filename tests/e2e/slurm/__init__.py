"""End to end on the real single-node Slurm test cluster (tests/slurm/cluster.sh)."""
