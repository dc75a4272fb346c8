"""OpenAI-compatible HTTP gateway: wires settings, the engine worker, the registry and metrics.

The gateway is built in layers, lowest first. A module imports its own layer and the layers
below it, never one above, so each layer can be read and tested without the ones on top of it
(`tests/test_architecture.py` checks every import, deferred and relative ones included):

1. base: `config` (settings), `errors` (OpenAI-shaped errors), `metrics` (Prometheus series),
   the vocabulary every layer shares. They import nothing of the gateway.
2. feed: `live/`, the event bus, request traces and the aggregator that the admin page reads.
3. engine worker: `runner`, the thread that owns the device; it publishes to the feed.
4. services: `openai/` (the OpenAI request path) and `pool/` (registry orchestration, pool sync,
   the database handle); both drive the runner.
5. edge: `http/`, every route (the admin page's too), middleware, auth, rate limit and the
   dependencies the routes read.
6. entry points: `app` (the app factory, the one place that wires the layers together), `cli/`
   (the `hedgespec` command) and `__main__`.

Every layer reaches the engine through `core.api` only, core's face: its typed data, errors and
configuration, and `SpecEngine` as the runner's `Engine` protocol sees it.
"""
