"""Settings: defaults, HEDGESPEC_* environment, .env files, CLI overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.cli import build_parser
from gateway.cli.serve import serve_settings
from gateway.config import REPO_ROOT, Settings


def test_defaults_resolve_against_the_repository() -> None:
    s = Settings()
    assert (s.host, s.port, s.max_queue, s.request_timeout_s) == ("127.0.0.1", 8000, 64, 600.0)
    assert s.pool is None and s.target is None  # no default model, as `vllm serve MODEL`
    assert s.database_url == f"sqlite:///{REPO_ROOT / 'var' / 'hedgespec.db'}"
    assert s.max_body_bytes == 1 << 20 and s.api_keys == [] and s.admin_key is None
    assert s.cors_origins == []


def test_environment_lists_accept_commas_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keys long enough not to occur by chance in the repr's paths (a temp dir once held "k1").
    monkeypatch.setenv("HEDGESPEC_API_KEYS", "sk-first-9f3c, sk-second-9f3c")
    monkeypatch.setenv("HEDGESPEC_CORS_ORIGINS", '["http://a"]')
    monkeypatch.setenv("HEDGESPEC_PORT", "9001")
    s = Settings()
    assert [k.get_secret_value() for k in s.api_keys] == ["sk-first-9f3c", "sk-second-9f3c"]
    assert s.cors_origins == ["http://a"] and s.port == 9001
    assert "sk-first-9f3c" not in repr(s)


def test_dotenv_file_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("HEDGESPEC_ADMIN_KEY=secret\nHEDGESPEC_MAX_QUEUE=3\n")
    s = Settings()
    assert s.admin_key is not None and s.admin_key.get_secret_value() == "secret"
    assert s.max_queue == 3


def test_cli_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEDGESPEC_PORT", "9001")
    monkeypatch.setenv("HEDGESPEC_API_KEYS", "env-key")
    args = build_parser().parse_args(
        ["serve", "--port", "9002", "--api-key", "a", "--api-key", "b", "--drafter", "x=/d/x"]
    )
    s = serve_settings(args)
    assert s.port == 9002 and [k.get_secret_value() for k in s.api_keys] == ["a", "b"]
    assert s.drafter_dirs() == [("x", Path("/d/x"))]


def test_rate_limit_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEDGESPEC_RATE_LIMIT_RPS", "1")
    s = serve_settings(build_parser().parse_args(["serve", "--rate-limit-rps", "2.5",
                                                  "--rate-limit-burst", "7"]))
    assert s.rate_limit_rps == 2.5 and s.rate_limit_burst == 7
    with pytest.raises(ValidationError):
        serve_settings(build_parser().parse_args(["serve", "--rate-limit-rps", "0"]))


def test_batching_flags_reach_the_engine_config() -> None:
    default = serve_settings(build_parser().parse_args(["serve"])).engine_config()
    assert default.batching and default.max_running == 16 and default.max_step_tokens == 512
    args = ["serve", "--no-batching", "--max-running", "3", "--max-step-tokens", "64"]
    cfg = serve_settings(build_parser().parse_args(args)).engine_config()
    assert not cfg.batching and cfg.max_running == 3 and cfg.max_step_tokens == 64


def test_invalid_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(default_policy="greedy-bandit")
    with pytest.raises(ValidationError):
        Settings(port=70000)
    assert Settings(default_policy="normalhedge_router").default_policy == "normalhedge_router"


def test_engine_config_keeps_core_defaults_unless_set() -> None:
    from core.config import EngineConfig

    assert Settings(device="cuda").engine_config().tree == EngineConfig().tree
    cfg = Settings(tree_depth=3, max_context=256, default_policy="hedge").engine_config()
    assert cfg.tree.depth == 3 and cfg.max_context == 256 and cfg.selector.policy == "hedge"
    assert cfg.device_map is None
    assert Settings(device_map="auto").engine_config().device_map == "auto"
    assert cfg.compile is False and Settings(compile=True).engine_config().compile is True


def test_the_tree_defaults_by_device_and_each_field_can_be_set() -> None:
    """A CPU drafts the tree that measured fastest there (cpu_defaults.md); an accelerator keeps
    TreeConfig's; a field given on its own overrides only that field."""
    from core.config import CPU_TREE, TreeConfig

    assert Settings().engine_config().tree == CPU_TREE
    assert TreeConfig() != CPU_TREE
    assert Settings(device="cuda").engine_config().tree == TreeConfig()
    cfg = Settings(tree_top_k=5).engine_config().tree
    assert (cfg.top_k, cfg.depth, cfg.total_tokens) == (5, CPU_TREE.depth, CPU_TREE.total_tokens)


