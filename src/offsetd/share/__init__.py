"""Sans-IO share coordinator (KIP-932): one shard per `__share_group_state` partition, the
sibling of the transaction coordinator (reference share-groups.md §5)."""
