"""Drafters with no weights: prompt lookup (`ngram`, ngram.py), a suffix cache shared across
requests (`suffix`, suffix.py) and grammar fast-forward (`grammar`, forced.py). They propose
draft trees from the tokens themselves and compete with the EAGLE-3 drafters under the same
learner. base.py holds their interface (a one-step predictor and its per-request lookup) and
why their counterfactual evaluation is exact for a chain; evidence.py holds one request's
lookups, the trees they grow and their side of the evidence; kinds.py builds a member from its
kind name and parameters (what a registry row stores)."""
