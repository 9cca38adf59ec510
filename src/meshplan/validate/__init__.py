"""Validation against measured run records (src/meshplan/records/SCHEMA.md)."""
