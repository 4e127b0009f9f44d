"""The CPU provider: opforge's C++ kernels (the .cpp files here, built into one library by
`library`) and the few Python kernels for non-tensor values (`optional`)."""
