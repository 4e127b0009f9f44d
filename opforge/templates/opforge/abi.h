/// opforge/abi.h: the versioned C ABI between an op library and its host.
///
/// Every library built by opforge exports one symbol, `opforge_library`, returning a table of op
/// descriptors. Only C types cross this boundary, so a host (Python, or a C++ executor) can call
/// kernels without knowing how they were written. Users normally include <opforge/op.h> instead,
/// which fills these structs from a C++ definition.
#ifndef OPFORGE_ABI_H_
#define OPFORGE_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Bumped on any incompatible change to the structs below; the host refuses other versions.
#define OPFORGE_ABI_VERSION 3

/// Most dimensions a tensor may have.
#define OPF_MAX_DIMS 16

/// Element types, numbered as ONNX's TensorProto.DataType.
typedef enum opf_dtype {
  OPF_UNDEFINED = 0,
  OPF_FLOAT32 = 1,
  OPF_UINT8 = 2,
  OPF_INT8 = 3,
  OPF_UINT16 = 4,
  OPF_INT16 = 5,
  OPF_INT32 = 6,
  OPF_INT64 = 7,
  OPF_STRING = 8,
  OPF_BOOL = 9,
  OPF_FLOAT16 = 10,
  OPF_FLOAT64 = 11,
  OPF_UINT32 = 12,
  OPF_UINT64 = 13,
  OPF_BFLOAT16 = 16,
  /// The narrow types below are held one element per byte (the value in the low bits), as
  /// numpy's ml_dtypes holds them; ONNX packs 4- and 2-bit types only when serializing.
  OPF_FLOAT8E4M3FN = 17,
  OPF_FLOAT8E4M3FNUZ = 18,
  OPF_FLOAT8E5M2 = 19,
  OPF_FLOAT8E5M2FNUZ = 20,
  OPF_UINT4 = 21,
  OPF_INT4 = 22,
  OPF_FLOAT4E2M1 = 23,
  OPF_FLOAT8E8M0 = 24,
  OPF_UINT2 = 25,
  OPF_INT2 = 26
} opf_dtype;

/// Attribute kinds, numbered as ONNX's AttributeProto.AttributeType.
typedef enum opf_attr_type {
  OPF_ATTR_UNDEFINED = 0,
  OPF_ATTR_FLOAT = 1,
  OPF_ATTR_INT = 2,
  OPF_ATTR_STRING = 3,
  OPF_ATTR_TENSOR = 4,
  OPF_ATTR_GRAPH = 5,  ///< passed as the serialized GraphProto bytes in `s`
  OPF_ATTR_FLOATS = 6,
  OPF_ATTR_INTS = 7,
  OPF_ATTR_STRINGS = 8,
  OPF_ATTR_TENSORS = 9,
  OPF_ATTR_GRAPHS = 10, ///< passed as serialized GraphProto bytes in `strings`
  OPF_ATTR_SPARSE_TENSOR = 11, ///< passed as the serialized SparseTensorProto bytes in `s`
  OPF_ATTR_TYPE_PROTO = 13 ///< passed as the serialized TypeProto bytes in `s`
} opf_attr_type;

/// Where tensor memory lives, numbered as DLPack's DLDeviceType.
typedef enum opf_device_type { OPF_CPU = 1, OPF_CUDA = 2 } opf_device_type;

/// The backend an op's compute runs on.
typedef enum opf_backend { OPF_BACKEND_CPU = 0, OPF_BACKEND_CUDA = 1 } opf_backend;

/// A non-owning view of a tensor. During shape inference `data` may be NULL (value unknown) and
/// dims may be -1 (unknown size); during compute every field is concrete.
typedef struct opf_tensor {
  void* data;
  int32_t dtype;          ///< an opf_dtype
  int32_t ndim;
  int64_t shape[OPF_MAX_DIMS];
  int64_t strides[OPF_MAX_DIMS]; ///< in elements, as DLPack
  int32_t device_type;    ///< an opf_device_type
  int32_t device_id;
} opf_tensor;

/// One attribute value. Which fields are meaningful depends on `type`.
typedef struct opf_attr {
  const char* name;
  int32_t type;           ///< an opf_attr_type; OPF_ATTR_UNDEFINED means "absent"
  int64_t i;
  float f;
  const char* s;          ///< STRING / GRAPH / SPARSE_TENSOR / TYPE_PROTO bytes
  int64_t s_len;
  int64_t count;          ///< elements in ints / floats / strings / tensors
  const int64_t* ints;
  const float* floats;
  const char* const* strings;
  const int64_t* string_lens;
  const opf_tensor* tensors; ///< TENSOR: one; TENSORS: `count`
} opf_attr;

/// Flags of an input or output.
enum { OPF_PARAM_OPTIONAL = 1, OPF_PARAM_VARIADIC = 2 };

