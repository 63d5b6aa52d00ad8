"""``python -m ddlscope`` runs the command line."""

from ddlscope.cli.main import main

main()
