"""Campaigns: drafts of Push and Email campaigns, their components, and the rules they must pass."""
