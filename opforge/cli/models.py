"""`opforge run | info | bench`: run a model on given or random inputs, describe it, time it."""
import statistics
import time
from pathlib import Path


def add_parsers(sub) -> None:
    ops_help = "a folder of .cpp/.cu ops, a source file or a built library (repeatable)"
    r = sub.add_parser("run", help="run an ONNX model on inputs from .npy files (or random ones)",
                       description="Run a model once (or --repeat times) and summarise its outputs.")
    r.add_argument("model", help="the .onnx file")
    r.add_argument("--ops", action="append", help=ops_help)
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="an input's value; inputs not given get seeded random data of their shape")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument("--repeat", type=int, default=1, metavar="N", help="run N times and print the latency")
    r.add_argument("--full", action="store_true", help="print every output value, not a summary")
    r.add_argument("--save", metavar="OUT.npz", help="save the outputs (by output name) to an .npz file")
    r.add_argument("--output-dir", help="save each output as OUTPUT_NAME.npy in this folder")
    r.set_defaults(func=cmd_run)
    i = sub.add_parser("info", help="inputs, outputs, opsets, op counts and the kernel of each node",
                       description="Describe a model; ops without a kernel are listed, not fatal.")
    i.add_argument("model", help="the .onnx file")
    i.add_argument("--ops", action="append", help=ops_help)
    i.set_defaults(func=cmd_info)
    b = sub.add_parser("bench", help="latency percentiles of a model (and the ratio to onnxruntime)",
                       description="Time a model on seeded random inputs.")
    b.add_argument("model", help="the .onnx file")
    b.add_argument("--ops", action="append", help=ops_help)
    b.add_argument("--repeat", type=int, default=50, metavar="N", help="timed runs (default 50)")
    b.add_argument("--threads", type=int, default=0, help="intra-op threads (default: every core)")
    b.add_argument("--ort", action="store_true", help="time onnxruntime on the same inputs too")
    b.set_defaults(func=cmd_bench)


def cmd_run(args) -> int:
    import numpy as np

    sess = _session(args)
    feeds = _feeds(sess, args.input, args.seed)
    outputs, times = _timed_runs(lambda: sess.run(None, feeds), max(args.repeat, 1))
    names = [o.name for o in sess.get_outputs()]
    for name, value in zip(names, outputs):
        print(_summary(name, value, args.full))
    if args.repeat > 1:
        print(f"latency over {len(times)} runs: {_percentiles(times)}")
    else:
        print(f"latency: {times[0] * 1e3:.3f} ms (first run; --repeat N for a steady figure)")
    if args.save:
        np.savez(args.save, **{n.replace("/", "_"): np.asarray(v) for n, v in zip(names, outputs)})
        print(f"saved {len(names)} output(s) to {args.save}")
    if args.output_dir:
        folder = Path(args.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, value in zip(names, outputs):
            np.save(folder / f"{name.replace('/', '_')}.npy", np.asarray(value))
    return 0


def cmd_info(args) -> int:
    import onnx

    from opforge.runtime.errors import KernelNotFoundError

    try:
        print(_session(args).describe())
        return 0
    except KernelNotFoundError:
        pass
    model = onnx.load(args.model, load_external_data=False)
    print(_describe_unresolved(model, args.ops))
    return 0


def cmd_bench(args) -> int:
    import os

    options = _options(args.threads)
    sess = _session(args, options)
    feeds = _feeds(sess, None, 0, quiet=True)
    sess.run(None, feeds)   # the first run of a signature compiles its plan
    _, ours = _timed_runs(lambda: sess.run(None, feeds), args.repeat)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.model}: {args.repeat} runs, load average {load}")
    print(f"  opforge      {_percentiles(ours)}")
    if args.ort:
        ort = _onnxruntime_session(args.model, args.threads)
        if ort is None:
            print("  onnxruntime  not installed (pip install onnxruntime)")
            return 0
        ort.run(None, feeds)
        _, theirs = _timed_runs(lambda: ort.run(None, feeds), args.repeat)
        print(f"  onnxruntime  {_percentiles(theirs)}")
        print(f"  ratio opforge/onnxruntime (median): {statistics.median(ours) / statistics.median(theirs):.2f}")
    return 0


def _options(threads: int):
    import opforge

    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def _session(args, options=None):
    import opforge
    from opforge.runtime.errors import KernelNotFoundError
    from opforge.runtime.execute.executor import CUSTOM_OPS_ADVICE

    try:
        return opforge.InferenceSession(args.model, options, custom_ops=list(args.ops or []))
    except KernelNotFoundError as exc:   # advice for this command line, not for Python
        raise KernelNotFoundError(str(exc).replace(CUSTOM_OPS_ADVICE, CLI_ADVICE)) from None


