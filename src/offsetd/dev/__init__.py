"""Development and test tooling: a throwaway PostgreSQL server, broker processes and a local
cluster (`python -m offsetd.dev.cluster`). Not used by the broker itself."""
