"""Workspaces (tenants) and what belongs to them: API keys, feature flags, limits, tags, templates."""
