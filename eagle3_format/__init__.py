"""The official EAGLE-3 drafter checkpoint format, stated once and without torch.

Published drafters (yuhuili/EAGLE3-*, SpecForge exports, the HedgeSpec paper's) are a directory:
  config.json   architectures LlamaForCausalLM | LlamaForCausalLMEagle3, hidden_size H,
                vocab_size V (the target's vocabulary), draft_vocab_size Vd, RoPE, optional
                target_hidden_size Ht and feature layers                  (config, rope_config,
                                                                           aux_layers)
  weights       model.safetensors, model.safetensors.index.json + shards or pytorch_model.bin;
                fc [H, 3Ht], one decoder layer `midlayer.*` with `hidden_norm`, norm, lm_head
                [Vd, H], d2t [Vd] offsets (target id = draft id + d2t[draft id]), t2d [V] mask,
                embed_tokens [V, H] usually absent (shared from the target)   (weights)
and it fits a target when sizes and feature layers agree                    (target_fit).

Two readers apply these rules: `core.model.eagle3` when it loads a drafter, and
`drafter_registry.validation` when it checks a download before that load. The registry must not
depend on torch or on the engine, so it imports nothing of `core` (DESIGN.md section 1); this
package, the format and not the engine, stands beside both, and its modules import only the
standard library and each other. tests/test_architecture.py enforces both halves; every rule raises
`DrafterConfigError` and each reader turns that into its own error type, message unchanged.
"""
