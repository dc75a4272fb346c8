"""A request's temperature, top_p and top_k: what it asks for, else the served defaults.

Defaults, per field (vLLM's order): the operator's `--override-generation-config`, over the
model's (its generation_config.json, then the pool file's; `EngineInfo.sampling_defaults`)
unless `--generation-config openai`, over the OpenAI API's (temperature 1, top_p 1, no top_k).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import Settings
from gateway.openai.protocol import SamplingFields

# Temperatures below this sample as greedy (vLLM's _SAMPLING_EPS): logits / 1e-300 overflow
# to inf and the softmax to NaN, which failed the engine round (a 500 for every request in it).
GREEDY_BELOW_TEMPERATURE = 1e-5
# So does a top_p below this: it keeps only the most likely token anyway (its probability is at
# least 1/vocab), and below float32's smallest value (~1e-45) it became 0 and dropped every token.
GREEDY_BELOW_TOP_P = 1e-8


def served_defaults(model: Mapping[str, float], settings: Settings) -> dict[str, float]:
    """The defaults a request's missing sampling fields take on this server."""
    base = {} if settings.generation_config == "openai" else dict(model)
    return {**base, **settings.override_generation_config}


def sampling(req: SamplingFields, defaults: Mapping[str, float]) -> tuple[float, float, int]:
    """(temperature, top_p, top_k) for the engine; temperature 0 means greedy."""
    temperature = req.temperature if req.temperature is not None else defaults.get("temperature")
    top_p = req.top_p if req.top_p is not None else defaults.get("top_p")
    top_k = req.top_k if req.top_k is not None else int(defaults.get("top_k", 0))
    return _temperature(temperature, top_p), 1.0 if top_p is None else top_p, top_k


def _temperature(temperature: float | None, top_p: float | None) -> float:
    """OpenAI's default is 1; a temperature or top_p too small to compute with means greedy (0)."""
    if top_p is not None and top_p < GREEDY_BELOW_TOP_P:
        return 0.0
    if temperature is None:
        return 1.0
    return 0.0 if temperature < GREEDY_BELOW_TEMPERATURE else temperature
