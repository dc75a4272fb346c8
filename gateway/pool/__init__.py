"""The drafter pool: registry orchestration (hot add/remove, downloads), registry rows ->
engine pool sync, multi-replica refresh, the database handle, the target's source and the
request-log record of a finished request."""