/// One declared input or output.
typedef struct opf_param {
  const char* name;
  const int32_t* dtypes;  ///< allowed opf_dtype values
  int32_t num_dtypes;     ///< 0: any type
  int32_t flags;          ///< OPF_PARAM_* bits
  const char* doc;
  const int32_t* dtype_since; ///< per dtype, the first opset it is allowed in (0: every); may be NULL
} opf_param;

/// One declared attribute. `default_value.type == OPF_ATTR_UNDEFINED` means no default.
typedef struct opf_attr_def {
  const char* name;
  int32_t type;           ///< an opf_attr_type
  int32_t required;
  opf_attr default_value;
  const char* doc;
  int32_t since_version;  ///< the first opset a node may give it in (0: every version of the op)
  int32_t until_version;  ///< the last one (0: no end)
} opf_attr_def;

/// Why a function failed (opf_error::code).
enum {
  OPF_ERR_FAILED = 0,       ///< the op refused the call or failed
  OPF_ERR_NEEDS_VALUE = 1   ///< infer cannot tell the outputs without an input's value (not a refusal)
};

/// Where an op writes its error; a function that fails returns non-zero.
typedef struct opf_error {
  int32_t code;           ///< an OPF_ERR_* value
  char message[2048];
} opf_error;

/// The host's thread pool: runs fn(arg, begin, end) over [0, n) in chunks of at least `grain`.
typedef void (*opf_range_fn)(void* arg, int64_t begin, int64_t end);
typedef void (*opf_parallel_for_fn)(void* pool, int64_t n, int64_t grain, opf_range_fn fn,
                                    void* arg);

struct opf_op_def;

/// What an op builds from a node's attributes on its first call and keeps for the node's life
/// (a tree ensemble's nodes laid out for walking, say), so later calls skip that work. The op
/// allocates it with this header first; the host calls `release` when the node goes away.
typedef struct opf_state {
  void (*release)(struct opf_state* self);
} opf_state;

/// What infer and workspace see: input metadata (data present when known) and attributes in
/// declaration order, defaults filled. Infer writes dtype, ndim and shape of each output.
typedef struct opf_infer_ctx {
  const struct opf_op_def* op;
  const opf_tensor* inputs;   ///< an absent optional input has dtype OPF_UNDEFINED
  int32_t num_inputs;
  const opf_attr* attrs;      ///< one per declared attribute, in declaration order
  int32_t num_attrs;
  opf_tensor* outputs;        ///< filled by infer
  int32_t num_outputs;
} opf_infer_ctx;

/// What compute sees: concrete inputs and preallocated outputs, attributes, scratch space,
/// the stream (CUDA) and the host's thread pool.
typedef struct opf_compute_ctx {
  const struct opf_op_def* op;
  const opf_tensor* inputs;
  int32_t num_inputs;
  const opf_attr* attrs;
  int32_t num_attrs;
  const opf_tensor* outputs;
  int32_t num_outputs;
  void* workspace;
  int64_t workspace_bytes;
  void* stream;               ///< cudaStream_t for CUDA ops, NULL on the CPU
  void* pool;
  opf_parallel_for_fn parallel_for; ///< NULL: run serially
  int32_t num_threads;
  opf_state** state;          ///< the node's state slot (NULL until set); NULL: no slot, build per call
} opf_compute_ctx;

/// One operator: schema and the three entry points, for the opset versions since_version to
/// until_version of its domain (a library defines an op once per range; ranges may not overlap).
typedef struct opf_op_def {
  uint32_t struct_size;       ///< sizeof(opf_op_def) of the library that built it
  const char* name;
  const char* domain;         ///< "" is the default ONNX domain
  int32_t since_version;
  int32_t backend;            ///< an opf_backend
  const char* doc;
  const opf_param* inputs;
  int32_t num_inputs;
  const opf_param* outputs;
  int32_t num_outputs;
  const opf_attr_def* attrs;
  int32_t num_attrs;
  const int32_t* inplace;     ///< per output: the input it may overwrite, or -1; may be NULL
  int32_t accepts_strided;    ///< 0: the host passes contiguous inputs only
  int32_t (*infer)(const opf_infer_ctx* ctx, opf_error* err);
  int32_t (*workspace)(const opf_infer_ctx* ctx, int64_t* bytes, opf_error* err); ///< may be NULL
  int32_t (*compute)(const opf_compute_ctx* ctx, opf_error* err);
  void* user_data;            ///< private to the library
  int32_t until_version;      ///< the last opset this definition serves (0: every later one)
  const char* source;         ///< where it is defined ("ops/scale.cpp:12"), for messages
} opf_op_def;

/// The table a library exports.
typedef struct opf_library {
  uint32_t abi_version;       ///< OPFORGE_ABI_VERSION of the headers it was built with
  int32_t num_ops;
  const opf_op_def* const* ops;
  const char* error;          ///< non-NULL if building the table failed (a bad definition)
} opf_library;

/// The one symbol every op library exports.
typedef const opf_library* (*opf_library_fn)(void);
#define OPFORGE_LIBRARY_SYMBOL "opforge_library"

#ifdef __cplusplus
}
#endif

#endif  // OPFORGE_ABI_H_
