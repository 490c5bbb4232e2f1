"""hplt-shard: a sharded web corpus in, deterministic verified Parquet training shards out.

Sub-packages by role, in the direction data flows (input, stages, contract; run and submit drive them),
with the top-level modules below them all: CONTRIBUTING.md, "The code".
"""
