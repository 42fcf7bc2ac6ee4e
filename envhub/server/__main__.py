"""``python -m envhub.server ENV_ID [options]``: what the server container runs."""

from envhub.server.cli import main

main()
