"""Planning: partition (once per session), the memory plan, compiled execution plans."""
