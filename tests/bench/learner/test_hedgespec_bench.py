"""The HedgeSpec benchmark runs end to end (tiny local pool) and reports every method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bench.harness.tiny_pool import DRAFTER_IDS, MODEL_NAME, build_pool
from bench.learner.hedgespec_bench import Run, oracle_runs, padded_pool, summarize
from bench.learner.hedgespec_run import main
from bench.prompts import Prompt
from core.selection.router import PromptRouter


def test_bench_writes_tables_plots_and_json(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pool = pool_with_prompts(tmp_path)
    out = tmp_path / "out"
    assert main(["--pool", str(pool), "--quick", "--json", "--out", str(out), "--max-new-tokens",
                 "8", "--pool-sizes", "2,3"]) == 0
    printed = json.loads(capsys.readouterr().out)
    for name in ("plain", "generalist", "ucbspec", "exp3spec", "hedgespec", "router",
                 "hedgespec_router", "hedgespec_cold", "hedgespec_time", "oracle"):
        assert set(printed["methods"][name]) >= {"mat", "tokens_per_s", "speedup_vs_plain"}
    assert set(printed["sampling"]) == {"plain", "generalist", "hedgespec", "hedgespec_router"}
    assert {"hedgespec_router: MAT >= 0.95x oracle",
            "hedgespec_router: MAT above the router"} <= set(printed["targets"])
    assert (printed["workload"] == "mixed"
            and printed["methods"]["plain"]["mat"] == pytest.approx(1.0))
    from bench.learner.hedgespec_run import VARIANTS

    assert set(printed["estimators"]) == set(VARIANTS)
    for e in printed["estimators"].values():
        assert set(e) >= {"estimator", "loss", "mae", "slope", "rank_corr",
                          "mat_vs_oracle"}
        assert e["windows"] > 0 and e["mae"] >= 0
    assert "## Estimator variants" in (out / "hedgespec.md").read_text()
    # the headline methods ran at both ends of the run and kept the faster pass
    assert set(printed["passes"]) == {"plain", "generalist", "hedgespec"}
    for name, (first, second) in printed["passes"].items():
        assert first > 0 and second > 0
        assert printed["methods"][name]["tokens_per_s"] == pytest.approx(max(first, second))
    assert "Measured at both ends of the run" in (out / "hedgespec.md").read_text()
    assert (set(printed["pool_size"]["mat"]["hedgespec"]) == {"2", "3"}
            or set(printed["pool_size"]["mat"]["hedgespec"]) == {2, 3})
    for f in ("hedgespec.md", "hedgespec.json", "hedgespec_regret.png", "hedgespec_calibration.png",
              "hedgespec_pool_size.png", "hedgespec_domains.png"):
        assert (out / f).stat().st_size > 0


def pool_with_prompts(tmp_path: Path) -> Path:
    """The tiny pool with two held-out prompts in each of two domains and a router."""
    pool = build_pool(tmp_path / "pool")
    rows = [{"id": f"{d}{i}", "domain": d, "prompt": f"question {i} about {d}"} for d in ("a", "b")
            for i in range(2)]
    (pool.parent / "eval_prompts.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    add_router(pool, rows)
    return pool


def add_router(pool: Path, rows: list[dict[str, str]]) -> None:
    """A prompt router for the tiny pool (domain a -> alpha, b -> beta), named in pool.json,
    so the router baseline and HedgeSpec with the router's prior run too."""
    tokenizer = AutoTokenizer.from_pretrained(str(pool.parent / MODEL_NAME))
    prompts = [tokenizer(r["prompt"])["input_ids"] for r in rows]
    labels = [DRAFTER_IDS[0] if r["domain"] == "a" else DRAFTER_IDS[1] for r in rows]
    PromptRouter.fit(prompts, labels).save(pool.parent / "router.npz")
    spec = json.loads(pool.read_text())
    pool.write_text(json.dumps({**spec, "router": "router.npz"}))


def test_oracle_takes_each_requests_best_drafter() -> None:
    p1, p2 = Prompt("1", "a", [1]), Prompt("2", "b", [2])
    a = [Run("a", p1, 11, 5, 1.0, 0, 1), Run("a", p2, 11, 10, 1.0, 0, 1)]
    b = [Run("b", p1, 11, 10, 1.0, 0, 1), Run("b", p2, 11, 2, 1.0, 0, 1)]
    best = oracle_runs({"a": a, "b": b})
    assert [r.mat for r in best] == [2.0, 5.0] and all(r.method == "oracle" for r in best)


