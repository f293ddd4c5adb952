"""The `fm` command and what its subcommands do."""
