"""Thin adapters over the facade: the CLI (and later HTTP and MCP)."""
