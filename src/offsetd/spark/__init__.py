"""PySpark Python Data Sources (topic source with group commit-back, offsets-log source) and pipelines."""
