"""Cluster mode: brokers, leases and partition ownership (sans-IO rules in ownership.py, the
PostgreSQL-driven loop in member.py)."""
