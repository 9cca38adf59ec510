"""Validation against measured run records (../shared/run-records/SCHEMA.md)."""
