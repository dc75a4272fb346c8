"""GPU-only figures: the device check run on a lent GPU, and whether compilation pays."""
