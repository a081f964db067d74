"""Sans-IO group coordinator: one shard per `__consumer_offsets` partition (DESIGN.md)."""
