"""The live admin feed: one event fan-out, per-request traces, the aggregator and the
`/admin` page with its live stream."""
