"""envhub's version, in a module of its own: the floors below the package face (sandboxes, the
trajectory record) read it without importing ``envhub/__init__.py`` and every env it registers."""

__version__ = "0.1.0"
