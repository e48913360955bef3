"""Pluggy hook specifications and the entry-point plugin loader."""
