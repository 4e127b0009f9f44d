"""One GPU as a session sees it: its stream, its memory pool, and copies to and from the host."""
import contextlib

from opforge.runtime.providers.registry import CUDA


class CudaDevice:
    """The GPU `device_id` with a stream (`user_compute_stream`, else a new non-blocking one)
    and a cupy memory pool of its own (capped at `gpu_mem_limit` bytes when given)."""

    provider = CUDA

    def __init__(self, options: dict):
        import cupy

        self.xp = cupy
        self.id = int(options.get("device_id", 0))
        self.name = f"cuda:{self.id}"
        with cupy.cuda.Device(self.id):
            given = options.get("user_compute_stream")
            self.stream = (external_stream(cupy, int(given), self.id) if given
                           else cupy.cuda.Stream(non_blocking=True))
            self.pool = cupy.cuda.MemoryPool()
            limit = options.get("gpu_mem_limit")
            if limit:
                self.pool.set_limit(size=int(limit))   # cupy's limit is the current device's

    @property
    def stream_ptr(self) -> int:
        """The cudaStream_t custom CUDA ops launch on."""
        return self.stream.ptr

    @contextlib.contextmanager
    def run(self, synchronize: bool = True):
        """One run of the session. Its stream first waits for the work queued so far on the
        caller's current stream, which may still be writing the feeds. At the end the host
        waits for the session's stream, as onnxruntime does at the end of Run, so outputs left
        on the GPU can be read on any stream; with `synchronize` False the caller's stream
        waits for it instead (no host wait), and other streams need synchronize()."""
        cp = self.xp
        with cp.cuda.Device(self.id):
            caller = cp.cuda.get_current_stream()
            if caller != self.stream:
                self.stream.wait_event(caller.record())
        yield self
        if synchronize:
            self.stream.synchronize()
        elif caller != self.stream:
            with cp.cuda.Device(self.id):
                caller.wait_event(self.stream.record())

    def synchronize(self) -> None:
        """The host waits for all work queued on this GPU, on any stream."""
        self.xp.cuda.Device(self.id).synchronize()

    @contextlib.contextmanager
    def active(self):
        """Makes this GPU, its stream and its memory pool cupy's current ones."""
        cp = self.xp
        with cp.cuda.Device(self.id), self.stream, cp.cuda.using_allocator(self.pool.malloc):
            yield self

    def upload(self, value):
        """A host value (numpy) as a GPU array; None and non-arrays pass through."""
        if value is None or not hasattr(value, "dtype"):
            return value
        with self.active():
            return self.xp.asarray(value)

    def download(self, value):
        """A GPU array as a numpy array (waits for the stream); other values pass through."""
        if not isinstance(value, self.xp.ndarray):
            return value
        with self.active():
            return self.xp.asnumpy(value, stream=self.stream)


class _StreamHandle:
    """A cudaStream_t given as an int, offered through the CUDA stream protocol."""

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def external_stream(cupy, ptr: int, device_id: int):
    """The caller's stream (`user_compute_stream`, a cudaStream_t as an int) as a cupy stream:
    Stream.from_external on cupy 14 (which deprecates ExternalStream), ExternalStream before."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is None:
        return cupy.cuda.ExternalStream(ptr, device_id)
    return from_external(_StreamHandle(ptr))
