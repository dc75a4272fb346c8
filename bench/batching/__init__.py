"""The batching benchmark: batched rounds against round-robin at 1-16 concurrent streams."""
