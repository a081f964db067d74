"""Sans-IO transaction coordinator: one shard per `__transaction_state` partition (reference Part A)."""
