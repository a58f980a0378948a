"""Delivery: the workspace's connectors (SMTP, signed webhooks), the outbox, and test sends (C8)."""