def test_compile_flag_is_unset_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEDGESPEC_COMPILE", "true")
    assert serve_settings(build_parser().parse_args(["serve"])).compile is True  # env kept
    monkeypatch.delenv("HEDGESPEC_COMPILE")
    assert serve_settings(build_parser().parse_args(["serve"])).compile is None
    assert serve_settings(build_parser().parse_args(["serve"])).engine_config().compile is False
    assert serve_settings(build_parser().parse_args(["serve", "--compile"])).compile is True


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_unset_engine_knobs_are_the_cores_served_defaults(
        monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    """Settings states no engine default of its own: left unset, every knob is core.config's
    (the served tree and selector for the device, else EngineConfig's)."""
    from core.config import EngineConfig, served_selector, served_tree

    monkeypatch.delenv("HEDGESPEC_LOSS", raising=False)  # the suite pins the acceptance loss
    cfg = Settings(device=device, dtype="float32").engine_config()
    assert cfg == EngineConfig(device=device, tree=served_tree(device),
                               selector=served_selector(device))
    assert cfg.selector.loss == "time"
    assert Settings(dtype="float32").engine_config().device == EngineConfig.device


def test_eval_every_defaults_by_device_and_the_flag_wins() -> None:
    from core.config import CPU_EVAL_EVERY

    assert Settings().engine_config().selector.eval_every == CPU_EVAL_EVERY
    assert Settings(device="cuda").engine_config().selector.eval_every == 1
    cfg = serve_settings(build_parser().parse_args(["serve", "--eval-every", "2"])).engine_config()
    assert cfg.selector.eval_every == 2
    with pytest.raises(ValidationError):
        Settings(eval_every=0)


def test_prompt_windows_default_the_flag_and_zero_turns_them_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from core.config import PROMPT_WINDOWS

    assert PROMPT_WINDOWS > 0
    assert Settings().engine_config().selector.prompt_windows == PROMPT_WINDOWS
    args = build_parser().parse_args(["serve", "--prompt-windows", "0"])
    assert serve_settings(args).engine_config().selector.prompt_windows == 0
    monkeypatch.setenv("HEDGESPEC_PROMPT_WINDOWS", "32")
    assert Settings().engine_config().selector.prompt_windows == 32
    with pytest.raises(ValidationError):
        Settings(prompt_windows=-1)


def test_the_loss_default_the_flag_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEDGESPEC_LOSS", raising=False)  # the suite pins the acceptance loss
    assert Settings().engine_config().selector.loss == "time"
    args = build_parser().parse_args(["serve", "--loss", "length"])
    assert serve_settings(args).engine_config().selector.loss == "length"
    monkeypatch.setenv("HEDGESPEC_LOSS", "prob")
    assert Settings().engine_config().selector.loss == "prob"
    with pytest.raises(ValidationError):
        Settings(loss="seconds")  # type: ignore[arg-type]


def test_hybrid_trees_are_off_unless_a_member_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().engine_config().hybrid is None
    args = build_parser().parse_args(["serve", "--hybrid", "lookup"])
    assert serve_settings(args).engine_config().hybrid == "lookup"
    monkeypatch.setenv("HEDGESPEC_HYBRID", "suffix")
    assert Settings().engine_config().hybrid == "suffix"
    with pytest.raises(ValidationError):
        Settings(hybrid="")


@pytest.mark.parametrize(("field", "flag_value", "env_value"), [
    ("verify_logits", "all", "visited"),
    ("deterministic", "off", "on"),
])
def test_measured_settings_default_to_auto_and_the_flag_or_env_pins_them(
    monkeypatch: pytest.MonkeyPatch, field: str, flag_value: str, env_value: str,
) -> None:
    env = f"HEDGESPEC_{field.upper()}"
    monkeypatch.delenv(env, raising=False)
    assert getattr(Settings().engine_config(), field) == "auto"
    args = build_parser().parse_args(["serve", f"--{field.replace('_', '-')}", flag_value])
    assert getattr(serve_settings(args).engine_config(), field) == flag_value
    monkeypatch.setenv(env, env_value)
    assert getattr(Settings().engine_config(), field) == env_value
    with pytest.raises(ValidationError):
        Settings(**{field: "some"})


def test_sampling_defaults_come_from_the_model_unless_the_flags_say_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().generation_config == "auto" and Settings().override_generation_config == {}
    args = build_parser().parse_args(["serve", "--generation-config", "openai",
                                      "--override-generation-config", '{"temperature": 0.7}'])
    settings = serve_settings(args)
    assert settings.generation_config == "openai"
    assert settings.override_generation_config == {"temperature": 0.7}
    monkeypatch.setenv("HEDGESPEC_OVERRIDE_GENERATION_CONFIG", '{"top_p": 0.5}')
    assert Settings().override_generation_config == {"top_p": 0.5}
    for bad in ('{"temprature": 0.7}', '{"temperature": 3}', "0.7", "{"):
        with pytest.raises(ValidationError):
            Settings(override_generation_config=bad)
    with pytest.raises(ValidationError):
        Settings(generation_config="vllm")
