// kernel.cpp: a node's kernel: inputs and outputs through onnxruntime's kernel context, the op
// called through opforge_core::call_op with onnxruntime as its host.
#include "kernel.h"

#include <algorithm>
#include <thread>

#include "opforge/dtype.h"

namespace opforge_ort {

namespace {

/// A call's view of onnxruntime's intra-op threads, for opf_compute_ctx::parallel_for.
struct Threads {
  const Runtime* rt;
  const OrtKernelContext* ctx;
};

struct Chunks {
  opf_range_fn fn;
  void* arg;
  int64_t n, chunk;
};

void run_chunk(void* data, size_t index) {
  const Chunks& c = *static_cast<const Chunks*>(data);
  const int64_t begin = int64_t(index) * c.chunk;
  c.fn(c.arg, begin, std::min(c.n, begin + c.chunk));
}

/// The machine's threads, asked once: glibc reads them from sysfs on every question.
int32_t hardware_threads() {
  static const int32_t n = std::max(1, int32_t(std::thread::hardware_concurrency()));
  return n;
}

/// opf_parallel_for_fn on onnxruntime's pool: chunks of at least `grain`, a few per thread.
void parallel_for(void* pool, int64_t n, int64_t grain, opf_range_fn fn, void* arg) {
  const Threads& t = *static_cast<const Threads*>(pool);
  const int64_t pieces = int64_t(hardware_threads()) * 4;
  const int64_t chunk = std::max<int64_t>({grain, 1, (n + pieces - 1) / pieces});
  Chunks c{fn, arg, n, chunk};
  OrtStatus* st = t.rt->KernelContext_ParallelFor(t.ctx, &run_chunk, size_t((n + chunk - 1) / chunk), 0, &c);
  if (st != nullptr) {  // the pool refused the job: run it here
    t.rt->ReleaseStatus(st);
    fn(arg, 0, n);
  }
}

}  // namespace

/// opforge_core::call_op's host in onnxruntime: outputs from KernelContext_GetOutput once infer
/// gave their shapes, workspace (and outputs the node leaves out) from the kernel's allocator.
class OrtHost {
 public:
  OrtHost(Kernel& k, OrtKernelContext* ctx, size_t node_outputs) : k_(k), ctx_(ctx), node_outputs_(node_outputs) {}
  OrtHost(const OrtHost&) = delete;
  OrtHost& operator=(const OrtHost&) = delete;
  ~OrtHost() {
    for (void* p : scratch_) alloc_->Free(alloc_, p);
    if (owned_) k_.rt.ReleaseAllocator(alloc_);
  }

  void place_output(int32_t k, opf_tensor& t, bool read) {
    OrtValue* value = nullptr;
    if (size_t(k) < node_outputs_)
      k_.rt.check(k_.rt.KernelContext_GetOutput(ctx_, size_t(k), t.shape, size_t(t.ndim), &value),
                  "allocating an output");
    if (value == nullptr) {  // an output the node leaves out, which the op writes all the same
      opforge_core::set_contiguous(t);
      t.data = workspace(std::max<int64_t>(opforge_core::nbytes(t), 1));
      device(t);
      return;
    }
    const opf_tensor got = k_.view_of(value, false);
    if (got.dtype != t.dtype)
      throw opforge_core::CallError(std::string(k_.def->name) + ": onnxruntime typed output #" + std::to_string(k) +
                                        " " + opforge::dtype_name(got.dtype) + ", infer gives " +
                                        opforge::dtype_name(t.dtype) + (read ? "" : " (an output nobody reads)") +
                                        "; give the model's output that type",
                                    false);
    t = got;
  }

  void* workspace(int64_t bytes) {
    if (alloc_ == nullptr) {
      alloc_ = k_.allocator(ctx_);
      owned_ = alloc_ != k_.allocator_;
    }
    void* p = alloc_->Alloc(alloc_, size_t(bytes));
    if (p == nullptr)
      throw opforge_core::CallError(std::string(k_.def->name) + ": onnxruntime could not allocate " +
                                        std::to_string(bytes) + " bytes of workspace",
                                    false, true);
    scratch_.push_back(p);
    return p;
  }

  template <class F>
  void enter_compute(F&& compute) {
    compute();
  }

 private:
  void device(opf_tensor& t) const {
    if (!k_.cuda) return;
    t.device_type = OPF_CUDA;
  }

  Kernel& k_;
  OrtKernelContext* ctx_;
  size_t node_outputs_;
  OrtAllocator* alloc_ = nullptr;
  bool owned_ = false;  ///< alloc_ is the call's, released with the host
  std::vector<void*> scratch_;
};

Kernel::Kernel(const Runtime& runtime, const opf_op_def* op, bool on_cuda, const OrtKernelInfo* info)
    : rt(runtime), def(op), cuda(on_cuda), attrs_(op) {
  attrs_.read(rt, info);
  size_t count = 0;
  rt.check(rt.KernelInfo_GetOutputCount(info, &count), "reading the node's outputs");
  for (size_t k = 0; k < count; ++k) {
    size_t size = 0;  // the name's bytes with its NUL: 1 for an output the node leaves out
    rt.check(rt.KernelInfo_GetOutputName(info, k, nullptr, &size), "reading the node's outputs");
    need_.push_back(size <= 1 ? opforge_core::Need::None : opforge_core::Need::Required);
  }
  if (rt.KernelInfoGetAllocator) {
    rt.check(rt.KernelInfoGetAllocator(info, OrtMemTypeDefault, &allocator_), "asking for the kernel's allocator");
  } else {
    rt.check(cuda ? rt.CreateMemoryInfo("Cuda", OrtDeviceAllocator, 0, OrtMemTypeDefault, &memory_)
                  : rt.CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &memory_),
             "describing the kernel's memory");
  }
}

