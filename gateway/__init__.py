"""OpenAI-compatible HTTP gateway: wires settings, the engine worker, the registry and metrics."""