def test_padded_pool_adds_perturbed_copies(tmp_path: Path) -> None:
    from bench.harness.tiny_models import random_drafter, tiny_target

    target = tiny_target()
    base = {"x": random_drafter(target, seed=1), "y": random_drafter(target, seed=2)}
    pool = padded_pool(base, 5, scale=0.3)
    assert list(pool)[:2] == ["x", "y"] and len(pool) == 5
    assert not (pool["x~0"].fc.weight == base["x"].fc.weight).all()


def test_the_mean_regret_curve_holds_each_requests_last_value() -> None:
    """Requests end after different numbers of windows; a request with no costed window (the
    length loss) has no seconds curve and is left out of that mean."""
    from bench.learner.hedgespec_report import mean_curve

    prompt = Prompt("p", "a", [1])
    runs = [Run("m", prompt, 5, 2, 1.0, 0.1, 0.9, regret_curve=[0.5, 1.0],
                regret_seconds_curve=[0.01, 0.02, 0.03]),
            Run("m", prompt, 5, 2, 1.0, 0.1, 0.9, regret_curve=[1.5],
                regret_seconds_curve=[0.05]),
            Run("m", prompt, 5, 2, 1.0, 0.1, 0.9, regret_curve=[0.0, 0.0, 3.0])]
    assert mean_curve(runs) == pytest.approx([2.0 / 3, 2.5 / 3, 5.5 / 3])
    assert mean_curve(runs, "regret_seconds_curve") == pytest.approx([0.03, 0.035, 0.04])


def test_every_method_starts_with_empty_model_free_members() -> None:
    """Run twice over the same prompt, fixed on the suffix member: a cache left warm would
    draft the first run's answer whole the second time."""
    from bench.harness.tiny_models import make_engine, tiny_target
    from bench.learner.hedgespec_bench import run_method
    from core.config import TreeConfig
    from core.speculation.model_free.kinds import make_model_free

    engine = make_engine(tiny_target(), {"suffix": make_model_free("suffix")},  # type: ignore[dict-item]
                         TreeConfig(top_k=2, depth=4, total_tokens=8))
    prompt = Prompt("p", "a", [5, 9, 2, 7])
    first, second = (run_method(engine, [prompt], "suffix", "fixed:suffix", 40)[0]
                     for _ in range(2))
    assert first.rounds == second.rounds and first.tokens == second.tokens == 40


def test_mat_counts_speculative_rounds_only() -> None:
    """48 tokens: the prefill's, 20 from 20 plain rounds, 27 from 9 speculative rounds."""
    run = Run("m", Prompt("p", "a", [1]), 48, 9, 1.0, 0.1, 0.9, plain_tokens=20)
    assert run.mat == pytest.approx(3.0)


def test_a_methods_mat_counts_speculative_rounds_only_and_its_plain_rounds_apart() -> None:
    """The totals agree with Run.mat: two requests of 48 tokens, one with 20 plain rounds and 9
    speculative ones of 3 tokens, one with 47 plain rounds and none; counting plain-round
    tokens over speculative rounds gave (94 - 2) / 9 = 10.2."""
    prompt = Prompt("p", "a", [1])
    got = summarize([Run("m", prompt, 48, 9, 1.0, 0.1, 0.9, plain_tokens=20),
                     Run("m", prompt, 48, 0, 1.0, 0.1, 0.9, plain_tokens=47)])
    assert got["mat"] == pytest.approx(3.0)
    assert got["plain_share"] == pytest.approx(67 / 76)
    assert summarize([Run("m", prompt, 10, 3, 1.0, 0.1, 0.9)])["plain_share"] == 0.0


def test_a_variant_keeps_the_pools_model_free_members() -> None:
    from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
    from bench.learner.hedgespec_bench import variant
    from core.config import TreeConfig
    from core.speculation.model_free.kinds import make_model_free

    target = tiny_target()
    members = {"d0": random_drafter(target, seed=0), "suffix": make_model_free("suffix")}
    engine = make_engine(target, members, TreeConfig(top_k=2, depth=3, total_tokens=6))  # type: ignore[arg-type]
    assert variant(engine, prompt_windows=0).drafter_ids() == ["d0", "suffix"]
