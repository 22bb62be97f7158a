"""Datasets and data loading."""
