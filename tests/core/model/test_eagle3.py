"""EAGLE-3 checkpoint format: official keys load and match a hand-written reference forward;
save/load round-trips; broken or incompatible checkpoints fail with one clear error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bench.harness.tiny_models import random_drafter, tiny_target
from core.model.drafter_check import inspect_drafter
from core.model.eagle3 import DrafterLoadError, build_vocab_mapping, load_drafter, save_drafter
from core.speculation.drafter_pool import PoolSnapshot

H, V, VD, NH, NKV, HD, FF = 32, 64, 40, 4, 2, 8, 48


def official_checkpoint(root: Path, *, seed: int = 0, rope_theta: float | None = None,
                        rope_keys: dict[str, object] | None = None) -> dict[str, torch.Tensor]:
    """Write config.json + model.safetensors exactly as published EAGLE-3 checkpoints are
    laid out."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.2  # noqa: E731
    counts = torch.randint(0, 1000, (V,), generator=g)
    used = torch.topk(counts.float(), VD).indices.sort().values
    sd = {
        "fc.weight": r(H, 3 * H), "midlayer.hidden_norm.weight": 1 + r(H),
        "midlayer.input_layernorm.weight": 1 + r(H),
        "midlayer.post_attention_layernorm.weight": 1 + r(H),
        "midlayer.self_attn.q_proj.weight": r(NH * HD, 2 * H),
        "midlayer.self_attn.k_proj.weight": r(NKV * HD, 2 * H),
        "midlayer.self_attn.v_proj.weight": r(NKV * HD, 2 * H),
        "midlayer.self_attn.o_proj.weight": r(H, NH * HD),
        "midlayer.mlp.gate_proj.weight": r(FF, H), "midlayer.mlp.up_proj.weight": r(FF, H),
        "midlayer.mlp.down_proj.weight": r(H, FF), "norm.weight": 1 + r(H),
        "lm_head.weight": r(VD, H), "d2t": used - torch.arange(VD),
        "t2d": torch.zeros(V, dtype=torch.bool).index_fill(0, used, True),
    }
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": FF, "num_attention_heads": NH, "num_key_value_heads": NKV,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-5, "vocab_size": V, "draft_vocab_size": VD,
           "hidden_act": "silu", "torch_dtype": "float32"}
    if rope_theta is not None:
        cfg["rope_theta"] = rope_theta
    cfg.update(rope_keys or {})
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg))
    save_file(sd, str(root / "model.safetensors"))
    return sd


