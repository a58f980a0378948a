"""Audience data: users and events (ingestion), custom segments, segmentation and reachability."""
