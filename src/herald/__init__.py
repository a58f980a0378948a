"""Herald: a self-hostable Offer Listing and Campaign Draft API (v5)."""

__version__ = "0.1.0"
