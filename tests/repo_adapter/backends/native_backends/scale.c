/* A test backend written against rayton's declarations (triton_abi.h), as a user's backend
 * is written against Triton's headers: OUT = IN * factor for an FP32 input "IN" (factor 2,
 * or the "factor" setting of --backend-config=scale,factor=<f>), one response per request,
 * statistics reported per request and per batch. A negative element fails its request with
 * INVALID_ARG.
 *
 * Built variants: -DFAIL_INITIALIZE (TRITONBACKEND_Initialize returns an error),
 * -DNO_EXECUTE (no TRITONBACKEND_ModelInstanceExecute), -DDECOUPLED (each request answered
 * by REPEAT responses from a thread of the backend's own, after Execute returned),
 * -DCRASH (an element equal to 13 segfaults the process inside Execute), -DNEWER_API (built
 * for a backend API one minor version newer than the server's: Initialize refuses),
 * -DAUTOCOMPLETE (a model whose config has no input gets the whole config from the backend,
 * with TRITONBACKEND_ModelSetConfig, when auto-complete is on).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "triton_abi.h"

#define REPEAT 3

static float factor = 2.0f;

/* The number after `"key"`, spaces, a colon, spaces and an optional quote in a JSON text. */
__attribute__((unused)) static int json_number(const char* json, const char* key, float* value) {
  const char* at = strstr(json, key);
  if (at == NULL) return 0;
  at += strlen(key);
  while (*at == ' ' || *at == ':' || *at == '"') ++at;
  *value = strtof(at, NULL);
  return 1;
}

__attribute__((unused)) static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  uint32_t major, minor;
  TRITONSERVER_Error* error = TRITONBACKEND_ApiVersion(&major, &minor);
  if (error) return error;
#ifdef NEWER_API
  const uint32_t needed_minor = RAYTON_BACKEND_API_MINOR + 1;
#else
  const uint32_t needed_minor = RAYTON_BACKEND_API_MINOR;
#endif
  /* What backends built with Triton's headers check: the same major, at least their minor. */
  if (major != RAYTON_BACKEND_API_MAJOR || minor < needed_minor)
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNSUPPORTED,
                                 "triton backend API version does not support this backend");
#ifdef FAIL_INITIALIZE
  (void)backend;
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "scale: initialize refused");
#else
  const char* name;
  error = TRITONBACKEND_BackendName(backend, &name);
  if (error) return error;
  if (strcmp(name, "scale") != 0)
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "scale: wrong name");
  TRITONSERVER_Message* config;
  error = TRITONBACKEND_BackendConfig(backend, &config);
  if (error) return error;
  const char* json;
  size_t size;
  TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  json_number(json, "\"factor\"", &factor);
  return NULL; /* the backend config stays the server's: never deleted */
#endif
}

#ifdef AUTOCOMPLETE
/* The whole config this backend serves, for a model whose config names only the backend. */
static TRITONSERVER_Error* complete_config(TRITONBACKEND_Model* model) {
  const char* name;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelName(model, &name);
  if (error) return error;
  char completed[512];
  snprintf(completed, sizeof(completed),
           "{\"name\":\"%s\",\"backend\":\"scale\",\"max_batch_size\":8,"
           "\"input\":[{\"name\":\"IN\",\"data_type\":\"TYPE_FP32\",\"dims\":[1]}],"
           "\"output\":[{\"name\":\"OUT\",\"data_type\":\"TYPE_FP32\",\"dims\":[1]}],"
           "\"dynamic_batching\":{}}",
           name);
  TRITONSERVER_Message* message;
  error = TRITONSERVER_MessageNewFromSerializedJson(&message, completed, strlen(completed));
  if (error) return error;
  error = TRITONBACKEND_ModelSetConfig(model, 1, message);
  TRITONSERVER_MessageDelete(message);
  return error;
}
#endif

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* config;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelConfig(model, 1, &config);
  if (error) return error;
  const char* json;
  size_t size;
  TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  int has_input = strstr(json, "\"IN\"") != NULL;
  TRITONSERVER_MessageDelete(config);
  if (has_input) return NULL;
#ifdef AUTOCOMPLETE
  bool auto_complete = false;
  error = TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete);
  if (error) return error;
  if (auto_complete) return complete_config(model);
#endif
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG,
                               "scale: the config has no input 'IN'");
}

