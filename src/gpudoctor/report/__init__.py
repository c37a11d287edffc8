"""Render records and findings: rich terminal views, JSON and self-contained HTML."""
