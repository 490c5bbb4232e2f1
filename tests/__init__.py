"""Makes `tests` a package so shared helpers import as `tests.<module>` (e.g. tests.manifest_schema)."""
