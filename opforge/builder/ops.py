"""Python faces of built ops: a callable per op with its schema as help, and the library module."""
import inspect
import types
import weakref

from opforge import tables


def _dtypes(param: dict) -> str:
    return " | ".join(param["dtypes"]) if param["dtypes"] else "any"


def _param_line(param: dict, dtypes: "str | None" = None) -> str:
    flags = [f for f in ("optional", "variadic") if param[f]]
    extra = f" ({', '.join(flags)})" if flags else ""
    doc = f"  {param['doc']}" if param["doc"] else ""
    return f"  {param['name']}: {dtypes or _dtypes(param)}{extra}{doc}"


def inferred_output_dtypes(handle, schema: dict) -> dict:
    """{output index: text} for outputs that declare no dtypes, from the op's infer run on each
    dtype its first input takes ("same as X (float32 | float64)", or the dtypes it gives);
    outputs infer cannot tell about (a required attribute, a refused combination) are left out."""
    from opforge import _core

    inputs = schema["inputs"]
    open_outputs = [k for k, p in enumerate(schema["outputs"]) if not p["dtypes"]]
    if not open_outputs or not inputs or not inputs[0]["dtypes"]:
        return {}
    codes = {name: code for code, name in _core.DTYPE_NAMES.items()}
    try:
        attrs = handle.attrs({})
    except Exception:   # a required attribute: infer cannot run without a value for it
        return {}
    seen: dict = {k: [] for k in open_outputs}
    for dtype in inputs[0]["dtypes"]:
        metas = []
        for param in inputs:
            if param["optional"] or param["variadic"] and param is not inputs[0]:
                metas.append(None)
                continue
            own = dtype if param["dtypes"] == inputs[0]["dtypes"] or not param["dtypes"] else param["dtypes"][0]
            metas.append((codes[own], (1,), None) if own in codes else None)
        try:
            types = handle.infer(metas, attrs, len(schema["outputs"]), False)
        except Exception:
            return {}
        for k in open_outputs:
            if k >= len(types) or types[k] is None:
                return {}
            seen[k].append((dtype, _core.DTYPE_NAMES[types[k][0]]))
    text = {}
    for k, pairs in seen.items():
        outs = list(dict.fromkeys(out for _, out in pairs))
        same = all(inp == out for inp, out in pairs)
        text[k] = f"same as {inputs[0]['name']} ({' | '.join(outs)})" if same and len(outs) > 1 else " | ".join(outs)
    return text


def _attr_line(attr: dict) -> str:
    if attr["has_default"]:
        tail = f" = {attr['default']!r}"
    else:
        tail = " (required)" if attr["required"] else " (optional)"
    doc = f"  {attr['doc']}" if attr["doc"] else ""
    return f"  {attr['name']}: {attr['type']}{tail}{doc}"


def signature_text(schema: dict) -> str:
    """e.g. "leaky_relu(X, *, alpha=0.01) -> Y"."""
    ins = [("*" if p["variadic"] else "") + p["name"] + ("=None" if p["optional"] else "")
           for p in schema["inputs"]]
    attrs = [a["name"] + (f"={a['default']!r}" if a["has_default"] else "=None" if not a["required"] else "")
             for a in schema["attributes"]]
    args = ins + (["*"] + attrs if attrs and not any(p["variadic"] for p in schema["inputs"]) else attrs)
    outs = ", ".join(p["name"] for p in schema["outputs"])
    return f"{schema['name']}({', '.join(args)}) -> {outs}"


def schema_doc(schema: dict, with_signature: bool = True, output_dtypes: "dict | None" = None) -> str:
    """The text help() shows for an op (``with_signature`` false where help() prints the Python
    signature itself; ``output_dtypes``: inferred_output_dtypes)."""
    domain = schema["domain"] or "ai.onnx"
    versions = (f"opsets {schema['since_version']} to {schema['until_version']}" if schema.get("until_version")
                else f"since version {schema['since_version']}")
    lines = ([signature_text(schema), ""] if with_signature else []) + [
        f"domain '{domain}', {versions}, backend {schema['backend']}"]
    if schema["doc"]:
        lines += ["", schema["doc"]]
    lines += ["", "Inputs:"] + [_param_line(p) for p in schema["inputs"]]
    lines += ["Outputs:"] + [_param_line(p, (output_dtypes or {}).get(k)) for k, p in enumerate(schema["outputs"])]
    if schema["attributes"]:
        lines += ["Attributes (keyword arguments):"] + [_attr_line(a) for a in schema["attributes"]]
    return "\n".join(lines)


