"""Offerings: the catalog list (O1), create/update/archive (O2, O3, O5) and templates (O4)."""
