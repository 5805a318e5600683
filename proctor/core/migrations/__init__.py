"""Alembic migrations. Every schema change is a migration, tested up and down."""