def reference_forward(sd: dict[str, torch.Tensor], embed: torch.Tensor, feats: torch.Tensor,
                      tokens: torch.Tensor, theta: float = 10000.0,
                      linear_factor: float = 1.0) -> torch.Tensor:
    """EAGLE-3 step-0 logits written out longhand from the published architecture."""
    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

    def rope(x: torch.Tensor) -> torch.Tensor:  # x [heads, T, HD]
        t = x.shape[1]
        freqs = torch.tensor([theta ** (-2 * i / HD) for i in range(HD // 2)])
        # linear: positions / factor
        ang = (torch.arange(t)[:, None].float() / linear_factor) * freqs[None]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        return x * cos + torch.cat([-x[..., HD // 2:], x[..., : HD // 2]], -1) * sin

    g = feats @ sd["fc.weight"].T
    x = torch.cat([rms(embed[tokens], sd["midlayer.input_layernorm.weight"]),
                   rms(g, sd["midlayer.hidden_norm.weight"])], -1)
    t = tokens.numel()
    q = rope((x @ sd["midlayer.self_attn.q_proj.weight"].T).view(t, NH, HD).transpose(0, 1))
    k = rope((x @ sd["midlayer.self_attn.k_proj.weight"].T).view(t, NKV, HD).transpose(0, 1))
    v = (x @ sd["midlayer.self_attn.v_proj.weight"].T).view(t, NKV, HD).transpose(0, 1)
    k, v = k.repeat_interleave(NH // NKV, 0), v.repeat_interleave(NH // NKV, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(HD) + torch.full((t, t), -math.inf).triu(1)
    o = (scores.softmax(-1) @ v).transpose(0, 1).reshape(t, NH * HD)
    h = g + o @ sd["midlayer.self_attn.o_proj.weight"].T
    y = rms(h, sd["midlayer.post_attention_layernorm.weight"])
    mlp = (torch.nn.functional.silu(y @ sd["midlayer.mlp.gate_proj.weight"].T)
           * (y @ sd["midlayer.mlp.up_proj.weight"].T))
    h = h + mlp @ sd["midlayer.mlp.down_proj.weight"].T
    return rms(h, sd["norm.weight"]) @ sd["lm_head.weight"].T


def inputs(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(V, H, generator=g), torch.randn(6, 3 * H, generator=g),
            torch.randint(0, V, (6,), generator=g))


@pytest.mark.parametrize("theta", [None, 500000.0])
def test_official_checkpoint_matches_reference_forward(tmp_path: Path, theta: float | None) -> None:
    sd = official_checkpoint(tmp_path, rope_theta=theta)
    embed, feats, tokens = inputs()
    drafter = load_drafter(tmp_path, embed_tokens=torch.nn.Embedding.from_pretrained(embed))
    assert drafter.cfg.rope_theta == (theta or 10000.0)
    h, _ = drafter(feats[None], tokens[None], torch.arange(6)[None])
    ref = reference_forward(sd, embed, feats, tokens, theta or 10000.0)
    torch.testing.assert_close(drafter.logits(h)[0], ref, atol=1e-5, rtol=1e-5)
    if theta is not None:  # the default theta would give different logits: the field matters
        wrong = reference_forward(sd, embed, feats, tokens, 10000.0)
        assert not torch.allclose(drafter.logits(h)[0], wrong, atol=1e-4)


@pytest.mark.parametrize(("rope_keys", "theta", "factor"), [
    # transformers >= 5 writes rope_parameters and no top-level rope_theta
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, 1e6, 1.0),
    # transformers < 5: rope_theta plus a rope_scaling dict
    ({"rope_theta": 1e6, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, 1e6, 4.0),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}}, 5e5, 2.0),
])
def test_both_rope_config_forms_reach_the_forward(tmp_path: Path, rope_keys: dict[str, object],
                                                  theta: float, factor: float) -> None:
    sd = official_checkpoint(tmp_path, rope_keys=rope_keys)
    embed, feats, tokens = inputs()
    drafter = load_drafter(tmp_path, embed_tokens=torch.nn.Embedding.from_pretrained(embed))
    h, _ = drafter(feats[None], tokens[None], torch.arange(6)[None])
    ref = reference_forward(sd, embed, feats, tokens, theta, linear_factor=factor)
    torch.testing.assert_close(drafter.logits(h)[0], ref, atol=1e-5, rtol=1e-5)


def test_d2t_maps_draft_ids_to_target_ids(tmp_path: Path) -> None:
    sd = official_checkpoint(tmp_path)
    drafter = load_drafter(tmp_path)
    draft_ids = torch.arange(VD)
    target_ids = drafter.draft_to_target(draft_ids)
    assert torch.equal(target_ids, torch.nonzero(sd["t2d"]).flatten())  # official consistency rule
    assert not torch.equal(target_ids, draft_ids)


def test_build_vocab_mapping_official_semantics() -> None:
    counts = torch.tensor([5, 0, 9, 9, 1, 7, 0, 3])
    d2t, t2d = build_vocab_mapping(counts, 4)
    used = torch.tensor([0, 2, 3, 5])  # the four most frequent ids, ascending
    assert (torch.equal(d2t + torch.arange(4), used)
            and torch.equal(torch.nonzero(t2d).flatten(), used))


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_save_load_round_trip_is_exact(tmp_path: Path, fmt: str) -> None:
    target = tiny_target()
    d = random_drafter(target)
    save_drafter(d, tmp_path / "ck" / "sub", dtype=torch.float32, fmt=fmt)
    back = load_drafter(tmp_path / "ck", subfolder="sub",
                        embed_tokens=target.get_input_embeddings())
    for (name, a), (_, b) in zip(d.state_dict().items(), back.state_dict().items(), strict=False):
        assert torch.equal(a, b), name
    cfg = json.loads((tmp_path / "ck" / "sub" / "config.json").read_text())
    # output-of-layer ids
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert back.cfg.aux_layers == (1, 2, 3)
    assert "embed_tokens.weight" not in _keys(tmp_path / "ck" / "sub", fmt)


def _keys(root: Path, fmt: str) -> set[str]:
    if fmt == "bin":
        return set(torch.load(root / "pytorch_model.bin", weights_only=True))
    from safetensors import safe_open

    with safe_open(str(root / "model.safetensors"), "pt") as f:
        return set(f.keys())


def _target_dir(tmp_path: Path, hidden: int = H, vocab: int = V) -> Path:
    target = tiny_target(vocab=vocab, hidden=hidden)
    target.save_pretrained(tmp_path / "target")
    return tmp_path / "target"


def test_inspect_reports_a_compatible_drafter(tmp_path: Path) -> None:
    official_checkpoint(tmp_path / "d")
    report = inspect_drafter(tmp_path / "d", _target_dir(tmp_path))
    assert report.compatible and report.reason is None and report.format == "safetensors"
    assert (report.hidden_size, report.draft_vocab_size, report.target_vocab_size) == (H, VD, V)
    assert report.architecture == "LlamaForCausalLM" and (report.num_parameters or 0) > 0


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda sd: sd.pop("fc.weight"), "missing tensors ['fc.weight']"),
    (lambda sd: sd.update(extra=torch.zeros(1)), "unexpected tensors ['extra']"),
    (lambda sd: sd.update({"lm_head.weight": torch.zeros(VD + 1, H)}),
     f"lm_head.weight is [{VD + 1}, {H}], config implies [{VD}, {H}]"),
    (lambda sd: sd.update(d2t=torch.full((VD,), 10_000)), "d2t maps draft ids outside"),
])
def test_broken_checkpoints_name_the_problem(tmp_path: Path, mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    sd = official_checkpoint(tmp_path)
    mutate(sd)
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(DrafterLoadError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_drafter(tmp_path)


def test_incompatible_target_is_named(tmp_path: Path) -> None:
    official_checkpoint(tmp_path / "d")
    report = inspect_drafter(tmp_path / "d", _target_dir(tmp_path, hidden=48, vocab=80))
    assert not report.compatible and report.readable
    assert "hidden size 32 != target hidden size 48" in str(report.reason)
    assert "vocab size 64 != target vocab size 80" in str(report.reason)


def test_unreadable_files_are_reported_as_unreadable(tmp_path: Path) -> None:
    official_checkpoint(tmp_path / "d")
    (tmp_path / "d" / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    report = inspect_drafter(tmp_path / "d", _target_dir(tmp_path))
    assert (not report.compatible and not report.readable
            and "cannot read weights" in str(report.reason))
    assert not inspect_drafter(tmp_path / "missing", tmp_path / "target").readable
    with pytest.raises(DrafterLoadError, match="invalid subfolder"):
        load_drafter(tmp_path / "d", subfolder="../d")


def test_pickle_with_code_is_refused(tmp_path: Path) -> None:
    official_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").unlink()

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("pwned",))

    torch.save({"fc.weight": Evil()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(DrafterLoadError, match="cannot read weights"):
        load_drafter(tmp_path)


def test_batched_catch_up_equals_each_drafter_alone() -> None:
    target = tiny_target()
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(4)}
    snap = PoolSnapshot(drafters)
    assert len(snap.groups) == 1
    g = torch.Generator().manual_seed(0)
    feats, tokens = torch.randn(5, 3 * 32, generator=g), torch.randint(0, 64, (5,), generator=g)
    group = snap.groups[0]
    out = group.catch_up(group.empty_kv(), feats, tokens, torch.arange(5), top_k=3)
    for i, d in enumerate(drafters.values()):
        h, (k, _) = d(feats[None], tokens[None], torch.arange(5)[None])
        torch.testing.assert_close(out.h_last[i], h[0, -1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.kv[0][i], k[0], atol=1e-5, rtol=1e-5)
        want = d.draft_to_target(torch.topk(d.logits(h)[0], 3).indices)
        assert torch.equal(out.topk_ids[i], want)


def test_sharded_safetensors_load_like_one_file(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    target = tiny_target()
    d = random_drafter(target)
    save_drafter(d, tmp_path, dtype=torch.float32)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:7],
              "model-00002-of-00002.safetensors": names[7:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / shard))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {k: s for s, ks in shards.items() for k in ks}}))
    back = load_drafter(tmp_path, embed_tokens=target.get_input_embeddings())
    for (name, a), (_, b) in zip(d.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert inspect_drafter(tmp_path, _target_dir(tmp_path)).format == "safetensors-sharded"
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(DrafterLoadError, match="missing"):
        load_drafter(tmp_path)
