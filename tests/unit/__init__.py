"""Fast tests of one package of shard_pipeline each: tests/unit/<package>/ (common/: its top-level modules)."""
