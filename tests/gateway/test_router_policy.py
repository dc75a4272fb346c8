"""The gateway accepts policy `router` only when the served pool ships a prompt router."""

from __future__ import annotations

import pytest

from gateway.http.errors import APIError
from gateway.openai.serving import check_policy
from gateway.runner import EngineInfo


def test_the_gateway_serves_policy_router_only_when_the_pool_has_a_router() -> None:
    info = EngineInfo("m", 512, ("a", "b"), 64, "fp", has_router=False)
    with pytest.raises(APIError, match="needs a prompt router"):
        check_policy("router", info)
    check_policy("router", EngineInfo("m", 512, ("a", "b"), 64, "fp", has_router=True))
