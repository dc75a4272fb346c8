"""Drafters with no weights: prompt lookup (`ngram`, ngram.py), a suffix cache shared across
requests (`suffix`, suffix.py) and grammar fast-forward (`grammar`, forced.py). They propose
draft trees from the tokens themselves and compete with the EAGLE-3 drafters under the same
learner. base.py holds their interface (a one-step predictor and its per-request lookup) and
why their counterfactual evaluation is exact; trees.py the trees a lookup grows (the draft
tree, and the same tree as candidate ranks for the evaluation); lookups.py one request's
lookups, kept current with its tokens, and the guesses and trees they record at verified
positions (their side of the evidence); members.py the pool's model-free members as one
member group (core/speculation/members.py); kinds.py builds a member from its kind name and
parameters (what a registry row stores)."""
