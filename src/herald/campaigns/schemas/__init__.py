"""Pydantic models of the campaign request body, one module per component (spec "Campaign")."""
