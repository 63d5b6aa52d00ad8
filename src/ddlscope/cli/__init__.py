"""The ``ddlscope`` command line (typer). Each module registers one command or command group."""
