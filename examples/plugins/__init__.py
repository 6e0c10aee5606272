"""Plug-in modules to pass with `--plugin` (docs/extending.md)."""
