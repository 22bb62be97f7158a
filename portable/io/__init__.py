"""Persistence helpers shared by every saver: atomic writes, JSON encoding of tensors."""