def op_signature(schema: dict) -> "inspect.Signature | None":
    """The Python signature of an eager call (inputs positional, attributes by keyword), for
    help() and a notebook's completion; None when the names are not Python identifiers."""
    kind = inspect.Parameter
    params = []
    for p in schema["inputs"]:
        if p["variadic"]:
            params.append(kind(p["name"], kind.VAR_POSITIONAL))
        else:
            params.append(kind(p["name"], kind.POSITIONAL_ONLY,
                               default=None if p["optional"] else kind.empty))
    for a in schema["attributes"]:
        default = a["default"] if a["has_default"] else kind.empty if a["required"] else None
        params.append(kind(a["name"], kind.KEYWORD_ONLY, default=default))
    try:
        return inspect.Signature(params)
    except ValueError:   # an identifier-less name, or a required input after an optional one
        return None


class _SchemaDoc:
    """An op's __doc__: its schema as help() shows it, made on first need (it runs the op's
    infer); on the class, the class's own docstring."""

    def __init__(self, class_doc: str):
        self.class_doc = class_doc

    def __get__(self, op, owner=None) -> str:
        if op is None:
            return self.class_doc
        if op._doc is None:
            op._doc = schema_doc(op.schema, op.__signature__ is None, inferred_output_dtypes(op.handle, op.schema))
        return op._doc


class Op:
    """An op of a built library, called eagerly on arrays: op(*inputs, **attributes).

    Inputs are numpy arrays (or anything numpy.asarray / DLPack accepts), passed without a copy
    when contiguous; outputs are new numpy arrays (a tuple when the op has several). A CUDA op
    takes GPU arrays (cupy, or anything with __cuda_array_interface__ or CUDA DLPack) on one
    GPU, gives cupy arrays on that GPU, and launches on cupy's current stream there.

    help(op) shows the op's schema: it reads an op as a function (`__get__` makes pydoc treat
    it as one) with its own name, signature and docstring, not as a class with methods.
    """

    def __init__(self, handle, opset: int = 0, library=None):
        self.opset = opset   # as a node of this opset calls it (0: any version; see OpLibrary.op)
        self._library = None if library is None else weakref.ref(library)   # weak: the library holds its ops
        self.rebind(handle)

    @property
    def library(self):
        """The OpLibrary this op came from (None: made from a bare handle, or that library is gone)."""
        return None if self._library is None else self._library()

    def rebind(self, handle) -> None:
        """Makes this op call `handle` (the same op of a reloaded library) from now on."""
        self.schema = handle.schema()
        self.__name__ = self.__qualname__ = self.schema["name"]
        self.__signature__ = op_signature(self.schema)
        self._doc = None
        self.handle = handle

    def __call__(self, *inputs, **attributes):
        if self.opset:
            return self.handle.call_at(self.opset, inputs, attributes)
        return self.handle(*inputs, **attributes)

    def __get__(self, instance, owner=None):
        return self

    def __repr__(self) -> str:
        return f"<opforge op {signature_text(self.schema)}>"


Op.__doc__ = _SchemaDoc(Op.__doc__)


def make_op(handle, opset: int = 0, library=None) -> Op:
    """The eager face of an op handle (help(op) shows its schema), called as at `opset` (0: any),
    belonging to `library` (an OpLibrary, or None)."""
    return Op(handle, opset, library)


def _table_row(handle) -> list:
    schema = handle.schema()
    attrs = [a["name"] + (f"={a['default']!r}" if a["has_default"] else "") for a in schema["attributes"]]
    return [schema["name"], schema["domain"] or "ai.onnx", schema["since_version"], schema["backend"],
            ", ".join(f"{p['name']}: {_dtypes(p)}" for p in schema["inputs"]),
            ", ".join(p["name"] for p in schema["outputs"]), ", ".join(attrs)]


TABLE_HEADERS = ["op", "domain", "since", "backend", "inputs", "outputs", "attributes"]


class OpTable(list):
    """A library's op handles (what the runtime registers), printed as a table."""

    def __repr__(self) -> str:
        return tables.text_table(TABLE_HEADERS, [_table_row(h) for h in self])

    def _repr_html_(self) -> str:
        return tables.html_table(TABLE_HEADERS, [_table_row(h) for h in self])


