"""HTTP plumbing shared by every router: request ids, auth, rate limits, idempotency."""
