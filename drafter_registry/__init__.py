"""Drafter registry: SQLAlchemy models, keyword-only CRUD and Hugging Face downloads (no torch).

Modules (import them directly; this package imports nothing so `import drafter_registry` stays
cheap):

- `db`: `make_engine(url)`, `make_session_factory(engine)`, `upgrade(url)` (Alembic to head,
  independent of the working directory), `ping(engine)`, `pool_version(session)`.
- `models`: tables `drafters`, `audit_events`, `registry_state`, `request_logs`.
- `crud`: keyword-only functions on a `Session`; each mutation is one transaction with an audit
  row and a pool-version bump (see its docstring).
- `schemas`: admin API DTOs (`DrafterCreate`, `DrafterUpdate`, `DrafterPublic`, ...).
- `hub`: `download_drafter(...)` into the HF cache, resumable, with byte progress.
- `validation`: torch-free checks of a drafter directory (truncation, corruption, shapes).
- `fetcher`: `DrafterFetcher` runs pending drafters to `ready` or `failed` in the background.
- `request_log`: `RequestLogWriter`, batched off-thread request statistics with retention.
- `discovery`: `discover_and_register(session, spec, ...)`: every drafter under a folder prefix
  of a multi-drafter Hub repository (CLI, admin API and seed pools share it).
- `seed`: `load_seed_pool(path)`, `import_seed_pool(session, pool, ...)`.
- `identifiers`, `errors`: input validation and the exception types.

Multi-replica convergence (PostgreSQL): by polling. Every change that can alter the serving pool
bumps `registry_state.pool_version` in the same transaction; each replica reads it (one
primary-key lookup) every second or so and re-syncs its engine pool when it moved. Polling was
chosen over LISTEN/NOTIFY because it works the same on SQLite, needs no long-lived extra
connection, and cannot miss a notification across a reconnect; its cost is a trivial query per
replica per interval and a delay of at most one interval.
"""