class OpLibrary(types.ModuleType):
    """What CustomOpBuilder.load() returns: a module whose attributes are the library's ops.

    `op_table` lists every op handle (all domains and versions) for the runtime to register;
    the library prints as a table of them. A library built from sources can be rebuilt in
    place: reload() and watch() (sessions using it switch to the new kernels at their next run).
    """

    def __init__(self, name: str, path: str, handles: list, watched: tuple = ()):
        import threading

        from opforge.builder.reload import Attachments

        super().__init__(name, f"opforge op library '{name}' ({len(handles)} ops)")
        self.builder = None       # the CustomOpBuilder that reload() builds with (None: not from sources)
        self.generation = 0       # how many reloads changed it
        self.sessions = Attachments()
        self.reload_lock = threading.RLock()
        self._ops: dict = {}
        self._publish(path, handles, watched)

    def _publish(self, path: str, handles: list, watched: tuple) -> None:
        """Makes `handles` this library's ops; existing op objects are rebound to them."""
        newest = {}
        for h in handles:
            if h.name not in newest or h.since_version > newest[h.name].since_version:
                newest[h.name] = h
        for op_name in set(self._ops) - set(newest):
            self.__dict__.pop(op_name, None)
            del self._ops[op_name]
        for op_name, h in newest.items():
            if op_name in self._ops:
                self._ops[op_name].rebind(h)
            else:
                self._ops[op_name] = make_op(h, library=self)
                setattr(self, op_name, self._ops[op_name])
        self.__file__ = path
        self.watched = watched   # the sources and headers it was compiled from
        self.op_names = sorted(newest)
        self.op_table = OpTable(handles)

    def adopt(self, fresh: "OpLibrary") -> None:
        """Takes the ops of `fresh`, a new build of this library (see reload)."""
        self._publish(fresh.__file__, list(fresh.op_table), fresh.watched)
        self.generation += 1

    def reload(self):
        """Rebuilds from the sources as they are now; if the build changed, this library's ops
        (op objects already handed out included) and every session using it run the new
        kernels from their next call or run. Returns a ReloadReport.

        Raises BuildError (the old kernels keep running), ReloadError when a session's graph
        cannot use the new build (naming the node; nothing changes) or when the library was
        not built from sources.
        """
        from opforge.builder.reload import reload_library

        return reload_library(self)

    def watch(self, interval: float = 0.05, on_reload=None, on_error=None):
        """Starts a Watcher: a thread that reloads this library whenever one of its sources or
        the headers they include changes (polled every `interval` seconds). A failed reload is
        printed to stderr and passed to `on_error`; a done one to `on_reload`. Returns the
        Watcher (stop() it, or use it in a with block)."""
        from opforge.builder.reload import Watcher

        return Watcher(self, interval, on_reload, on_error)

    def onnxruntime_library(self, path=None) -> str:
        """Builds (once, cached) this library as an onnxruntime custom-op library: the same
        objects plus opforge's adapter, exporting RegisterCustomOps. Returns its path, or
        `path` when given (the library is copied there). Then, in plain onnxruntime:
        ``so = onnxruntime.SessionOptions(); so.register_custom_ops_library(path)``.

        Raises ValueError for a library loaded from a built file (no sources to build from),
        BuildError when compiling or linking fails.
        """
        from opforge.interop import onnxruntime_library

        return onnxruntime_library(self, path)

    def op(self, name: str, domain: "str | None" = None, version: "int | None" = None) -> Op:
        """The op `name` as of opset `version` (the newest since-version not above it), called
        as a node of that opset is: attributes and dtypes added later are refused.

        Raises AttributeError when the library has no such op (for that domain and version).
        """
        found = [h for h in self.op_table if h.name == name and (domain is None or h.domain == domain)
                 and (version is None or h.since_version <= version <= (h.until_version or version))]
        if not found:
            raise AttributeError(f"library '{self.__name__}' has no op {name!r}"
                                 + (f" in domain {domain!r}" if domain is not None else "")
                                 + (f" for opset {version}" if version is not None else ""))
        return make_op(max(found, key=lambda h: h.since_version), version or 0, self)

    def _title(self) -> str:
        return f"opforge library '{self.__name__}' ({len(self.op_table)} ops) from {self.__file__}"

    def __repr__(self) -> str:
        return tables.text_table(TABLE_HEADERS, [_table_row(h) for h in self.op_table], self._title())

    def _repr_html_(self) -> str:
        return tables.html_table(TABLE_HEADERS, [_table_row(h) for h in self.op_table], self._title())
