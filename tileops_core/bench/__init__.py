"""Roofline evaluation, hardware profiles and the benchmark runner."""
