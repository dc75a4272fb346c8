"""Which drafter a request uses, learned online: the learners (NormalHedge and its delayed,
sleeping-experts form, Hedge, the bandits, fixed), the feedback windows that turn each round's
evidence into losses, the counterfactual estimators of every drafter's acceptance length, the
arms' measured costs for the time loss, learner sessions and the prompt router.

May import: the standard library, numpy, torch and core's base (`core.config`, `core.errors`,
`core.stats`); no other room of `core` (tests/test_architecture.py). It knows drafters only
as arm indices and evidence arrays."""
