"""Drafters with no weights: prompt lookup (`ngram`) and a suffix cache shared across requests
(`suffix`). They propose draft trees from the tokens themselves and compete with the EAGLE-3
drafters under the same learner (core/speculation/model_free/base.py says how)."""