Kernel::~Kernel() {
  if (allocator_ != nullptr) rt.ReleaseAllocator(allocator_);
  if (memory_ != nullptr) rt.ReleaseMemoryInfo(memory_);
}

OrtAllocator* Kernel::allocator(OrtKernelContext* ctx) {
  if (allocator_ != nullptr) return allocator_;
  OrtAllocator* a = nullptr;
  rt.check(rt.KernelContext_GetAllocator(ctx, memory_, &a), "asking for the call's allocator");
  return a;  // the caller's to release
}

opf_tensor Kernel::view_of(const OrtValue* value, bool input) const {
  opf_tensor t{};
  size_t rank = 0;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  const int64_t* dims = nullptr;
  if (rt.GetTensorElementTypeAndShapeDataReference) {  // API 24: no allocation
    rt.check(rt.GetTensorElementTypeAndShapeDataReference(value, &t.dtype, &dims, &rank), "reading a tensor");
  } else {
    rt.check(rt.GetTensorTypeAndShape(value, &info), "reading a tensor");
    OrtStatus* st = rt.GetTensorElementType(info, &t.dtype);
    if (st == nullptr) st = rt.GetDimensionsCount(info, &rank);
    if (st == nullptr && rank <= OPF_MAX_DIMS) st = rt.GetDimensions(info, t.shape, rank);
    rt.ReleaseTensorTypeAndShapeInfo(info);
    rt.check(st, "reading a tensor");
  }
  if (rank > OPF_MAX_DIMS)
    throw opforge_core::CallError(std::string(def->name) + "(): " + (input ? "an input" : "an output") + " has rank " +
                                      std::to_string(rank) + "; opforge's limit is " + std::to_string(OPF_MAX_DIMS),
                                  input);
  t.ndim = int32_t(rank);
  if (dims != nullptr) std::copy(dims, dims + rank, t.shape);
  rt.check(rt.GetTensorMutableData(const_cast<OrtValue*>(value), &t.data), "reading a tensor's data");
  opforge_core::set_contiguous(t);
  if (cuda) {
    const OrtMemoryInfo* mem = nullptr;
    int id = 0;
    rt.check(rt.GetTensorMemoryInfo(value, &mem), "reading a tensor's device");
    rt.check(rt.MemoryInfoGetId(mem, &id), "reading a tensor's device");
    t.device_type = OPF_CUDA;
    t.device_id = id;
  }
  return t;
}

void Kernel::read_inputs(OrtKernelContext* ctx, std::vector<opf_tensor>& ins) const {
  size_t n = 0;
  rt.check(rt.KernelContext_GetInputCount(ctx, &n), "counting inputs");
  ins.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const OrtValue* value = nullptr;
    rt.check(rt.KernelContext_GetInput(ctx, i, &value), "reading an input");
    if (value == nullptr) {
      ins[i] = opf_tensor{};  // an optional input the node leaves out
    } else {
      ins[i] = view_of(value, true);
    }
  }
}

OrtStatus* Kernel::compute(OrtKernelContext* ctx) {
  try {
    std::vector<opf_tensor> ins;
    read_inputs(ctx, ins);
    size_t node_outputs = 0;
    rt.check(rt.KernelContext_GetOutputCount(ctx, &node_outputs), "counting outputs");
    std::vector<opforge_core::Need> need(node_outputs, opforge_core::Need::Required);
    std::copy_n(need_.begin(), std::min(need_.size(), node_outputs), need.begin());
    std::vector<opf_tensor> outs(node_outputs);
    Threads threads{&rt, ctx};
    opforge_core::CallOptions options;
    if (rt.KernelContext_ParallelFor && !cuda) {
      options.parallel_for = &parallel_for;
      options.parallel_arg = &threads;
      options.num_threads = hardware_threads();
    }
    if (cuda) rt.check(rt.KernelContext_GetGPUComputeStream(ctx, &options.stream), "asking for the CUDA stream");
    OrtHost host(*this, ctx, node_outputs);
    opforge_core::call_op(def, ins.data(), int32_t(ins.size()), attrs_.view(), outs.data(), int32_t(outs.size()),
                          need.data(), host, options);
    return nullptr;
  } catch (const opforge_core::CallError& e) {
    return rt.status(e.what(), e.bad_argument ? ORT_INVALID_ARGUMENT : ORT_FAIL);
  } catch (const std::exception& e) {
    return rt.status(std::string(def->name) + ": " + e.what());
  }
}

}  // namespace opforge_ort
