"""`opforge cache ls | clean | doctor`: what the build cache holds, making room, mending it."""
import sys
import time


def add_parser(sub) -> None:
    c = sub.add_parser("cache", help="list, clean or check the build cache",
                       description="The build cache ($OPFORGE_CACHE_DIR, else ~/.cache/opforge).")
    c.add_argument("action", choices=["ls", "clean", "doctor"],
                   help="ls: entries and space; clean: remove items; doctor: check (and --fix) the cache")
    c.add_argument("--all", action="store_true", help="clean: remove everything")
    c.add_argument("--older-than", type=float, metavar="DAYS", help="clean: items unused this long")
    c.add_argument("--max-size", metavar="SIZE", help="clean: evict the oldest items above SIZE (e.g. 2G)")
    c.add_argument("--fix", action="store_true",
                   help="doctor: make cache folders private again and remove entries that cannot load")
    c.set_defaults(func=cmd_cache)


def cmd_cache(args) -> int:
    from opforge import config
    from opforge.cache import cache_root

    # doctor examines (and mends) what would make cache_root refuse the cache
    root = config.cache_dir().absolute() if args.action == "doctor" else cache_root()
    if args.action == "doctor":
        return _doctor(root, args.fix)
    if args.action == "ls":
        return _ls(root)
    return _clean(root, args)


def _ls(root) -> int:
    from opforge.cache import evict

    entries = evict.list_entries(root)
    usage = evict.usage(root)
    print(f"{root}: {len(entries)} librar{'y' if len(entries) == 1 else 'ies'}, "
          f"{human(sum(usage.values()))} in all")
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["created"]))
        flag = "" if e["valid"] else f"  CANNOT LOAD: {e['problem']}"
        print(f"  {e['name']:<24} {human(e['bytes']):>10}  {when}  {e['path'].name}{flag}")
    print("space by kind: " + ", ".join(f"{kind} {human(n)}" for kind, n in usage.items() if n))
    return 0


def _clean(root, args) -> int:
    from opforge.cache import evict

    if not (args.all or args.older_than is not None or args.max_size):
        print("say what to remove: --all, --older-than DAYS or --max-size SIZE", file=sys.stderr)
        return 2
    removed = evict.clean(root, args.older_than, parse_size(args.max_size) if args.max_size else None,
                          args.all)
    print(f"removed {len(removed)} item(s) from {root}; {human(evict.folder_bytes(root))} left")
    return 0


def _doctor(root, fix: bool) -> int:
    from opforge.cache import evict

    if not root.is_dir():
        print(f"{root}: no cache yet")
        return 0
    problems = evict.doctor(root, fix=fix)
    for p in problems:
        print(f"  - {p}")
    print(f"{root}: " + ("healthy" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems and not fix else 0


def parse_size(text: str) -> int:
    """'2G', '500M', '10k' or a byte count -> bytes; ValueError names the bad text."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    cleaned = text.strip().lower().rstrip("ib").rstrip("b") if text else ""
    try:
        if cleaned[-1:] in units:
            return int(float(cleaned[:-1]) * units[cleaned[-1]])
        return int(cleaned)
    except ValueError:
        raise ValueError(f"--max-size {text!r}: expected a size such as 500M or 2G") from None


def human(n: float) -> str:
    """Bytes for people: 512 B, 3.4 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
