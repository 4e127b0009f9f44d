"""Running: the executor, control flow, feeds and outputs, OrtValue and I/O binding."""
