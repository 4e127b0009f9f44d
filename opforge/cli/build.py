"""`opforge build`: compile C++ sources, or a folder of them, into a cached op library."""
from pathlib import Path


def add_parser(sub) -> None:
    b = sub.add_parser("build", help="build C++ sources (or one folder of them) into a cached library",
                       description="Build op sources into a cached library and list its ops.")
    b.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="C++ source files of one library, or a single folder (every source in it)")
    b.add_argument("--name", help="the library's name (default: the folder's or first source's name)")
    b.add_argument("--onnxruntime", metavar="PATH",
                   help="also build it as an onnxruntime custom-op library, written to PATH "
                        "(register it with onnxruntime.SessionOptions().register_custom_ops_library)")
    b.add_argument("-v", "--verbose", action="store_true", help="print compiler commands and output")
    b.set_defaults(func=cmd_build)


def cmd_build(args) -> int:
    import opforge

    sources = [Path(s) for s in args.sources]
    folders = [s for s in sources if s.is_dir()]
    if folders and len(sources) > 1:
        raise ValueError(f"give one folder, or source files, not both: {', '.join(map(str, folders))} "
                         "is a folder (`opforge build ops/` builds every source in it)")
    if folders:
        lib = opforge.load_dir(folders[0], name=args.name, verbose=args.verbose)
    else:
        lib = opforge.CustomOpBuilder(args.name or _identifier(sources[0].stem), sources,
                                      verbose=args.verbose).load()
    print(repr(lib))
    if args.onnxruntime:
        print(f"onnxruntime custom-op library: {lib.onnxruntime_library(args.onnxruntime)}")
    return 0


def _identifier(text: str) -> str:
    import re

    ident = re.sub(r"\W", "_", text) or "ops"
    return ident if not ident[0].isdigit() else f"ops_{ident}"
