/* rayton's declarations of the part of Triton's C API a backend links against.
 *
 * Written here from the signatures and values Triton documents (tritonserver.h and
 * tritonbackend.h of triton-inference-server/core, API 1.19 as in Triton 2.51): the numeric
 * values of the enums and the function signatures are the ABI an unmodified
 * libtriton_<name>.so was compiled against, so they must stay exactly as Triton has them. The
 * types are opaque to backends; rayton's host (rayton_host.c) defines them.
 */
#ifndef RAYTON_TRITON_ABI_H
#define RAYTON_TRITON_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RAYTON_EXPORT __attribute__((visibility("default")))

/* C linkage for C++ backends: the server looks their entry points up by their C names. */
#ifdef __cplusplus
extern "C" {
#endif

/* The API versions rayton serves: a backend refuses a major that differs or a lower minor. */
#define RAYTON_BACKEND_API_MAJOR 1
#define RAYTON_BACKEND_API_MINOR 19
#define RAYTON_SERVER_API_MAJOR 1
#define RAYTON_SERVER_API_MINOR 34

typedef enum {
  TRITONSERVER_TYPE_INVALID = 0,
  TRITONSERVER_TYPE_BOOL = 1,
  TRITONSERVER_TYPE_UINT8 = 2,
  TRITONSERVER_TYPE_UINT16 = 3,
  TRITONSERVER_TYPE_UINT32 = 4,
  TRITONSERVER_TYPE_UINT64 = 5,
  TRITONSERVER_TYPE_INT8 = 6,
  TRITONSERVER_TYPE_INT16 = 7,
  TRITONSERVER_TYPE_INT32 = 8,
  TRITONSERVER_TYPE_INT64 = 9,
  TRITONSERVER_TYPE_FP16 = 10,
  TRITONSERVER_TYPE_FP32 = 11,
  TRITONSERVER_TYPE_FP64 = 12,
  TRITONSERVER_TYPE_BYTES = 13,
  TRITONSERVER_TYPE_BF16 = 14
} TRITONSERVER_DataType;

typedef enum {
  TRITONSERVER_MEMORY_CPU = 0,
  TRITONSERVER_MEMORY_CPU_PINNED = 1,
  TRITONSERVER_MEMORY_GPU = 2
} TRITONSERVER_MemoryType;

typedef enum {
  TRITONSERVER_PARAMETER_STRING = 0,
  TRITONSERVER_PARAMETER_INT = 1,
  TRITONSERVER_PARAMETER_BOOL = 2,
  TRITONSERVER_PARAMETER_DOUBLE = 3,
  TRITONSERVER_PARAMETER_BYTES = 4
} TRITONSERVER_ParameterType;

typedef enum {
  TRITONSERVER_INSTANCEGROUPKIND_AUTO = 0,
  TRITONSERVER_INSTANCEGROUPKIND_CPU = 1,
  TRITONSERVER_INSTANCEGROUPKIND_GPU = 2,
  TRITONSERVER_INSTANCEGROUPKIND_MODEL = 3
} TRITONSERVER_InstanceGroupKind;

typedef enum {
  TRITONSERVER_LOG_INFO = 0,
  TRITONSERVER_LOG_WARN = 1,
  TRITONSERVER_LOG_ERROR = 2,
  TRITONSERVER_LOG_VERBOSE = 3
} TRITONSERVER_LogLevel;

typedef enum {
  TRITONSERVER_ERROR_UNKNOWN = 0,
  TRITONSERVER_ERROR_INTERNAL = 1,
  TRITONSERVER_ERROR_NOT_FOUND = 2,
  TRITONSERVER_ERROR_INVALID_ARG = 3,
  TRITONSERVER_ERROR_UNAVAILABLE = 4,
  TRITONSERVER_ERROR_UNSUPPORTED = 5,
  TRITONSERVER_ERROR_ALREADY_EXISTS = 6,
  TRITONSERVER_ERROR_CANCELLED = 7
} TRITONSERVER_Error_Code;

enum { TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1, TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2 };
enum { TRITONSERVER_REQUEST_RELEASE_ALL = 1, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2 };
enum { TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1 };

typedef enum { TRITONBACKEND_ARTIFACT_FILESYSTEM = 0 } TRITONBACKEND_ArtifactType;
typedef enum {
  TRITONBACKEND_EXECUTION_BLOCKING = 0,
  TRITONBACKEND_EXECUTION_DEVICE_BLOCKING = 1
} TRITONBACKEND_ExecutionPolicy;

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_ResponseFactory TRITONBACKEND_ResponseFactory;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_State TRITONBACKEND_State;
typedef struct TRITONBACKEND_MemoryManager TRITONBACKEND_MemoryManager;
typedef struct TRITONBACKEND_ModelInstanceResponseStatistics
    TRITONBACKEND_ModelInstanceResponseStatistics;

/* What a backend exports; rayton looks them up by these names. */
typedef TRITONSERVER_Error* (*backend_init_fn)(TRITONBACKEND_Backend*);
typedef TRITONSERVER_Error* (*model_init_fn)(TRITONBACKEND_Model*);
typedef TRITONSERVER_Error* (*instance_init_fn)(TRITONBACKEND_ModelInstance*);
typedef TRITONSERVER_Error* (*instance_execute_fn)(
    TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request**, const uint32_t);

/* The API rayton's host provides (definitions in rayton_host.c, which checks them against
 * these). */
RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_ErrorNew( TRITONSERVER_Error_Code code, const char* msg);
RAYTON_EXPORT void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
RAYTON_EXPORT TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error);
RAYTON_EXPORT const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* error);
RAYTON_EXPORT const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);
RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson( TRITONSERVER_Message** message, const char* base, size_t byte_size);
RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message);
RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson( TRITONSERVER_Message* message, const char** base, size_t* byte_size);
RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor);
RAYTON_EXPORT const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype);
RAYTON_EXPORT TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* dtype);
RAYTON_EXPORT uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType datatype);
RAYTON_EXPORT const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype);
RAYTON_EXPORT const char* TRITONSERVER_ParameterTypeString(TRITONSERVER_ParameterType paramtype);
RAYTON_EXPORT const char* TRITONSERVER_InstanceGroupKindString( TRITONSERVER_InstanceGroupKind kind);
RAYTON_EXPORT bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level);
RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_LogMessage( TRITONSERVER_LogLevel level, const char* filename, const int line, const char* msg);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendName( TRITONBACKEND_Backend* backend, const char** name);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendConfig( TRITONBACKEND_Backend* backend, TRITONSERVER_Message** backend_config);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendExecutionPolicy( TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy* policy);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendSetExecutionPolicy( TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy policy);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendArtifacts( TRITONBACKEND_Backend* backend, TRITONBACKEND_ArtifactType* artifact_type, const char** location);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager( TRITONBACKEND_Backend* backend, TRITONBACKEND_MemoryManager** manager);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendState( TRITONBACKEND_Backend* backend, void** state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendSetState( TRITONBACKEND_Backend* backend, void* state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_MemoryManagerAllocate( TRITONBACKEND_MemoryManager* manager, void** buffer, const TRITONSERVER_MemoryType memory_type, const int64_t memory_type_id, const uint64_t byte_size);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_MemoryManagerFree( TRITONBACKEND_MemoryManager* manager, void* buffer, const TRITONSERVER_MemoryType memory_type, const int64_t memory_type_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelName( TRITONBACKEND_Model* model, const char** name);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelVersion( TRITONBACKEND_Model* model, uint64_t* version);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelRepository( TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* artifact_type, const char** location);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelConfig( TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message** model_config);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig( TRITONBACKEND_Model* model, bool* auto_complete_config);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelSetConfig( TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message* model_config);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelServer( TRITONBACKEND_Model* model, TRITONSERVER_Server** server);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelBackend( TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelReportMemoryUsage( TRITONBACKEND_Model* model, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName( TRITONBACKEND_ModelInstance* instance, const char** name);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind( TRITONBACKEND_ModelInstance* instance, TRITONSERVER_InstanceGroupKind* kind);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId( TRITONBACKEND_ModelInstance* instance, int32_t* device_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceHostPolicy( TRITONBACKEND_ModelInstance* instance, TRITONSERVER_Message** host_policy);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceIsPassive( TRITONBACKEND_ModelInstance* instance, bool* is_passive);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileCount( TRITONBACKEND_ModelInstance* instance, uint32_t* count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileName( TRITONBACKEND_ModelInstance* instance, const uint32_t index, const char** profile_name);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceCount( TRITONBACKEND_ModelInstance* instance, uint32_t* count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties( TRITONBACKEND_ModelInstance* instance, uint32_t index, const char** kind, int64_t* id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel( TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState( TRITONBACKEND_ModelInstance* instance, void** state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState( TRITONBACKEND_ModelInstance* instance, void* state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportMemoryUsage( TRITONBACKEND_ModelInstance* instance, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics( TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success, const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics( TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size, const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestId( TRITONBACKEND_Request* request, const char** id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestIsCancelled( TRITONBACKEND_Request* request, bool* is_cancelled);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationId( TRITONBACKEND_Request* request, uint64_t* id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationIdString( TRITONBACKEND_Request* request, const char** id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds( TRITONBACKEND_Request* request, uint64_t* timeout);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestFlags( TRITONBACKEND_Request* request, uint32_t* flags);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount( TRITONBACKEND_Request* request, uint32_t* count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestParameter( TRITONBACKEND_Request* request, const uint32_t index, const char** key, TRITONSERVER_ParameterType* type, const void** vvalue);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputCount( TRITONBACKEND_Request* request, uint32_t* count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputName( TRITONBACKEND_Request* request, const uint32_t index, const char** input_name);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInput( TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex( TRITONBACKEND_Request* request, const uint32_t index, TRITONBACKEND_Input** input);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount( TRITONBACKEND_Request* request, uint32_t* count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputName( TRITONBACKEND_Request* request, const uint32_t index, const char** output_name);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputBufferProperties( TRITONBACKEND_Request* request, const char* name, size_t* byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestRelease( TRITONBACKEND_Request* request, uint32_t release_flags);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestTrace( TRITONBACKEND_Request* request, TRITONSERVER_InferenceTrace** trace);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputProperties( TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputPropertiesForHostPolicy( TRITONBACKEND_Input* input, const char* host_policy_name, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBuffer( TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBufferForHostPolicy( TRITONBACKEND_Input* input, const char* host_policy_name, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBufferAttributes( TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, TRITONSERVER_BufferAttributes** buffer_attributes);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseNew( TRITONBACKEND_Response** response, TRITONBACKEND_Request* request);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryNew( TRITONBACKEND_ResponseFactory** factory, TRITONBACKEND_Request* request);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryDelete( TRITONBACKEND_ResponseFactory* factory);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryIsCancelled( TRITONBACKEND_ResponseFactory* factory, bool* is_cancelled);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseNewFromFactory( TRITONBACKEND_Response** response, TRITONBACKEND_ResponseFactory* factory);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactorySendFlags( TRITONBACKEND_ResponseFactory* factory, const uint32_t send_flags);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetStringParameter( TRITONBACKEND_Response* response, const char* name, const char* value);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetIntParameter( TRITONBACKEND_Response* response, const char* name, const int64_t value);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetBoolParameter( TRITONBACKEND_Response* response, const char* name, const bool value);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetDoubleParameter( TRITONBACKEND_Response* response, const char* name, const double value);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseOutput( TRITONBACKEND_Response* response, TRITONBACKEND_Output** output, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_OutputBuffer( TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_OutputBufferAttributes( TRITONBACKEND_Output* output, TRITONSERVER_BufferAttributes** buffer_attributes);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSend( TRITONBACKEND_Response* response, const uint32_t send_flags, TRITONSERVER_Error* error);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateNew( TRITONBACKEND_State** state, TRITONBACKEND_Request* request, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateUpdate(TRITONBACKEND_State* state);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateBuffer( TRITONBACKEND_State* state, void** buffer, const uint64_t buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateBufferAttributes( TRITONBACKEND_State* state, TRITONSERVER_BufferAttributes** buffer_attributes);

/* The entry points a backend defines and the server looks up by name (declared here so that
 * a C++ backend's definitions get C linkage). Only ModelInstanceExecute is required. */
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize( TRITONBACKEND_ModelInstance* instance);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize( TRITONBACKEND_ModelInstance* instance);
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute( TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count);

#ifdef __cplusplus
}
#endif

#endif
