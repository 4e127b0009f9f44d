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

    from opforge.errors import BuildError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except BuildError as exc:
        saved = f"\n\n({exc.where}{_saved_log(exc)})" if exc.log else ""
        print(f"opforge: error: {exc.message}{saved}", file=sys.stderr)
        return 1
    except (OpforgeError, OSError, ValueError, NotImplementedError) as exc:
        print(f"opforge: error: {exc}", file=sys.stderr)
        return 1


def _saved_log(error) -> str:
    """Where the failed build's full log and command were written, for a person at a shell."""
    import tempfile
    from pathlib import Path

    from opforge import config

    try:
        folder = config.cache_dir() / "logs"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="opforge-build-"))
    log, command = folder / "last-build.log", folder / "last-build.command"
    log.write_text(error.log)
    command.write_text(error.command + "\n")
    return f"the full log: {log}\nthe failing command: {command}"


if __name__ == "__main__":
    sys.exit(main())
