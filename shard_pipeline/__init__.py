"""hplt-shard: a sharded web corpus in, deterministic verified Parquet training shards out.

Sub-packages by role, in the direction data flows:
input/ (read the corpus) -> stages/ (partition, plan, write, finalize) -> contract/ (the output rules);
run/ (the run directory, the stage registry and its state) and submit/ (the command line and
executors) drive them. Below them all: files (atomic writes, hashes), units (sizes, Slurm memory),
errors (the user-error type) and paths (packaged data, where defaults live).
"""
