"""The build cache: a private root, content keys, per-key locks, atomic publish, integrity."""
from opforge.cache.entry import Entry, find_entry, key_lock, publish, write_atomic
from opforge.cache.keys import digest, file_digest
from opforge.cache.root import cache_root

__all__ = ["Entry", "cache_root", "digest", "file_digest", "find_entry", "key_lock", "publish",
           "write_atomic"]
