"""A run on disk: the run directory, its config, the stage registry, claims on OUT, resume, status, the task runner and its logs."""
