"""The robustness benchmark's workloads and report (the measurement itself runs in bench/)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.harness.tiny_pool import train_tokenizer
from bench.learner.robustness import WRAPPERS, markdown, workloads


def test_workloads_wrap_the_same_prompts_and_add_the_ood_set(tmp_path: Path) -> None:
    rows = [{"id": f"{d}-{i}", "domain": d, "prompt": f"{d} question {i}"} for d in ("math", "sql")
            for i in range(3)]
    (tmp_path / "eval_prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = train_tokenizer()
    sets = workloads(tmp_path / "pool.json", tok, per_domain=2, ood=3, max_prompt=64)
    assert ([p.domain for p in sets["clean"]]
            == ["math", "sql", "math", "sql"]), "interleaved by domain"
    assert [p.id for p in sets["wrapped"]] == [p.id for p in sets["clean"]]
    for clean, wrapped, wrapper in zip(sets["clean"], sets["wrapped"], WRAPPERS, strict=False):
        text = tok.decode(wrapped.ids)
        assert wrapped.ids != clean.ids and wrapper.split("{p}")[0].strip()[:20] in text
    assert len(sets["ood"]) == 3 and {p.domain for p in sets["ood"]} == {"ood_humaneval"}


def test_the_report_puts_hedgespec_against_router_and_oracle() -> None:
    def m(mat: float) -> dict[str, float]:
        return {"mat": mat, "tokens_per_s": 10 * mat}

    w = {"prompts": 4, "router_accuracy": 0.5, "router_picks": {"math": 4}, "seconds": 1.0,
         "methods": {"generalist": m(1.5), "router": m(1.6), "hedgespec": m(2.0),
                     "hedgespec_router": m(2.25), "oracle": m(2.5)}}
    text = markdown({"workloads": {"wrapped": w},
                     "config": {"max_new_tokens": 8, "tree": {}, "threads": 1, "dtype": "float32",
                                "pool": "p"}})
    assert ("| wrapped | 4 | 50% | 1.50 | 1.60 | 2.00 | 2.50 | 1.250x | 0.800x | 16.0 | 20.0 | "
            "2.25 | 0.900x |" in text)
