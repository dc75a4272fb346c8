"""`/v1/models` and the engine facts both generation endpoints read (vLLM's
`OpenAIServingModels`): the served name, the model card, the tool-call format."""

from __future__ import annotations

from typing import Any

from gateway.config import Settings
from gateway.errors import model_not_found
from gateway.openai.tools import formats
from gateway.runner import EngineInfo, EngineRunner


class OpenAIServingModels:
    """The one served model: its name, card and facts, read without touching the engine."""

    def __init__(self, runner: EngineRunner, settings: Settings) -> None:
        self.runner = runner
        self.settings = settings

    def engine_info(self) -> EngineInfo:
        """The engine's facts; 503 while it loads or drains."""
        self.runner.check_ready()
        assert self.runner.info is not None
        return self.runner.info

    def served_name(self, info: EngineInfo) -> str:
        return self.settings.model_name or info.model_name

    def tool_format(self) -> formats.ToolFormat:
        """How the target's chat template writes tool calls (gateway/openai/tools/formats.py)."""
        return formats.detect(getattr(self.runner.tokenizer, "chat_template", None))

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._card(self.engine_info())]}

    def model(self, model_id: str) -> dict[str, Any]:
        info = self.engine_info()
        if model_id != self.served_name(info):
            raise model_not_found(model_id)
        return self._card(info)

    def _card(self, info: EngineInfo) -> dict[str, Any]:
        """`spec` and `capabilities` are ours: the pool's drafters (ids, as `fixed:<id>` takes
        them, and each one's kind: `eagle3` or a model-free kind such as `ngram`), the tool-call
        format the target gets, and structured outputs, which every target supports."""
        kinds = {i: info.drafter_kinds.get(i, "eagle3") for i in info.drafter_ids}
        return {
            "id": self.served_name(info),
            "object": "model",
            "created": int(self.runner.started_at),
            "owned_by": "hedgespec",
            "max_model_len": info.max_context,
            "spec": {"method": "eagle3", "drafters": list(info.drafter_ids),
                     "drafter_kinds": kinds},
            "capabilities": {"tool_calling": self.tool_format().name, "structured_outputs": True},
        }
