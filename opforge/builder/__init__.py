"""The builder: C++ sources -> build.ninja -> ninja -> a cached library -> a loaded module."""
from opforge.builder.api import CustomOpBuilder, load_dir, load_inline

__all__ = ["CustomOpBuilder", "load_dir", "load_inline"]
