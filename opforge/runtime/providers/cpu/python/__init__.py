"""The CPU provider's Python kernels: values no C kernel takes (strings, sequences, optionals,
maps) and the ML ops' label handling around the native scoring kernels."""
