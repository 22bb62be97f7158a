"""Built-in model definitions."""
