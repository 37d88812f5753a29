"""The command line: ``launch`` and its subcommands, one module each.

Owns argument parsing and the one place where errors become one line and an exit
code (``main.main``, the ``launch`` entry point). Every subcommand is a thin module
over the stage that does the work; ``main.COMMANDS`` maps each name to its module,
imported only when used. May import every other subpackage; none imports it.
"""
