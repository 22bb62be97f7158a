"""The ``portable`` command line."""
