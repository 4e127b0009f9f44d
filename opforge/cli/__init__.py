"""The `opforge` command: build ops, run, describe and time models, manage the build cache."""
import argparse
import sys

from opforge.cli import build, cache, models


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per verb, each with help for every argument."""
    from opforge import __version__

    p = argparse.ArgumentParser(prog="opforge", description=__doc__)
    p.add_argument("--version", action="version", version=f"opforge {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build.add_parser(sub)
    models.add_parsers(sub)
    cache.add_parser(sub)
    return p


def main(argv=None) -> int:
    """Entry point of the `opforge` command; returns the exit status."""
    from opforge.errors import OpforgeError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (OpforgeError, OSError, ValueError, NotImplementedError) as exc:
        print(f"opforge: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
