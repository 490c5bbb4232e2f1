"""End-to-end tests (slow): they run the pipeline, grouped by what they exercise."""
