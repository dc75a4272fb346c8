"""The engine's typed refusals: of a request, and of a drafter.

Each is a `ValueError` (the caller asked for something the engine cannot serve) that carries
what a front end needs to say why, so the gateway translates them by class and fields, never by
matching names or messages (gateway/runner.py). `SpecEngine.check_request` is the one place
that raises the request errors; `DrafterLoadError` comes from loading or checking a drafter
(core/model/eagle3.py, core/model/drafter_check.py) and lives here, torch-free, so that a front
end catches it without importing torch.
"""

from __future__ import annotations


class RequestError(ValueError):
    """The engine cannot serve this request as asked (the caller's fault, not the engine's)."""


class ContextLengthError(RequestError):
    """Prompt plus max_new_tokens does not fit the context window."""

    def __init__(self, *, max_context: int, prompt_tokens: int, max_new_tokens: int) -> None:
        super().__init__(
            f"This model's maximum context length is {max_context} tokens. However, you requested "
            f"{prompt_tokens + max_new_tokens} tokens ({prompt_tokens} in the prompt, "
            f"{max_new_tokens} in the completion)."
        )
        self.max_context = max_context
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens


class PolicyError(RequestError):
    """An unknown policy, or a drafter or prompt router this pool does not serve."""


class DrafterLoadError(ValueError):
    """A drafter cannot be used. `readable` is False when the files themselves are unreadable."""

    def __init__(self, message: str, *, readable: bool = True) -> None:
        super().__init__(message)
        self.readable = readable
