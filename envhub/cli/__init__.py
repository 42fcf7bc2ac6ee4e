"""The ``envhub`` command line (an application on top of every floor; nothing imports it).

:mod:`.commands` holds the top-level app and the built-in commands; the other commands live
beside the code they drive (each part's ``cli.py``) and are imported on first use; :mod:`.common`
holds what they all share.
"""

from envhub.cli.commands import app, main

__all__ = ["app", "main"]
