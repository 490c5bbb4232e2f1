"""The output contract: shard schema, split rule, sort, naming, row groups, manifest, atomic replace, and the verifier."""
