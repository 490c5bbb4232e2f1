"""A run on disk: the run directory, its config, claims on OUT, resume, status and fault injection."""
