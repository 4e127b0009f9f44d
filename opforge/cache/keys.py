"""Content keys: one digest over everything that changes a binary."""
import hashlib
from pathlib import Path


def digest(*parts) -> str:
    """A hex sha256 over the parts (str, bytes, or nested lists/tuples of them), order-sensitive."""
    h = hashlib.sha256()
    _feed(h, parts)
    return h.hexdigest()


def _feed(h, value) -> None:
    if isinstance(value, (list, tuple)):
        h.update(b"[%d" % len(value))
        for item in value:
            _feed(h, item)
        h.update(b"]")
        return
    data = value if isinstance(value, bytes) else str(value).encode()
    h.update(b"%d:" % len(data))
    h.update(data)


def file_digest(path) -> str:
    """The hex sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
