"""Alembic migrations of the drafter registry (run with `drafter_registry.db.upgrade(url)`)."""
