"""What the tests share: numeric comparisons that can be shown to fail, model builders and
the light model zoo, whole-model comparison with onnxruntime, kernel checks, the fuzzer, CUDA
stand-ins. Benchmarks import it too (run them as modules from the project root:
`python -m benchmarks.bench_models`)."""
