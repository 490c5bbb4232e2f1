"""Reading the corpus: finding input shards, streaming and validating their records, counts, synthetic corpora."""
