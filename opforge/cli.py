"""The `opforge` command: build, run, info, cache."""
import argparse
import sys
import time
from pathlib import Path


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("b")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_build(args) -> int:
    import opforge

    sources = [Path(s) for s in args.sources]
    if len(sources) == 1 and sources[0].is_dir():
        lib = opforge.load_dir(sources[0], name=args.name, verbose=args.verbose)
    else:
        name = args.name or sources[0].stem
        lib = opforge.CustomOpBuilder(name, sources, verbose=args.verbose).load()
    print(repr(lib))
    return 0


def cmd_cache(args) -> int:
    from opforge import config
    from opforge.cache import cache_root
    from opforge.cache import evict

    # doctor examines (and mends) what would make cache_root refuse the cache
    root = config.cache_dir().absolute() if args.action == "doctor" else cache_root()
    if args.action == "doctor" and not root.is_dir():
        print(f"{root}: no cache yet")
        return 0
    if args.action == "ls":
        entries = evict.list_entries(root)
        print(f"{root}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
              f"{_human(evict.folder_bytes(root))} in all")
        for e in entries:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["created"]))
            flag = "" if e["valid"] else f"  CANNOT LOAD: {e['problem']}"
            print(f"  {e['name']:<24} {_human(e['bytes']):>10}  {when}  {e['path'].name}{flag}")
    elif args.action == "clean":
        if not (args.all or args.older_than is not None or args.max_size):
            print("say what to remove: --all, --older-than DAYS or --max-size SIZE", file=sys.stderr)
            return 2
        removed = evict.clean(root, args.older_than, _size(args.max_size) if args.max_size else None,
                              args.all)
        print(f"removed {len(removed)} item(s) from {root}")
    else:
        problems = evict.doctor(root, fix=args.fix)
        for p in problems:
            print(f"  - {p}")
        print(f"{root}: " + ("healthy" if not problems else f"{len(problems)} problem(s)"))
        return 1 if problems and not args.fix else 0
    return 0


def _custom_ops(args) -> list:
    return [p for p in (args.ops or [])]


def _numpy_dtype(type_string: str):
    """'tensor(float)' -> float32, as onnxruntime names element types."""
    import numpy as np

    name = type_string[type_string.find("(") + 1:type_string.rfind(")")]
    return np.dtype({"float": "float32", "double": "float64", "float16": "float16"}.get(name, name))


def _feeds(sess, specs, seed: int) -> dict:
    """name=file.npy pairs; inputs not given are filled with random data of the declared shape."""
    import numpy as np

    given = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep:
            raise ValueError(f"--input {spec!r}: expected NAME=FILE.npy")
        given[name] = np.load(path)
    rng = np.random.default_rng(seed)
    for arg in sess.get_inputs():
        if arg.name not in given:
            dtype = _numpy_dtype(arg.type)
            shape = [d if isinstance(d, int) and d >= 0 else 1 for d in arg.shape]
            given[arg.name] = (rng.standard_normal(shape) if dtype.kind == "f" else
                               rng.integers(0, 2, shape)).astype(dtype)
            print(f"input {arg.name}: random {dtype} {tuple(shape)}")
    return given


def cmd_run(args) -> int:
    import numpy as np

    import opforge

    sess = opforge.InferenceSession(args.model, custom_ops=_custom_ops(args))
    feeds = _feeds(sess, args.input, args.seed)
    outputs = sess.run(None, feeds)
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    for arg, value in zip(sess.get_outputs(), outputs):
        value = np.asarray(value)
        preview = np.array2string(value.ravel()[:6], precision=4, separator=", ")
        print(f"output {arg.name}: {value.dtype} {value.shape} {preview}")
        if out_dir:
            np.save(out_dir / f"{arg.name.replace('/', '_')}.npy", value)
    return 0


def cmd_info(args) -> int:
    import opforge

    sess = opforge.InferenceSession(args.model, custom_ops=_custom_ops(args))
    print(sess.describe())
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opforge", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build C++ sources (or a folder of them) into a cached library")
    b.add_argument("sources", nargs="+")
    b.add_argument("--name")
    b.add_argument("-v", "--verbose", action="store_true")
    b.set_defaults(func=cmd_build)
    r = sub.add_parser("run", help="run an ONNX model on inputs from .npy files (or random ones)")
    r.add_argument("model")
    r.add_argument("--ops", action="append", help="a folder of .cpp ops, a source, or a library (repeatable)")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--output-dir")
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=cmd_run)
    i = sub.add_parser("info", help="inputs, outputs, opsets, op histogram, the kernel of each node")
    i.add_argument("model")
    i.add_argument("--ops", action="append")
    i.set_defaults(func=cmd_info)
    c = sub.add_parser("cache", help="list, clean or check the build cache")
    c.add_argument("action", choices=["ls", "clean", "doctor"])
    c.add_argument("--all", action="store_true", help="clean: remove everything")
    c.add_argument("--older-than", type=float, metavar="DAYS", help="clean: entries unused this long")
    c.add_argument("--max-size", metavar="SIZE", help="clean: evict oldest entries above SIZE (e.g. 2G)")
    c.add_argument("--fix", action="store_true", help="doctor: make cache folders private again and remove entries that cannot load")
    c.set_defaults(func=cmd_cache)
    return p


def main(argv=None) -> int:
    """Entry point of the `opforge` command."""
    from opforge.errors import OpforgeError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (OpforgeError, FileNotFoundError, ValueError, NotImplementedError) as exc:
        print(f"opforge: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
