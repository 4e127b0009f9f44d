"""The CPU provider: opforge's C++ kernels, one folder per op family (conv/, gemm/, pool/,
normalization/, elementwise/, reduce/, data_movement/, quantization/, ml/, attention/, rnn/,
signal/, vision/, contrib/, training/; common/ holds what they share), built into one library by
`library`; and, in python/, the Python kernels for values no C kernel takes (strings,
sequences, optionals, maps)."""
