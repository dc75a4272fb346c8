"""The live admin feed: one event fan-out, per-request traces and the aggregator. The `/admin`
page and its live stream are routes (`gateway.http.routes.admin_live`)."""
