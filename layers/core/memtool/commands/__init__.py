"""Command-line subcommands that grew past a function in memtool.cli (the semantic model's)."""
