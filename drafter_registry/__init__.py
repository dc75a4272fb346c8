"""Drafter registry: SQLAlchemy models, keyword-only CRUD and Hugging Face downloads (no torch)."""
