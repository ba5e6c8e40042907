"""Releasing the tables: the Hub dataset folder and card, upload, loading, and the images they refer to."""