CLI_ADVICE = ("Supply one with --ops FOLDER (every .cpp/.cu source in it is built and its ops "
              "registered; --ops may be given more than once)")


def _onnxruntime_session(model: str, threads: int):
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _timed_runs(run, repeat: int) -> tuple:
    times, outputs = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        outputs = run()
        times.append(time.perf_counter() - start)
    return outputs, times


def _percentiles(times: list) -> str:
    ordered = sorted(times)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3  # noqa: E731
    return (f"median {statistics.median(ordered) * 1e3:.3f} ms, p90 {pick(0.9):.3f} ms, "
            f"min {ordered[0] * 1e3:.3f} ms, max {ordered[-1] * 1e3:.3f} ms")


def _summary(name: str, value, full: bool) -> str:
    import numpy as np

    if isinstance(value, list):
        return f"output {name}: sequence of {len(value)}"
    value = np.asarray(value)
    head = f"output {name}: {value.dtype} {list(value.shape)}"
    if full:
        with np.printoptions(threshold=np.inf, linewidth=120):
            return f"{head}\n{value}"
    if value.size and value.dtype.kind in "fiub":
        numbers = value.astype(np.float64)
        return (f"{head} min {numbers.min():.6g} max {numbers.max():.6g} mean {numbers.mean():.6g}")
    return head


def _feeds(sess, specs, seed: int, quiet: bool = False) -> dict:
    """NAME=FILE.npy pairs; inputs not given get seeded random data of their declared shape."""
    import numpy as np

    given = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep:
            raise ValueError(f"--input {spec!r}: expected NAME=FILE.npy")
        given[name] = np.load(path)
    rng = np.random.default_rng(seed)
    for arg in sess.get_inputs():
        if arg.name not in given:
            dtype = _numpy_dtype(arg.type)
            shape = [d if isinstance(d, int) and d >= 0 else 1 for d in arg.shape]
            given[arg.name] = (rng.standard_normal(shape) if dtype.kind == "f" else
                               rng.integers(0, 2, shape)).astype(dtype)
            if not quiet:
                print(f"input {arg.name}: random {dtype} {shape}")
    return given


def _numpy_dtype(type_string: str):
    """'tensor(float)' -> float32, as onnxruntime names element types."""
    import numpy as np

    name = type_string[type_string.find("(") + 1:type_string.rfind(")")]
    return np.dtype({"float": "float32", "double": "float64"}.get(name, name))


def _describe_unresolved(model, ops) -> str:
    """What `info` says of a model some of whose ops have no kernel: the model, and those ops."""
    from collections import Counter

    from opforge.runtime.graph.domains import is_standard_domain

    graph = model.graph
    lines = [f"model: {graph.name or '(unnamed)'}, IR version {model.ir_version}, "
             f"produced by {model.producer_name or 'unknown'}"]
    initializers = {t.name for t in graph.initializer}
    lines += ["inputs:"] + [f"  {v.name}: {_type_text(v.type)}" for v in graph.input if v.name not in initializers]
    lines += ["outputs:"] + [f"  {v.name}: {_type_text(v.type)}" for v in graph.output]
    lines.append("opsets: " + ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import))
    counts = Counter((n.domain or "ai.onnx", n.op_type) for n in graph.node)
    lines.append(f"ops ({len(graph.node)} nodes):")
    lines += [f"  {d}::{op:<28}{n:>6}" for (d, op), n in counts.most_common()]
    custom = sorted(f"{d}::{op} ({n} node{'s' if n > 1 else ''})" for (d, op), n in counts.items()
                    if not is_standard_domain(d))
    lines.append("no kernel for these ops" + (" in the libraries given" if ops else "") + ": "
                 + (", ".join(custom) or "(see the error of `opforge run`)"))
    lines.append("supply them with --ops FOLDER (every .cpp/.cu in it is built) or a built library")
    return "\n".join(lines)


def _type_text(type_proto) -> str:
    import onnx

    if type_proto.HasField("tensor_type"):
        t = type_proto.tensor_type
        elem = onnx.TensorProto.DataType.Name(t.elem_type).lower()
        dims = [d.dim_param or d.dim_value for d in t.shape.dim] if t.HasField("shape") else "?"
        return f"tensor({elem}) {dims}"
    return type_proto.WhichOneof("value") or "?"
