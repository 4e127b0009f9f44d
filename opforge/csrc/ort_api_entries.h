// ort_api_entries.h: the names of onnxruntime's C API table (OrtApi), in table order.
//
// OrtApi is a struct of function pointers that only ever grows at its end, so an entry's
// index is a fact of the ABI. This list runs to API 29; each group is headed by the version
// that added it (from the documented header's "since" notes; the first groups predate them).
// S(name) returns an OrtStatus*, V(name) something else (a value, or nothing: Release*).
// Both directions use it: the adapter reads entries by index, opforge's host fills the table.
#pragma once

#define OPF_ORT_API_ENTRIES(S, V) \
  /* API <= 10 */ \
  V(CreateStatus) V(GetErrorCode) V(GetErrorMessage) S(CreateEnv) S(CreateEnvWithCustomLogger) \
  S(EnableTelemetryEvents) S(DisableTelemetryEvents) S(CreateSession) S(CreateSessionFromArray) S(Run) \
  S(CreateSessionOptions) S(SetOptimizedModelFilePath) S(CloneSessionOptions) S(SetSessionExecutionMode) \
  S(EnableProfiling) S(DisableProfiling) S(EnableMemPattern) S(DisableMemPattern) S(EnableCpuMemArena) \
  S(DisableCpuMemArena) S(SetSessionLogId) S(SetSessionLogVerbosityLevel) S(SetSessionLogSeverityLevel) \
  S(SetSessionGraphOptimizationLevel) S(SetIntraOpNumThreads) S(SetInterOpNumThreads) S(CreateCustomOpDomain) \
  S(CustomOpDomain_Add) S(AddCustomOpDomain) S(RegisterCustomOpsLibrary) S(SessionGetInputCount) \
  S(SessionGetOutputCount) S(SessionGetOverridableInitializerCount) S(SessionGetInputTypeInfo) \
  S(SessionGetOutputTypeInfo) S(SessionGetOverridableInitializerTypeInfo) S(SessionGetInputName) \
  S(SessionGetOutputName) S(SessionGetOverridableInitializerName) S(CreateRunOptions) \
  S(RunOptionsSetRunLogVerbosityLevel) S(RunOptionsSetRunLogSeverityLevel) S(RunOptionsSetRunTag) \
  S(RunOptionsGetRunLogVerbosityLevel) S(RunOptionsGetRunLogSeverityLevel) S(RunOptionsGetRunTag) \
  S(RunOptionsSetTerminate) S(RunOptionsUnsetTerminate) S(CreateTensorAsOrtValue) \
  S(CreateTensorWithDataAsOrtValue) S(IsTensor) S(GetTensorMutableData) S(FillStringTensor) \
  S(GetStringTensorDataLength) S(GetStringTensorContent) S(CastTypeInfoToTensorInfo) \
  S(GetOnnxTypeFromTypeInfo) S(CreateTensorTypeAndShapeInfo) S(SetTensorElementType) S(SetDimensions) \
  S(GetTensorElementType) S(GetDimensionsCount) S(GetDimensions) S(GetSymbolicDimensions) \
  S(GetTensorShapeElementCount) S(GetTensorTypeAndShape) S(GetTypeInfo) S(GetValueType) S(CreateMemoryInfo) \
  S(CreateCpuMemoryInfo) S(CompareMemoryInfo) S(MemoryInfoGetName) S(MemoryInfoGetId) S(MemoryInfoGetMemType) \
  S(MemoryInfoGetType) S(AllocatorAlloc) S(AllocatorFree) S(AllocatorGetInfo) \
  S(GetAllocatorWithDefaultOptions) S(AddFreeDimensionOverride) S(GetValue) S(GetValueCount) S(CreateValue) \
  S(CreateOpaqueValue) S(GetOpaqueValue) S(KernelInfoGetAttribute_float) S(KernelInfoGetAttribute_int64) \
  S(KernelInfoGetAttribute_string) S(KernelContext_GetInputCount) S(KernelContext_GetOutputCount) \
  S(KernelContext_GetInput) S(KernelContext_GetOutput) V(ReleaseEnv) V(ReleaseStatus) V(ReleaseMemoryInfo) \
  V(ReleaseSession) V(ReleaseValue) V(ReleaseRunOptions) V(ReleaseTypeInfo) V(ReleaseTensorTypeAndShapeInfo) \
  V(ReleaseSessionOptions) V(ReleaseCustomOpDomain) S(GetDenotationFromTypeInfo) S(CastTypeInfoToMapTypeInfo) \
  S(CastTypeInfoToSequenceTypeInfo) S(GetMapKeyType) S(GetMapValueType) S(GetSequenceElementType) \
  V(ReleaseMapTypeInfo) V(ReleaseSequenceTypeInfo) S(SessionEndProfiling) S(SessionGetModelMetadata) \
  S(ModelMetadataGetProducerName) S(ModelMetadataGetGraphName) S(ModelMetadataGetDomain) \
  S(ModelMetadataGetDescription) S(ModelMetadataLookupCustomMetadataMap) S(ModelMetadataGetVersion) \
  V(ReleaseModelMetadata) S(CreateEnvWithGlobalThreadPools) S(DisablePerSessionThreads) \
  S(CreateThreadingOptions) V(ReleaseThreadingOptions) S(ModelMetadataGetCustomMetadataMapKeys) \
  S(AddFreeDimensionOverrideByName) S(GetAvailableProviders) S(ReleaseAvailableProviders) \
  S(GetStringTensorElementLength) S(GetStringTensorElement) S(FillStringTensorElement) \
  S(AddSessionConfigEntry) S(CreateAllocator) V(ReleaseAllocator) S(RunWithBinding) S(CreateIoBinding) \
  V(ReleaseIoBinding) S(BindInput) S(BindOutput) S(BindOutputToDevice) S(GetBoundOutputNames) \
  S(GetBoundOutputValues) V(ClearBoundInputs) V(ClearBoundOutputs) S(TensorAt) S(CreateAndRegisterAllocator) \
  S(SetLanguageProjection) S(SessionGetProfilingStartTimeNs) S(SetGlobalIntraOpNumThreads) \
  S(SetGlobalInterOpNumThreads) S(SetGlobalSpinControl) S(AddInitializer) \
  S(CreateEnvWithCustomLoggerAndGlobalThreadPools) S(SessionOptionsAppendExecutionProvider_CUDA) \
  S(SessionOptionsAppendExecutionProvider_ROCM) S(SessionOptionsAppendExecutionProvider_OpenVINO) \
  S(SetGlobalDenormalAsZero) S(CreateArenaCfg) V(ReleaseArenaCfg) S(ModelMetadataGetGraphDescription) \
  S(SessionOptionsAppendExecutionProvider_TensorRT) S(SetCurrentGpuDeviceId) S(GetCurrentGpuDeviceId) \
  S(KernelInfoGetAttributeArray_float) S(KernelInfoGetAttributeArray_int64) S(CreateArenaCfgV2) \
  S(AddRunConfigEntry) S(CreatePrepackedWeightsContainer) V(ReleasePrepackedWeightsContainer) \
  S(CreateSessionWithPrepackedWeightsContainer) S(CreateSessionFromArrayWithPrepackedWeightsContainer) \
  S(SessionOptionsAppendExecutionProvider_TensorRT_V2) S(CreateTensorRTProviderOptions) \
  S(UpdateTensorRTProviderOptions) S(GetTensorRTProviderOptionsAsString) V(ReleaseTensorRTProviderOptions) \
  S(EnableOrtCustomOps) S(RegisterAllocator) S(UnregisterAllocator) S(IsSparseTensor) \
  S(CreateSparseTensorAsOrtValue) S(FillSparseTensorCoo) S(FillSparseTensorCsr) \
  S(FillSparseTensorBlockSparse) S(CreateSparseTensorWithValuesAsOrtValue) S(UseCooIndices) S(UseCsrIndices) \
  S(UseBlockSparseIndices) S(GetSparseTensorFormat) S(GetSparseTensorValuesTypeAndShape) \
  S(GetSparseTensorValues) S(GetSparseTensorIndicesTypeShape) S(GetSparseTensorIndices) S(HasValue) \
  S(KernelContext_GetGPUComputeStream) S(GetTensorMemoryInfo) S(GetExecutionProviderApi) \
  S(SessionOptionsSetCustomCreateThreadFn) S(SessionOptionsSetCustomThreadCreationOptions) \
  S(SessionOptionsSetCustomJoinThreadFn) S(SetGlobalCustomCreateThreadFn) \
  S(SetGlobalCustomThreadCreationOptions) S(SetGlobalCustomJoinThreadFn) S(SynchronizeBoundInputs) \
  S(SynchronizeBoundOutputs) \
  /* API 11 */ \
  S(SessionOptionsAppendExecutionProvider_CUDA_V2) S(CreateCUDAProviderOptions) S(UpdateCUDAProviderOptions) \
  S(GetCUDAProviderOptionsAsString) V(ReleaseCUDAProviderOptions) \
  S(SessionOptionsAppendExecutionProvider_MIGraphX) \
  /* API 12 */ \
  S(AddExternalInitializers) S(CreateOpAttr) V(ReleaseOpAttr) S(CreateOp) S(InvokeOp) V(ReleaseOp) \
  S(SessionOptionsAppendExecutionProvider) S(CopyKernelInfo) V(ReleaseKernelInfo) \
  /* API 13 */ \
  V(GetTrainingApi) S(SessionOptionsAppendExecutionProvider_CANN) S(CreateCANNProviderOptions) \
  S(UpdateCANNProviderOptions) S(GetCANNProviderOptionsAsString) V(ReleaseCANNProviderOptions) \
  /* API 14 */ \
  V(MemoryInfoGetDeviceType) S(UpdateEnvWithCustomLogLevel) S(SetGlobalIntraOpThreadAffinity) \
  S(RegisterCustomOpsLibrary_V2) S(RegisterCustomOpsUsingFunction) S(KernelInfo_GetInputCount) \
  S(KernelInfo_GetOutputCount) S(KernelInfo_GetInputName) S(KernelInfo_GetOutputName) \
  S(KernelInfo_GetInputTypeInfo) S(KernelInfo_GetOutputTypeInfo) S(KernelInfoGetAttribute_tensor) \
  S(HasSessionConfigEntry) S(GetSessionConfigEntry) \
  /* API 15 */ \
  S(SessionOptionsAppendExecutionProvider_Dnnl) S(CreateDnnlProviderOptions) S(UpdateDnnlProviderOptions) \
  S(GetDnnlProviderOptionsAsString) V(ReleaseDnnlProviderOptions) S(KernelInfo_GetNodeName) \
  S(KernelInfo_GetLogger) S(KernelContext_GetLogger) S(Logger_LogMessage) S(Logger_GetLoggingSeverityLevel) \
  S(KernelInfoGetConstantInput_tensor) S(CastTypeInfoToOptionalTypeInfo) S(GetOptionalContainedTypeInfo) \
  S(GetResizedStringTensorElementBuffer) S(KernelContext_GetAllocator) V(GetBuildInfoString) \
  /* API 16 */ \
  S(CreateROCMProviderOptions) S(UpdateROCMProviderOptions) S(GetROCMProviderOptionsAsString) \
  V(ReleaseROCMProviderOptions) S(CreateAndRegisterAllocatorV2) S(RunAsync) \
  S(UpdateTensorRTProviderOptionsWithValue) S(GetTensorRTProviderOptionsByName) \
  S(UpdateCUDAProviderOptionsWithValue) S(GetCUDAProviderOptionsByName) S(KernelContext_GetResource) \
  /* API 17 */ \
  S(SetUserLoggingFunction) S(ShapeInferContext_GetInputCount) S(ShapeInferContext_GetInputTypeShape) \
  S(ShapeInferContext_GetAttribute) S(ShapeInferContext_SetOutputTypeShape) S(SetSymbolicDimensions) \
  S(ReadOpAttr) S(SetDeterministicCompute) S(KernelContext_ParallelFor) \
  S(SessionOptionsAppendExecutionProvider_OpenVINO_V2) \
  /* API 18 */ \
  S(SessionOptionsAppendExecutionProvider_VitisAI) S(KernelContext_GetScratchBuffer) \
  S(KernelInfoGetAllocator) S(AddExternalInitializersFromFilesInMemory) \
  /* API 20 */ \
  S(CreateLoraAdapter) S(CreateLoraAdapterFromArray) V(ReleaseLoraAdapter) S(RunOptionsAddActiveLoraAdapter) \
  S(SetEpDynamicOptions) \
  /* API 22 */ \
  V(ReleaseValueInfo) V(ReleaseNode) V(ReleaseGraph) V(ReleaseModel) S(GetValueInfoName) \
  S(GetValueInfoTypeInfo) V(GetModelEditorApi) S(CreateTensorWithDataAndDeleterAsOrtValue) \
  S(SessionOptionsSetLoadCancellationFlag) V(GetCompileApi) V(CreateKeyValuePairs) V(AddKeyValuePair) \
  V(GetKeyValue) V(GetKeyValuePairs) V(RemoveKeyValuePair) V(ReleaseKeyValuePairs) \
  S(RegisterExecutionProviderLibrary) S(UnregisterExecutionProviderLibrary) S(GetEpDevices) \
  S(SessionOptionsAppendExecutionProvider_V2) S(SessionOptionsSetEpSelectionPolicy) \
  S(SessionOptionsSetEpSelectionPolicyDelegate) V(HardwareDevice_Type) V(HardwareDevice_VendorId) \
  V(HardwareDevice_Vendor) V(HardwareDevice_DeviceId) V(HardwareDevice_Metadata) V(EpDevice_EpName) \
  V(EpDevice_EpVendor) V(EpDevice_EpMetadata) V(EpDevice_EpOptions) V(EpDevice_Device) V(GetEpApi) \
  /* API 23 */ \
  S(GetTensorSizeInBytes) S(AllocatorGetStats) S(CreateMemoryInfo_V2) V(MemoryInfoGetDeviceMemType) \
  V(MemoryInfoGetVendorId) S(ValueInfo_GetValueProducer) S(ValueInfo_GetValueNumConsumers) \
  S(ValueInfo_GetValueConsumers) S(ValueInfo_GetInitializerValue) S(ValueInfo_GetExternalInitializerInfo) \
  S(ValueInfo_IsRequiredGraphInput) S(ValueInfo_IsOptionalGraphInput) S(ValueInfo_IsGraphOutput) \
  S(ValueInfo_IsConstantInitializer) S(ValueInfo_IsFromOuterScope) S(Graph_GetName) S(Graph_GetModelPath) \
  S(Graph_GetOnnxIRVersion) S(Graph_GetNumOperatorSets) S(Graph_GetOperatorSets) S(Graph_GetNumInputs) \
  S(Graph_GetInputs) S(Graph_GetNumOutputs) S(Graph_GetOutputs) S(Graph_GetNumInitializers) \
  S(Graph_GetInitializers) S(Graph_GetNumNodes) S(Graph_GetNodes) S(Graph_GetParentNode) \
  S(Graph_GetGraphView) S(Node_GetId) S(Node_GetName) S(Node_GetOperatorType) S(Node_GetDomain) \
  S(Node_GetSinceVersion) S(Node_GetNumInputs) S(Node_GetInputs) S(Node_GetNumOutputs) S(Node_GetOutputs) \
  S(Node_GetNumImplicitInputs) S(Node_GetImplicitInputs) S(Node_GetNumAttributes) S(Node_GetAttributes) \
  S(Node_GetAttributeByName) S(OpAttr_GetTensorAttributeAsOrtValue) S(OpAttr_GetType) S(OpAttr_GetName) \
  S(Node_GetNumSubgraphs) S(Node_GetSubgraphs) S(Node_GetGraph) S(Node_GetEpName) \
  V(ReleaseExternalInitializerInfo) V(ExternalInitializerInfo_GetFilePath) \
  V(ExternalInitializerInfo_GetFileOffset) V(ExternalInitializerInfo_GetByteSize) V(GetRunConfigEntry) \
  V(EpDevice_MemoryInfo) S(CreateSharedAllocator) S(GetSharedAllocator) S(ReleaseSharedAllocator) \
  S(GetTensorData) S(GetSessionOptionsConfigEntries) S(SessionGetMemoryInfoForInputs) \
  S(SessionGetMemoryInfoForOutputs) S(SessionGetEpDeviceForInputs) S(CreateSyncStreamForEpDevice) \
  V(SyncStream_GetHandle) V(ReleaseSyncStream) S(CopyTensors) S(Graph_GetModelMetadata) \
  S(GetModelCompatibilityForEpDevices) S(CreateExternalInitializerInfo) \
  /* API 24 */ \
  V(TensorTypeAndShape_HasShape) S(KernelInfo_GetConfigEntries) S(KernelInfo_GetOperatorDomain) \
  S(KernelInfo_GetOperatorType) S(KernelInfo_GetOperatorSinceVersion) V(GetInteropApi) \
  S(SessionGetEpDeviceForOutputs) S(GetNumHardwareDevices) S(GetHardwareDevices) \
  S(GetHardwareDeviceEpIncompatibilityDetails) S(DeviceEpIncompatibilityDetails_GetReasonsBitmask) \
  S(DeviceEpIncompatibilityDetails_GetNotes) S(DeviceEpIncompatibilityDetails_GetErrorCode) \
  V(ReleaseDeviceEpIncompatibilityDetails) S(GetCompatibilityInfoFromModel) \
  S(GetCompatibilityInfoFromModelBytes) S(CreateEnvWithOptions) S(Session_GetEpGraphAssignmentInfo) \
  S(EpAssignedSubgraph_GetEpName) S(EpAssignedSubgraph_GetNodes) S(EpAssignedNode_GetName) \
  S(EpAssignedNode_GetDomain) S(EpAssignedNode_GetOperatorType) V(RunOptionsSetSyncStream) \
  S(GetTensorElementTypeAndShapeDataReference) \
  /* API 25 */ \
  S(RunOptionsEnableProfiling) S(RunOptionsDisableProfiling) S(KernelInfoGetAttributeArray_string) \
  S(SetPerSessionThreadPoolCallbacks) \
  /* API 27 */ \
  S(GetMemPatternEnabled) S(GetSessionExecutionMode) S(SessionReleaseCapturedGraph) \
  /* API 28 */ \
  V(GetExperimentalFunction) S(KernelContext_GetSyncStream) \
  /* API 29 */ \
  S(SessionOptionsSetWeightlessSourceModelBuffer)
