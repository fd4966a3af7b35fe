"""The package version (pyproject.toml says the same), in a module of its own so that modules deep
in the package can name it without importing the package's public API."""

__version__ = "0.1.0"
