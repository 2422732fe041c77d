"""The ``isingattn`` command. Each subcommand lives in its own module with ``add_parser``
(registering its arguments) and ``run(args)``; :data:`COMMANDS` lists them in help order."""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand name -> module (relative to this package)
COMMANDS = {
    "demo": "._demo",
    "exact": "._exact",
    "sample": "._sample",
    "compare": "._compare",
    "train": "._train",
    "evaluate": "._evaluate",
    "generate": "._generate",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="isingattn",
        description="Boltzmann attention and Ising-model sampling: exact inference, samplers, "
        "diagnostics.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMANDS.values():
        module = importlib.import_module(mod, __name__)
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from ..samplers import QPUConfigurationError, QPUConnectionError

    # what a user can cause (bad values, files, folders, credentials, an unreachable host):
    # one line and exit code 2; anything else is a bug and keeps its traceback
    try:
        return int(args.run(args) or 0)
    except (ValueError, TypeError, OSError, QPUConfigurationError, QPUConnectionError) as e:
        print(f"isingattn {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