__attribute__((unused)) static TRITONSERVER_Error* doubled(TRITONBACKEND_Request* request,
                                   TRITONBACKEND_Response* response, uint64_t* rows) {
  TRITONBACKEND_Input* input;
  TRITONSERVER_Error* error = TRITONBACKEND_RequestInput(request, "IN", &input);
  if (error) return error;
  TRITONSERVER_DataType datatype;
  const int64_t* shape;
  uint32_t dims;
  uint64_t byte_size;
  error = TRITONBACKEND_InputProperties(input, NULL, &datatype, &shape, &dims, &byte_size, NULL);
  if (error) return error;
  if (datatype != TRITONSERVER_TYPE_FP32)
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "scale: IN must be FP32");
  const void* buffer;
  uint64_t buffer_size;
  TRITONSERVER_MemoryType memory_type;
  int64_t memory_type_id;
  error = TRITONBACKEND_InputBuffer(input, 0, &buffer, &buffer_size, &memory_type,
                                    &memory_type_id);
  if (error) return error;
  const float* in = buffer;
  size_t count = buffer_size / sizeof(float);
#ifdef CRASH
  for (size_t i = 0; i < count; ++i)
    if (in[i] == 13.0f) raise(SIGSEGV);
#endif
  for (size_t i = 0; i < count; ++i)
    if (in[i] < 0)
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "scale: negative input");
  TRITONBACKEND_Output* output;
  error = TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, shape,
                                       dims);
  if (error) return error;
  void* out;
  error = TRITONBACKEND_OutputBuffer(output, &out, buffer_size, &memory_type, &memory_type_id);
  if (error) return error;
  for (size_t i = 0; i < count; ++i) ((float*)out)[i] = in[i] * factor;
  *rows += dims > 0 ? (uint64_t)shape[0] : 1;
  return NULL;
}

#ifdef DECOUPLED
typedef struct {
  TRITONBACKEND_ResponseFactory* factory;
  float value;
} later_work;

static void* answer_later(void* argument) {
  later_work* work = argument;
  for (int i = 0; i < REPEAT; ++i) {
    TRITONBACKEND_Response* response;
    TRITONBACKEND_ResponseNewFromFactory(&response, work->factory);
    TRITONBACKEND_Output* output;
    int64_t shape[1] = {1};
    TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, shape, 1);
    void* out;
    TRITONSERVER_MemoryType memory_type;
    int64_t memory_type_id;
    TRITONBACKEND_OutputBuffer(output, &out, sizeof(float), &memory_type, &memory_type_id);
    *(float*)out = work->value + (float)i;
    TRITONBACKEND_ResponseSend(response, 0, NULL);
  }
  TRITONBACKEND_ResponseFactorySendFlags(work->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
  TRITONBACKEND_ResponseFactoryDelete(work->factory);
  free(work);
  return NULL;
}
#endif

#ifndef NO_EXECUTE
RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count) {
  uint64_t exec_start = now_ns();
  uint64_t rows = 0;
  for (uint32_t r = 0; r < request_count; ++r) {
    TRITONBACKEND_Request* request = requests[r];
#ifdef DECOUPLED
    later_work* work = calloc(1, sizeof(*work));
    TRITONBACKEND_ResponseFactoryNew(&work->factory, request);
    TRITONBACKEND_Input* input;
    const void* buffer;
    uint64_t size;
    TRITONSERVER_MemoryType memory_type;
    int64_t memory_type_id;
    TRITONBACKEND_RequestInput(request, "IN", &input);
    TRITONBACKEND_InputBuffer(input, 0, &buffer, &size, &memory_type, &memory_type_id);
    work->value = *(const float*)buffer;
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    pthread_t thread;
    pthread_create(&thread, NULL, answer_later, work);
    pthread_detach(thread);
    rows += 1;
#else
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* error = TRITONBACKEND_ResponseNew(&response, request);
    if (error) return error;
    error = doubled(request, response, &rows);
    TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error);
    uint64_t done = now_ns();
    TRITONBACKEND_ModelInstanceReportStatistics(instance, request, error == NULL, exec_start,
                                                exec_start, done, done);
    TRITONSERVER_ErrorDelete(error); /* the sender keeps its error, as with Triton */
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
#endif
  }
  uint64_t exec_end = now_ns();
  TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, rows, exec_start, exec_start,
                                                   exec_end, exec_end);
  return NULL;
}
#endif
