// ort_api_entries.h: the names of onnxruntime's C API table (OrtApi), in table order.
//
// OrtApi is a struct of function pointers that only ever grows at its end, so an entry's
// index is a fact of the ABI. This list runs to API 29; each group is headed by the version
// that added it (from the documented header's "since" notes; the first groups predate them).
// Both directions use it: the adapter reads entries by index, opforge's host fills the table.
#pragma once

#define OPF_ORT_API_ENTRIES(X) \
  /* API <= 10 */ \
  X(CreateStatus) X(GetErrorCode) X(GetErrorMessage) X(CreateEnv) X(CreateEnvWithCustomLogger) \
  X(EnableTelemetryEvents) X(DisableTelemetryEvents) X(CreateSession) X(CreateSessionFromArray) X(Run) \
  X(CreateSessionOptions) X(SetOptimizedModelFilePath) X(CloneSessionOptions) X(SetSessionExecutionMode) \
  X(EnableProfiling) X(DisableProfiling) X(EnableMemPattern) X(DisableMemPattern) X(EnableCpuMemArena) \
  X(DisableCpuMemArena) X(SetSessionLogId) X(SetSessionLogVerbosityLevel) X(SetSessionLogSeverityLevel) \
  X(SetSessionGraphOptimizationLevel) X(SetIntraOpNumThreads) X(SetInterOpNumThreads) X(CreateCustomOpDomain) \
  X(CustomOpDomain_Add) X(AddCustomOpDomain) X(RegisterCustomOpsLibrary) X(SessionGetInputCount) \
  X(SessionGetOutputCount) X(SessionGetOverridableInitializerCount) X(SessionGetInputTypeInfo) \
  X(SessionGetOutputTypeInfo) X(SessionGetOverridableInitializerTypeInfo) X(SessionGetInputName) \
  X(SessionGetOutputName) X(SessionGetOverridableInitializerName) X(CreateRunOptions) \
  X(RunOptionsSetRunLogVerbosityLevel) X(RunOptionsSetRunLogSeverityLevel) X(RunOptionsSetRunTag) \
  X(RunOptionsGetRunLogVerbosityLevel) X(RunOptionsGetRunLogSeverityLevel) X(RunOptionsGetRunTag) \
  X(RunOptionsSetTerminate) X(RunOptionsUnsetTerminate) X(CreateTensorAsOrtValue) \
  X(CreateTensorWithDataAsOrtValue) X(IsTensor) X(GetTensorMutableData) X(FillStringTensor) \
  X(GetStringTensorDataLength) X(GetStringTensorContent) X(CastTypeInfoToTensorInfo) \
  X(GetOnnxTypeFromTypeInfo) X(CreateTensorTypeAndShapeInfo) X(SetTensorElementType) X(SetDimensions) \
  X(GetTensorElementType) X(GetDimensionsCount) X(GetDimensions) X(GetSymbolicDimensions) \
  X(GetTensorShapeElementCount) X(GetTensorTypeAndShape) X(GetTypeInfo) X(GetValueType) X(CreateMemoryInfo) \
  X(CreateCpuMemoryInfo) X(CompareMemoryInfo) X(MemoryInfoGetName) X(MemoryInfoGetId) X(MemoryInfoGetMemType) \
  X(MemoryInfoGetType) X(AllocatorAlloc) X(AllocatorFree) X(AllocatorGetInfo) \
  X(GetAllocatorWithDefaultOptions) X(AddFreeDimensionOverride) X(GetValue) X(GetValueCount) X(CreateValue) \
  X(CreateOpaqueValue) X(GetOpaqueValue) X(KernelInfoGetAttribute_float) X(KernelInfoGetAttribute_int64) \
  X(KernelInfoGetAttribute_string) X(KernelContext_GetInputCount) X(KernelContext_GetOutputCount) \
  X(KernelContext_GetInput) X(KernelContext_GetOutput) X(ReleaseEnv) X(ReleaseStatus) X(ReleaseMemoryInfo) \
  X(ReleaseSession) X(ReleaseValue) X(ReleaseRunOptions) X(ReleaseTypeInfo) X(ReleaseTensorTypeAndShapeInfo) \
  X(ReleaseSessionOptions) X(ReleaseCustomOpDomain) X(GetDenotationFromTypeInfo) X(CastTypeInfoToMapTypeInfo) \
  X(CastTypeInfoToSequenceTypeInfo) X(GetMapKeyType) X(GetMapValueType) X(GetSequenceElementType) \
  X(ReleaseMapTypeInfo) X(ReleaseSequenceTypeInfo) X(SessionEndProfiling) X(SessionGetModelMetadata) \
  X(ModelMetadataGetProducerName) X(ModelMetadataGetGraphName) X(ModelMetadataGetDomain) \
  X(ModelMetadataGetDescription) X(ModelMetadataLookupCustomMetadataMap) X(ModelMetadataGetVersion) \
  X(ReleaseModelMetadata) X(CreateEnvWithGlobalThreadPools) X(DisablePerSessionThreads) \
  X(CreateThreadingOptions) X(ReleaseThreadingOptions) X(ModelMetadataGetCustomMetadataMapKeys) \
  X(AddFreeDimensionOverrideByName) X(GetAvailableProviders) X(ReleaseAvailableProviders) \
  X(GetStringTensorElementLength) X(GetStringTensorElement) X(FillStringTensorElement) \
  X(AddSessionConfigEntry) X(CreateAllocator) X(ReleaseAllocator) X(RunWithBinding) X(CreateIoBinding) \
  X(ReleaseIoBinding) X(BindInput) X(BindOutput) X(BindOutputToDevice) X(GetBoundOutputNames) \
  X(GetBoundOutputValues) X(ClearBoundInputs) X(ClearBoundOutputs) X(TensorAt) X(CreateAndRegisterAllocator) \
  X(SetLanguageProjection) X(SessionGetProfilingStartTimeNs) X(SetGlobalIntraOpNumThreads) \
  X(SetGlobalInterOpNumThreads) X(SetGlobalSpinControl) X(AddInitializer) \
  X(CreateEnvWithCustomLoggerAndGlobalThreadPools) X(SessionOptionsAppendExecutionProvider_CUDA) \
  X(SessionOptionsAppendExecutionProvider_ROCM) X(SessionOptionsAppendExecutionProvider_OpenVINO) \
  X(SetGlobalDenormalAsZero) X(CreateArenaCfg) X(ReleaseArenaCfg) X(ModelMetadataGetGraphDescription) \
  X(SessionOptionsAppendExecutionProvider_TensorRT) X(SetCurrentGpuDeviceId) X(GetCurrentGpuDeviceId) \
  X(KernelInfoGetAttributeArray_float) X(KernelInfoGetAttributeArray_int64) X(CreateArenaCfgV2) \
  X(AddRunConfigEntry) X(CreatePrepackedWeightsContainer) X(ReleasePrepackedWeightsContainer) \
  X(CreateSessionWithPrepackedWeightsContainer) X(CreateSessionFromArrayWithPrepackedWeightsContainer) \
  X(SessionOptionsAppendExecutionProvider_TensorRT_V2) X(CreateTensorRTProviderOptions) \
  X(UpdateTensorRTProviderOptions) X(GetTensorRTProviderOptionsAsString) X(ReleaseTensorRTProviderOptions) \
  X(EnableOrtCustomOps) X(RegisterAllocator) X(UnregisterAllocator) X(IsSparseTensor) \
  X(CreateSparseTensorAsOrtValue) X(FillSparseTensorCoo) X(FillSparseTensorCsr) \
  X(FillSparseTensorBlockSparse) X(CreateSparseTensorWithValuesAsOrtValue) X(UseCooIndices) X(UseCsrIndices) \
  X(UseBlockSparseIndices) X(GetSparseTensorFormat) X(GetSparseTensorValuesTypeAndShape) \
  X(GetSparseTensorValues) X(GetSparseTensorIndicesTypeShape) X(GetSparseTensorIndices) X(HasValue) \
  X(KernelContext_GetGPUComputeStream) X(GetTensorMemoryInfo) X(GetExecutionProviderApi) \
  X(SessionOptionsSetCustomCreateThreadFn) X(SessionOptionsSetCustomThreadCreationOptions) \
  X(SessionOptionsSetCustomJoinThreadFn) X(SetGlobalCustomCreateThreadFn) \
  X(SetGlobalCustomThreadCreationOptions) X(SetGlobalCustomJoinThreadFn) X(SynchronizeBoundInputs) \
  X(SynchronizeBoundOutputs) \
  /* API 11 */ \
  X(SessionOptionsAppendExecutionProvider_CUDA_V2) X(CreateCUDAProviderOptions) X(UpdateCUDAProviderOptions) \
  X(GetCUDAProviderOptionsAsString) X(ReleaseCUDAProviderOptions) \
  X(SessionOptionsAppendExecutionProvider_MIGraphX) \
  /* API 12 */ \
  X(AddExternalInitializers) X(CreateOpAttr) X(ReleaseOpAttr) X(CreateOp) X(InvokeOp) X(ReleaseOp) \
  X(SessionOptionsAppendExecutionProvider) X(CopyKernelInfo) X(ReleaseKernelInfo) \
  /* API 13 */ \
  X(GetTrainingApi) X(SessionOptionsAppendExecutionProvider_CANN) X(CreateCANNProviderOptions) \
  X(UpdateCANNProviderOptions) X(GetCANNProviderOptionsAsString) X(ReleaseCANNProviderOptions) \
  /* API 14 */ \
  X(MemoryInfoGetDeviceType) X(UpdateEnvWithCustomLogLevel) X(SetGlobalIntraOpThreadAffinity) \
  X(RegisterCustomOpsLibrary_V2) X(RegisterCustomOpsUsingFunction) X(KernelInfo_GetInputCount) \
  X(KernelInfo_GetOutputCount) X(KernelInfo_GetInputName) X(KernelInfo_GetOutputName) \
  X(KernelInfo_GetInputTypeInfo) X(KernelInfo_GetOutputTypeInfo) X(KernelInfoGetAttribute_tensor) \
  X(HasSessionConfigEntry) X(GetSessionConfigEntry) \
  /* API 15 */ \
  X(SessionOptionsAppendExecutionProvider_Dnnl) X(CreateDnnlProviderOptions) X(UpdateDnnlProviderOptions) \
  X(GetDnnlProviderOptionsAsString) X(ReleaseDnnlProviderOptions) X(KernelInfo_GetNodeName) \
  X(KernelInfo_GetLogger) X(KernelContext_GetLogger) X(Logger_LogMessage) X(Logger_GetLoggingSeverityLevel) \
  X(KernelInfoGetConstantInput_tensor) X(CastTypeInfoToOptionalTypeInfo) X(GetOptionalContainedTypeInfo) \
  X(GetResizedStringTensorElementBuffer) X(KernelContext_GetAllocator) X(GetBuildInfoString) \
  /* API 16 */ \
  X(CreateROCMProviderOptions) X(UpdateROCMProviderOptions) X(GetROCMProviderOptionsAsString) \
  X(ReleaseROCMProviderOptions) X(CreateAndRegisterAllocatorV2) X(RunAsync) \
  X(UpdateTensorRTProviderOptionsWithValue) X(GetTensorRTProviderOptionsByName) \
  X(UpdateCUDAProviderOptionsWithValue) X(GetCUDAProviderOptionsByName) X(KernelContext_GetResource) \
  /* API 17 */ \
  X(SetUserLoggingFunction) X(ShapeInferContext_GetInputCount) X(ShapeInferContext_GetInputTypeShape) \
  X(ShapeInferContext_GetAttribute) X(ShapeInferContext_SetOutputTypeShape) X(SetSymbolicDimensions) \
  X(ReadOpAttr) X(SetDeterministicCompute) X(KernelContext_ParallelFor) \
  X(SessionOptionsAppendExecutionProvider_OpenVINO_V2) \
  /* API 18 */ \
  X(SessionOptionsAppendExecutionProvider_VitisAI) X(KernelContext_GetScratchBuffer) \
  X(KernelInfoGetAllocator) X(AddExternalInitializersFromFilesInMemory) \
  /* API 20 */ \
  X(CreateLoraAdapter) X(CreateLoraAdapterFromArray) X(ReleaseLoraAdapter) X(RunOptionsAddActiveLoraAdapter) \
  X(SetEpDynamicOptions) \
  /* API 22 */ \
  X(ReleaseValueInfo) X(ReleaseNode) X(ReleaseGraph) X(ReleaseModel) X(GetValueInfoName) \
  X(GetValueInfoTypeInfo) X(GetModelEditorApi) X(CreateTensorWithDataAndDeleterAsOrtValue) \
  X(SessionOptionsSetLoadCancellationFlag) X(GetCompileApi) X(CreateKeyValuePairs) X(AddKeyValuePair) \
  X(GetKeyValue) X(GetKeyValuePairs) X(RemoveKeyValuePair) X(ReleaseKeyValuePairs) \
  X(RegisterExecutionProviderLibrary) X(UnregisterExecutionProviderLibrary) X(GetEpDevices) \
  X(SessionOptionsAppendExecutionProvider_V2) X(SessionOptionsSetEpSelectionPolicy) \
  X(SessionOptionsSetEpSelectionPolicyDelegate) X(HardwareDevice_Type) X(HardwareDevice_VendorId) \
  X(HardwareDevice_Vendor) X(HardwareDevice_DeviceId) X(HardwareDevice_Metadata) X(EpDevice_EpName) \
  X(EpDevice_EpVendor) X(EpDevice_EpMetadata) X(EpDevice_EpOptions) X(EpDevice_Device) X(GetEpApi) \
  /* API 23 */ \
  X(GetTensorSizeInBytes) X(AllocatorGetStats) X(CreateMemoryInfo_V2) X(MemoryInfoGetDeviceMemType) \
  X(MemoryInfoGetVendorId) X(ValueInfo_GetValueProducer) X(ValueInfo_GetValueNumConsumers) \
  X(ValueInfo_GetValueConsumers) X(ValueInfo_GetInitializerValue) X(ValueInfo_GetExternalInitializerInfo) \
  X(ValueInfo_IsRequiredGraphInput) X(ValueInfo_IsOptionalGraphInput) X(ValueInfo_IsGraphOutput) \
  X(ValueInfo_IsConstantInitializer) X(ValueInfo_IsFromOuterScope) X(Graph_GetName) X(Graph_GetModelPath) \
  X(Graph_GetOnnxIRVersion) X(Graph_GetNumOperatorSets) X(Graph_GetOperatorSets) X(Graph_GetNumInputs) \
  X(Graph_GetInputs) X(Graph_GetNumOutputs) X(Graph_GetOutputs) X(Graph_GetNumInitializers) \
  X(Graph_GetInitializers) X(Graph_GetNumNodes) X(Graph_GetNodes) X(Graph_GetParentNode) \
  X(Graph_GetGraphView) X(Node_GetId) X(Node_GetName) X(Node_GetOperatorType) X(Node_GetDomain) \
  X(Node_GetSinceVersion) X(Node_GetNumInputs) X(Node_GetInputs) X(Node_GetNumOutputs) X(Node_GetOutputs) \
  X(Node_GetNumImplicitInputs) X(Node_GetImplicitInputs) X(Node_GetNumAttributes) X(Node_GetAttributes) \
  X(Node_GetAttributeByName) X(OpAttr_GetTensorAttributeAsOrtValue) X(OpAttr_GetType) X(OpAttr_GetName) \
  X(Node_GetNumSubgraphs) X(Node_GetSubgraphs) X(Node_GetGraph) X(Node_GetEpName) \
  X(ReleaseExternalInitializerInfo) X(ExternalInitializerInfo_GetFilePath) \
  X(ExternalInitializerInfo_GetFileOffset) X(ExternalInitializerInfo_GetByteSize) X(GetRunConfigEntry) \
  X(EpDevice_MemoryInfo) X(CreateSharedAllocator) X(GetSharedAllocator) X(ReleaseSharedAllocator) \
  X(GetTensorData) X(GetSessionOptionsConfigEntries) X(SessionGetMemoryInfoForInputs) \
  X(SessionGetMemoryInfoForOutputs) X(SessionGetEpDeviceForInputs) X(CreateSyncStreamForEpDevice) \
  X(SyncStream_GetHandle) X(ReleaseSyncStream) X(CopyTensors) X(Graph_GetModelMetadata) \
  X(GetModelCompatibilityForEpDevices) X(CreateExternalInitializerInfo) \
  /* API 24 */ \
  X(TensorTypeAndShape_HasShape) X(KernelInfo_GetConfigEntries) X(KernelInfo_GetOperatorDomain) \
  X(KernelInfo_GetOperatorType) X(KernelInfo_GetOperatorSinceVersion) X(GetInteropApi) \
  X(SessionGetEpDeviceForOutputs) X(GetNumHardwareDevices) X(GetHardwareDevices) \
  X(GetHardwareDeviceEpIncompatibilityDetails) X(DeviceEpIncompatibilityDetails_GetReasonsBitmask) \
  X(DeviceEpIncompatibilityDetails_GetNotes) X(DeviceEpIncompatibilityDetails_GetErrorCode) \
  X(ReleaseDeviceEpIncompatibilityDetails) X(GetCompatibilityInfoFromModel) \
  X(GetCompatibilityInfoFromModelBytes) X(CreateEnvWithOptions) X(Session_GetEpGraphAssignmentInfo) \
  X(EpAssignedSubgraph_GetEpName) X(EpAssignedSubgraph_GetNodes) X(EpAssignedNode_GetName) \
  X(EpAssignedNode_GetDomain) X(EpAssignedNode_GetOperatorType) X(RunOptionsSetSyncStream) \
  X(GetTensorElementTypeAndShapeDataReference) \
  /* API 25 */ \
  X(RunOptionsEnableProfiling) X(RunOptionsDisableProfiling) X(KernelInfoGetAttributeArray_string) \
  X(SetPerSessionThreadPoolCallbacks) \
  /* API 27 */ \
  X(GetMemPatternEnabled) X(GetSessionExecutionMode) X(SessionReleaseCapturedGraph) \
  /* API 28 */ \
  X(GetExperimentalFunction) X(KernelContext_GetSyncStream) \
  /* API 29 */ \
  X(SessionOptionsSetWeightlessSourceModelBuffer)
