"""The drafter pool: registry orchestration (hot add/remove, downloads), registry rows ->
engine pool sync, multi-replica refresh, the database handle and the target's source."""
