/* rayton's host of Triton's C backend API: the server side a libtriton_<name>.so calls.
 *
 * Built as libtritonserver.so (the name backends are linked against) and loaded by
 * repo_adapter/backends/native_host.py with ctypes before any backend, so an unmodified
 * backend's undefined TRITONSERVER_* / TRITONBACKEND_* symbols resolve here.
 *
 * Python drives it through the rayton_* functions at the end: load a backend, create models
 * and instances, build requests whose inputs point at the caller's buffers (no copy), and
 * execute them. What the backend sends back (responses, request releases) goes to the
 * request's completion queue, from whatever thread the backend sends it: Python pops the
 * queue, woken by its eventfd. Functions rayton does not support answer
 * TRITONSERVER_ERROR_UNSUPPORTED with a message naming them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "triton_abi.h"

/* ------------------------------------------------------------------ errors and messages */

struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  char* message;
};

struct TRITONSERVER_Message {
  char* json;
  size_t size;
};

static char* copy_text(const char* text) { return strdup(text ? text : ""); }

static TRITONSERVER_Error* error_new(TRITONSERVER_Error_Code code, const char* format, ...) {
  TRITONSERVER_Error* error = calloc(1, sizeof(*error));
  va_list args;
  va_start(args, format);
  if (vasprintf(&error->message, format, args) < 0) error->message = copy_text("out of memory");
  va_end(args);
  error->code = code;
  return error;
}

#define UNSUPPORTED(name) \
  error_new(TRITONSERVER_ERROR_UNSUPPORTED, "%s is not supported by rayton's backend host", name)

#define REQUIRE(pointer, what)                                                         \
  do {                                                                                 \
    if ((pointer) == NULL)                                                             \
      return error_new(TRITONSERVER_ERROR_INVALID_ARG, "%s must not be null", (what)); \
  } while (0)

RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_ErrorNew(
    TRITONSERVER_Error_Code code, const char* msg) {
  return error_new(code, "%s", msg ? msg : "");
}

RAYTON_EXPORT void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error) {
  if (error == NULL) return;
  free(error->message);
  free(error);
}

RAYTON_EXPORT TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error) {
  return error->code;
}

RAYTON_EXPORT const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* error) {
  switch (error->code) {
    case TRITONSERVER_ERROR_UNKNOWN: return "Unknown";
    case TRITONSERVER_ERROR_INTERNAL: return "Internal";
    case TRITONSERVER_ERROR_NOT_FOUND: return "Not found";
    case TRITONSERVER_ERROR_INVALID_ARG: return "Invalid argument";
    case TRITONSERVER_ERROR_UNAVAILABLE: return "Unavailable";
    case TRITONSERVER_ERROR_UNSUPPORTED: return "Unsupported";
    case TRITONSERVER_ERROR_ALREADY_EXISTS: return "Already exists";
    case TRITONSERVER_ERROR_CANCELLED: return "Cancelled";
  }
  return "<invalid code>";
}

RAYTON_EXPORT const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error) {
  return error->message;
}

static TRITONSERVER_Message* message_new(const char* json, size_t size) {
  TRITONSERVER_Message* message = calloc(1, sizeof(*message));
  message->json = malloc(size + 1);
  memcpy(message->json, json, size);
  message->json[size] = '\0';
  message->size = size;
  return message;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(
    TRITONSERVER_Message** message, const char* base, size_t byte_size) {
  REQUIRE(message, "message");
  REQUIRE(base, "base");
  *message = message_new(base, byte_size);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message) {
  if (message != NULL) {
    free(message->json);
    free(message);
  }
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(
    TRITONSERVER_Message* message, const char** base, size_t* byte_size) {
  REQUIRE(message, "message");
  *base = message->json;
  *byte_size = message->size;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = RAYTON_SERVER_API_MAJOR;
  *minor = RAYTON_SERVER_API_MINOR;
  return NULL;
}

/* ------------------------------------------------------------------ data types, logging */

static const char* const DATATYPE_NAMES[] = {
    "<invalid>", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
    "INT32",     "INT64", "FP16", "FP32",   "FP64",   "BYTES",  "BF16"};
static const uint32_t DATATYPE_SIZES[] = {0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 0, 2};
#define DATATYPE_COUNT (sizeof(DATATYPE_NAMES) / sizeof(DATATYPE_NAMES[0]))

RAYTON_EXPORT const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype) {
  return (unsigned)datatype < DATATYPE_COUNT ? DATATYPE_NAMES[datatype] : "<invalid>";
}

RAYTON_EXPORT TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* dtype) {
  for (unsigned i = 1; dtype != NULL && i < DATATYPE_COUNT; ++i)
    if (strcmp(dtype, DATATYPE_NAMES[i]) == 0) return (TRITONSERVER_DataType)i;
  return TRITONSERVER_TYPE_INVALID;
}

RAYTON_EXPORT uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType datatype) {
  return (unsigned)datatype < DATATYPE_COUNT ? DATATYPE_SIZES[datatype] : 0;
}

RAYTON_EXPORT const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype) {
  switch (memtype) {
    case TRITONSERVER_MEMORY_CPU: return "CPU";
    case TRITONSERVER_MEMORY_CPU_PINNED: return "CPU_PINNED";
    case TRITONSERVER_MEMORY_GPU: return "GPU";
  }
  return "<invalid>";
}

RAYTON_EXPORT const char* TRITONSERVER_ParameterTypeString(TRITONSERVER_ParameterType paramtype) {
  switch (paramtype) {
    case TRITONSERVER_PARAMETER_STRING: return "STRING";
    case TRITONSERVER_PARAMETER_INT: return "INT";
    case TRITONSERVER_PARAMETER_BOOL: return "BOOL";
    case TRITONSERVER_PARAMETER_DOUBLE: return "DOUBLE";
    case TRITONSERVER_PARAMETER_BYTES: return "BYTES";
  }
  return "<invalid>";
}

RAYTON_EXPORT const char* TRITONSERVER_InstanceGroupKindString(
    TRITONSERVER_InstanceGroupKind kind) {
  switch (kind) {
    case TRITONSERVER_INSTANCEGROUPKIND_AUTO: return "AUTO";
    case TRITONSERVER_INSTANCEGROUPKIND_CPU: return "CPU";
    case TRITONSERVER_INSTANCEGROUPKIND_GPU: return "GPU";
    case TRITONSERVER_INSTANCEGROUPKIND_MODEL: return "MODEL";
  }
  return "<invalid>";
}

/* Set from Python (the server's --log-verbose); backends ask before building a message. */
static int verbose_logging = 0;

RAYTON_EXPORT bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) {
  return level != TRITONSERVER_LOG_VERBOSE || verbose_logging;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONSERVER_LogMessage(
    TRITONSERVER_LogLevel level, const char* filename, const int line, const char* msg) {
  static const char LEVELS[] = "IWEV";
  if (!TRITONSERVER_LogIsEnabled(level)) return NULL;
  /* Triton's layout: level letter, then file:line] message. The replica's stderr is its log. */
  fprintf(stderr, "%c %s:%d] %s\n", LEVELS[(unsigned)level & 3u], filename ? filename : "?",
          line, msg ? msg : "");
  return NULL;
}

/* ------------------------------------------------------------------ completion queues */

/* What a backend sent, as Python pops it: a response (or only flags), or a released request. */
enum { RAYTON_EVENT_RESPONSE = 1, RAYTON_EVENT_RELEASE = 2 };

typedef struct rayton_event {
  int kind;
  uint64_t token; /* the request's, chosen by Python */
  uint32_t flags; /* response: TRITONSERVER_RESPONSE_COMPLETE_*; release: the release flags */
  TRITONBACKEND_Response* response; /* NULL for flags alone; Python deletes it */
  TRITONSERVER_Error* error;        /* the response's error, owned by Python now */
  struct rayton_event* next;
} rayton_event;

typedef struct rayton_queue {
  pthread_mutex_t lock;
  rayton_event* head;
  rayton_event* tail;
  int fd;    /* eventfd: readable while events wait (unless held) */
  int holds; /* while > 0 the reader drains by itself: no wake-ups */
} rayton_queue;

static void queue_signal(rayton_queue* queue) {
  uint64_t one = 1;
  while (write(queue->fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

/* Only the first event of an empty queue wakes the reader (it pops until the queue is
 * empty), and none while the reader holds the queue (it drains after Execute returns). */
static void queue_push(rayton_queue* queue, rayton_event* event) {
  pthread_mutex_lock(&queue->lock);
  int wake = queue->tail == NULL && queue->holds == 0;
  if (queue->tail) queue->tail->next = event;
  else queue->head = event;
  queue->tail = event;
  pthread_mutex_unlock(&queue->lock);
  if (wake) queue_signal(queue);
}

/* ------------------------------------------------------------------ backend, model, instance */

struct TRITONBACKEND_MemoryManager {
  int unused;
};

struct TRITONBACKEND_Backend {
  char* name;
  char* config_json;
  TRITONSERVER_Message* config_message; /* what BackendConfig gives: the backend's to read */
  char* artifacts;
  void* state;
  TRITONBACKEND_ExecutionPolicy policy;
  void* library;
  backend_init_fn finalize;
  model_init_fn model_initialize;
  model_init_fn model_finalize;
  instance_init_fn instance_initialize;
  instance_init_fn instance_finalize;
  instance_execute_fn execute;
  TRITONBACKEND_MemoryManager memory_manager;
};

struct TRITONBACKEND_Model {
  TRITONBACKEND_Backend* backend;
  char* name;
  uint64_t version;
  char* repository;
  pthread_mutex_t config_lock;
  char* config_json;
  bool auto_complete;
  void* state;
};

/* One statistics report of the backend, as Python takes it: a request's
 * (TRITONBACKEND_ModelInstanceReportStatistics: kind 1, its token and success) or a batch's
 * (ReportBatchStatistics: kind 2, its size), with the backend's four timestamps. */
enum { RAYTON_REPORT_REQUEST = 1, RAYTON_REPORT_BATCH = 2 };

typedef struct rayton_report {
  int kind;
  uint64_t token;      /* request reports */
  int success;         /* request reports */
  uint64_t batch_size; /* batch reports */
  uint64_t exec_start_ns;
  uint64_t compute_start_ns;
  uint64_t compute_end_ns;
  uint64_t exec_end_ns;
} rayton_report;

struct TRITONBACKEND_ModelInstance {
  TRITONBACKEND_Model* model;
  char* name;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id;
  void* state;
  pthread_mutex_t stats_lock;
  rayton_report* reports; /* not yet taken by Python */
  uint32_t report_count;
  uint32_t report_capacity;
};

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = RAYTON_BACKEND_API_MAJOR;
  *minor = RAYTON_BACKEND_API_MINOR;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendName(
    TRITONBACKEND_Backend* backend, const char** name) {
  REQUIRE(backend, "backend");
  *name = backend->name;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendConfig(
    TRITONBACKEND_Backend* backend, TRITONSERVER_Message** backend_config) {
  REQUIRE(backend, "backend");
  /* As in Triton, the message stays the server's: backends never delete it. */
  *backend_config = backend->config_message;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendExecutionPolicy(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy* policy) {
  REQUIRE(backend, "backend");
  *policy = backend->policy;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendSetExecutionPolicy(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy policy) {
  REQUIRE(backend, "backend");
  backend->policy = policy;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendArtifacts(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_ArtifactType* artifact_type,
    const char** location) {
  REQUIRE(backend, "backend");
  *artifact_type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = backend->artifacts;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_MemoryManager** manager) {
  REQUIRE(backend, "backend");
  *manager = &backend->memory_manager;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendState(
    TRITONBACKEND_Backend* backend, void** state) {
  REQUIRE(backend, "backend");
  *state = backend->state;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_BackendSetState(
    TRITONBACKEND_Backend* backend, void* state) {
  REQUIRE(backend, "backend");
  backend->state = state;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_MemoryManagerAllocate(
    TRITONBACKEND_MemoryManager* manager, void** buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id, const uint64_t byte_size) {
  (void)manager;
  (void)memory_type_id;
  if (memory_type == TRITONSERVER_MEMORY_GPU)
    return error_new(TRITONSERVER_ERROR_UNSUPPORTED, "GPU memory is not supported by rayton's "
                     "backend host");
  *buffer = malloc(byte_size ? byte_size : 1);
  if (*buffer == NULL)
    return error_new(TRITONSERVER_ERROR_UNAVAILABLE, "cannot allocate %llu bytes",
                     (unsigned long long)byte_size);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_MemoryManagerFree(
    TRITONBACKEND_MemoryManager* manager, void* buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id) {
  (void)manager;
  (void)memory_type;
  (void)memory_type_id;
  free(buffer);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelName(
    TRITONBACKEND_Model* model, const char** name) {
  REQUIRE(model, "model");
  *name = model->name;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelVersion(
    TRITONBACKEND_Model* model, uint64_t* version) {
  REQUIRE(model, "model");
  *version = model->version;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelRepository(
    TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* artifact_type,
    const char** location) {
  REQUIRE(model, "model");
  *artifact_type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = model->repository;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version,
    TRITONSERVER_Message** model_config) {
  REQUIRE(model, "model");
  if (config_version != 1)
    return error_new(TRITONSERVER_ERROR_UNSUPPORTED,
                     "model configuration version %u is not supported, supported versions: 1",
                     config_version);
  pthread_mutex_lock(&model->config_lock);
  *model_config = message_new(model->config_json, strlen(model->config_json));
  pthread_mutex_unlock(&model->config_lock);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig(
    TRITONBACKEND_Model* model, bool* auto_complete_config) {
  REQUIRE(model, "model");
  *auto_complete_config = model->auto_complete;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelSetConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version,
    TRITONSERVER_Message* model_config) {
  REQUIRE(model, "model");
  REQUIRE(model_config, "model_config");
  if (config_version != 1)
    return error_new(TRITONSERVER_ERROR_UNSUPPORTED,
                     "model configuration version %u is not supported, supported versions: 1",
                     config_version);
  pthread_mutex_lock(&model->config_lock);
  free(model->config_json);
  model->config_json = copy_text(model_config->json);
  pthread_mutex_unlock(&model->config_lock);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelServer(
    TRITONBACKEND_Model* model, TRITONSERVER_Server** server) {
  (void)model;
  (void)server;
  return UNSUPPORTED("TRITONBACKEND_ModelServer (the in-process server API)");
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelBackend(
    TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend) {
  REQUIRE(model, "model");
  *backend = model->backend;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state) {
  REQUIRE(model, "model");
  *state = model->state;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state) {
  REQUIRE(model, "model");
  model->state = state;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelReportMemoryUsage(
    TRITONBACKEND_Model* model, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size) {
  (void)model;
  (void)usage;
  (void)usage_size;
  return NULL; /* accepted; rayton reports memory from the process, not the backend */
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName(
    TRITONBACKEND_ModelInstance* instance, const char** name) {
  REQUIRE(instance, "instance");
  *name = instance->name;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_InstanceGroupKind* kind) {
  REQUIRE(instance, "instance");
  *kind = instance->kind;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(
    TRITONBACKEND_ModelInstance* instance, int32_t* device_id) {
  REQUIRE(instance, "instance");
  *device_id = instance->device_id;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceHostPolicy(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_Message** host_policy) {
  REQUIRE(instance, "instance");
  static const char EMPTY[] = "{}";
  *host_policy = message_new(EMPTY, sizeof(EMPTY) - 1);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceIsPassive(
    TRITONBACKEND_ModelInstance* instance, bool* is_passive) {
  REQUIRE(instance, "instance");
  *is_passive = false;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileCount(
    TRITONBACKEND_ModelInstance* instance, uint32_t* count) {
  REQUIRE(instance, "instance");
  *count = 0;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileName(
    TRITONBACKEND_ModelInstance* instance, const uint32_t index, const char** profile_name) {
  (void)instance;
  (void)profile_name;
  return error_new(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: instance has 0 "
                   "profiles", index);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceCount(
    TRITONBACKEND_ModelInstance* instance, uint32_t* count) {
  REQUIRE(instance, "instance");
  *count = 0;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(
    TRITONBACKEND_ModelInstance* instance, uint32_t index, const char** kind, int64_t* id) {
  (void)instance;
  (void)kind;
  (void)id;
  return error_new(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index %u: instance has 0 "
                   "secondary devices", index);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model) {
  REQUIRE(instance, "instance");
  *model = instance->model;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(
    TRITONBACKEND_ModelInstance* instance, void** state) {
  REQUIRE(instance, "instance");
  *state = instance->state;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(
    TRITONBACKEND_ModelInstance* instance, void* state) {
  REQUIRE(instance, "instance");
  instance->state = state;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportMemoryUsage(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_BufferAttributes** usage,
    uint32_t usage_size) {
  (void)instance;
  (void)usage;
  (void)usage_size;
  return NULL; /* accepted, as for the model */
}

static uint64_t request_token(TRITONBACKEND_Request* request); /* defined with requests */

static void add_report(TRITONBACKEND_ModelInstance* instance, const rayton_report* report) {
  pthread_mutex_lock(&instance->stats_lock);
  if (instance->report_count == instance->report_capacity) {
    instance->report_capacity = instance->report_capacity ? 2 * instance->report_capacity : 16;
    instance->reports =
        realloc(instance->reports, instance->report_capacity * sizeof(*instance->reports));
  }
  instance->reports[instance->report_count++] = *report;
  pthread_mutex_unlock(&instance->stats_lock);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns,
    const uint64_t exec_end_ns) {
  REQUIRE(instance, "instance");
  REQUIRE(request, "request");
  rayton_report report = {RAYTON_REPORT_REQUEST, request_token(request), success, 0, exec_start_ns,
                          compute_start_ns, compute_end_ns, exec_end_ns};
  add_report(instance, &report);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns,
    const uint64_t exec_end_ns) {
  REQUIRE(instance, "instance");
  rayton_report report = {RAYTON_REPORT_BATCH, 0, 0, batch_size, exec_start_ns,
                          compute_start_ns, compute_end_ns, exec_end_ns};
  add_report(instance, &report);
  return NULL;
}

/* ------------------------------------------------------------------ requests and inputs */

struct TRITONBACKEND_Input {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  const void* buffer; /* the caller's memory, alive until the request is released */
  uint64_t byte_size;
};

typedef struct rayton_parameter {
  char* key;
  TRITONSERVER_ParameterType type;
  char* text;
  int64_t integer;
  bool boolean;
  double number;
} rayton_parameter;

struct TRITONBACKEND_Request {
  rayton_queue* queue;
  uint64_t token;
  char* id;
  uint64_t correlation_id;
  char* correlation_id_string; /* NULL: the id is an integer */
  uint32_t flags;
  TRITONBACKEND_Input* inputs;
  uint32_t input_count;
  char** outputs;
  uint32_t output_count;
  rayton_parameter* parameters;
  uint32_t parameter_count;
};

static uint64_t request_token(TRITONBACKEND_Request* request) { return request->token; }

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestId(
    TRITONBACKEND_Request* request, const char** id) {
  REQUIRE(request, "request");
  *id = request->id;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestIsCancelled(
    TRITONBACKEND_Request* request, bool* is_cancelled) {
  REQUIRE(request, "request");
  *is_cancelled = false;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationId(
    TRITONBACKEND_Request* request, uint64_t* id) {
  REQUIRE(request, "request");
  if (request->correlation_id_string != NULL)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "correlation ID in request is not an unsigned int");
  *id = request->correlation_id;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationIdString(
    TRITONBACKEND_Request* request, const char** id) {
  REQUIRE(request, "request");
  if (request->correlation_id_string == NULL)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "correlation ID in request is not a string");
  *id = request->correlation_id_string;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(
    TRITONBACKEND_Request* request, uint64_t* timeout) {
  REQUIRE(request, "request");
  *timeout = 0;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestFlags(
    TRITONBACKEND_Request* request, uint32_t* flags) {
  REQUIRE(request, "request");
  *flags = request->flags;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount(
    TRITONBACKEND_Request* request, uint32_t* count) {
  REQUIRE(request, "request");
  *count = request->parameter_count;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestParameter(
    TRITONBACKEND_Request* request, const uint32_t index, const char** key,
    TRITONSERVER_ParameterType* type, const void** vvalue) {
  REQUIRE(request, "request");
  if (index >= request->parameter_count)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "out of bounds index %u: request has %u parameters", index,
                     request->parameter_count);
  rayton_parameter* parameter = &request->parameters[index];
  *key = parameter->key;
  *type = parameter->type;
  switch (parameter->type) {
    case TRITONSERVER_PARAMETER_INT: *vvalue = &parameter->integer; break;
    case TRITONSERVER_PARAMETER_BOOL: *vvalue = &parameter->boolean; break;
    case TRITONSERVER_PARAMETER_DOUBLE: *vvalue = &parameter->number; break;
    default: *vvalue = parameter->text; break;
  }
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(
    TRITONBACKEND_Request* request, uint32_t* count) {
  REQUIRE(request, "request");
  *count = request->input_count;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** input_name) {
  REQUIRE(request, "request");
  if (index >= request->input_count)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "out of bounds index %u: request has %u inputs", index,
                     request->input_count);
  *input_name = request->inputs[index].name;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInput(
    TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input) {
  REQUIRE(request, "request");
  REQUIRE(name, "name");
  for (uint32_t i = 0; i < request->input_count; ++i) {
    if (strcmp(request->inputs[i].name, name) == 0) {
      *input = &request->inputs[i];
      return NULL;
    }
  }
  return error_new(TRITONSERVER_ERROR_INVALID_ARG, "unknown request input name %s", name);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(
    TRITONBACKEND_Request* request, const uint32_t index, TRITONBACKEND_Input** input) {
  REQUIRE(request, "request");
  if (index >= request->input_count)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "out of bounds index %u: request has %u inputs", index,
                     request->input_count);
  *input = &request->inputs[index];
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(
    TRITONBACKEND_Request* request, uint32_t* count) {
  REQUIRE(request, "request");
  *count = request->output_count;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** output_name) {
  REQUIRE(request, "request");
  if (index >= request->output_count)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "out of bounds index %u: request has %u requested outputs", index,
                     request->output_count);
  *output_name = request->outputs[index];
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputBufferProperties(
    TRITONBACKEND_Request* request, const char* name, size_t* byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  REQUIRE(request, "request");
  (void)name;
  if (byte_size) *byte_size = 0; /* no preference: any size the backend asks for */
  if (memory_type) *memory_type = TRITONSERVER_MEMORY_CPU;
  if (memory_type_id) *memory_type_id = 0;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestRelease(
    TRITONBACKEND_Request* request, uint32_t release_flags) {
  REQUIRE(request, "request");
  if (release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    return UNSUPPORTED("TRITONBACKEND_RequestRelease with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE");
  rayton_event* event = calloc(1, sizeof(*event));
  event->kind = RAYTON_EVENT_RELEASE;
  event->token = request->token;
  event->flags = release_flags;
  queue_push(request->queue, event);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestTrace(
    TRITONBACKEND_Request* request, TRITONSERVER_InferenceTrace** trace) {
  REQUIRE(request, "request");
  *trace = NULL; /* requests are not traced through the backend */
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputProperties(
    TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype,
    const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count) {
  REQUIRE(input, "input");
  if (name) *name = input->name;
  if (datatype) *datatype = input->datatype;
  if (shape) *shape = input->shape;
  if (dims_count) *dims_count = input->dims_count;
  if (byte_size) *byte_size = input->byte_size;
  if (buffer_count) *buffer_count = 1;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputPropertiesForHostPolicy(
    TRITONBACKEND_Input* input, const char* host_policy_name, const char** name,
    TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims_count,
    uint64_t* byte_size, uint32_t* buffer_count) {
  (void)host_policy_name; /* one host policy: every buffer is in host memory */
  return TRITONBACKEND_InputProperties(input, name, datatype, shape, dims_count, byte_size,
                                       buffer_count);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBuffer(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,
    uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type,
    int64_t* memory_type_id) {
  REQUIRE(input, "input");
  if (index != 0)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "out of bounds index %u: input '%s' has 1 buffer", index, input->name);
  *buffer = input->buffer;
  *buffer_byte_size = input->byte_size;
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBufferForHostPolicy(
    TRITONBACKEND_Input* input, const char* host_policy_name, const uint32_t index,
    const void** buffer, uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type,
    int64_t* memory_type_id) {
  (void)host_policy_name;
  return TRITONBACKEND_InputBuffer(input, index, buffer, buffer_byte_size, memory_type,
                                   memory_type_id);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBufferAttributes(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,
    TRITONSERVER_BufferAttributes** buffer_attributes) {
  (void)input;
  (void)index;
  (void)buffer;
  (void)buffer_attributes;
  return UNSUPPORTED("TRITONBACKEND_InputBufferAttributes");
}

/* ------------------------------------------------------------------ responses and outputs */

struct TRITONBACKEND_Output {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  void* buffer; /* allocated by OutputBuffer, freed with the response */
  uint64_t byte_size;
};

struct TRITONBACKEND_Response {
  rayton_queue* queue;
  uint64_t token;
  TRITONBACKEND_Output** outputs;
  uint32_t output_count;
};

struct TRITONBACKEND_ResponseFactory {
  rayton_queue* queue;
  uint64_t token;
};

static TRITONBACKEND_Response* response_new(rayton_queue* queue, uint64_t token) {
  TRITONBACKEND_Response* response = calloc(1, sizeof(*response));
  response->queue = queue;
  response->token = token;
  return response;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseNew(
    TRITONBACKEND_Response** response, TRITONBACKEND_Request* request) {
  REQUIRE(response, "response");
  REQUIRE(request, "request");
  *response = response_new(request->queue, request->token);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryNew(
    TRITONBACKEND_ResponseFactory** factory, TRITONBACKEND_Request* request) {
  REQUIRE(factory, "factory");
  REQUIRE(request, "request");
  *factory = calloc(1, sizeof(**factory));
  (*factory)->queue = request->queue;
  (*factory)->token = request->token;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryDelete(
    TRITONBACKEND_ResponseFactory* factory) {
  free(factory);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryIsCancelled(
    TRITONBACKEND_ResponseFactory* factory, bool* is_cancelled) {
  REQUIRE(factory, "factory");
  *is_cancelled = false;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseNewFromFactory(
    TRITONBACKEND_Response** response, TRITONBACKEND_ResponseFactory* factory) {
  REQUIRE(response, "response");
  REQUIRE(factory, "factory");
  *response = response_new(factory->queue, factory->token);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseFactorySendFlags(
    TRITONBACKEND_ResponseFactory* factory, const uint32_t send_flags) {
  REQUIRE(factory, "factory");
  rayton_event* event = calloc(1, sizeof(*event));
  event->kind = RAYTON_EVENT_RESPONSE;
  event->token = factory->token;
  event->flags = send_flags;
  queue_push(factory->queue, event);
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response) {
  if (response == NULL) return NULL;
  for (uint32_t i = 0; i < response->output_count; ++i) {
    TRITONBACKEND_Output* output = response->outputs[i];
    free(output->name);
    free(output->shape);
    free(output->buffer);
    free(output);
  }
  free(response->outputs);
  free(response);
  return NULL;
}

static TRITONSERVER_Error* response_parameter(const char* name) {
  (void)name;
  return UNSUPPORTED("response parameters (TRITONBACKEND_ResponseSet*Parameter)");
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetStringParameter(
    TRITONBACKEND_Response* response, const char* name, const char* value) {
  (void)response;
  (void)value;
  return response_parameter(name);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetIntParameter(
    TRITONBACKEND_Response* response, const char* name, const int64_t value) {
  (void)response;
  (void)value;
  return response_parameter(name);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetBoolParameter(
    TRITONBACKEND_Response* response, const char* name, const bool value) {
  (void)response;
  (void)value;
  return response_parameter(name);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSetDoubleParameter(
    TRITONBACKEND_Response* response, const char* name, const double value) {
  (void)response;
  (void)value;
  return response_parameter(name);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(
    TRITONBACKEND_Response* response, TRITONBACKEND_Output** output, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count) {
  REQUIRE(response, "response");
  REQUIRE(output, "output");
  REQUIRE(name, "name");
  if (dims_count > 0) REQUIRE(shape, "shape");
  for (uint32_t i = 0; i < response->output_count; ++i)
    if (strcmp(response->outputs[i]->name, name) == 0)
      return error_new(TRITONSERVER_ERROR_ALREADY_EXISTS,
                       "response already has an output named '%s'", name);
  TRITONBACKEND_Output* created = calloc(1, sizeof(*created));
  created->name = copy_text(name);
  created->datatype = datatype;
  created->dims_count = dims_count;
  created->shape = calloc(dims_count ? dims_count : 1, sizeof(int64_t));
  if (dims_count) memcpy(created->shape, shape, dims_count * sizeof(int64_t));
  response->outputs =
      realloc(response->outputs, (response->output_count + 1) * sizeof(*response->outputs));
  response->outputs[response->output_count++] = created;
  *output = created;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(
    TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  REQUIRE(output, "output");
  REQUIRE(buffer, "buffer");
  if (output->buffer != NULL)
    return error_new(TRITONSERVER_ERROR_ALREADY_EXISTS,
                     "output '%s' already has a buffer", output->name);
  output->buffer = malloc(buffer_byte_size ? buffer_byte_size : 1);
  if (output->buffer == NULL)
    return error_new(TRITONSERVER_ERROR_UNAVAILABLE, "cannot allocate %llu bytes for output '%s'",
                     (unsigned long long)buffer_byte_size, output->name);
  output->byte_size = buffer_byte_size;
  *buffer = output->buffer;
  /* Host memory whatever was asked: the backend must copy if it wanted GPU memory. */
  if (memory_type) *memory_type = TRITONSERVER_MEMORY_CPU;
  if (memory_type_id) *memory_type_id = 0;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_OutputBufferAttributes(
    TRITONBACKEND_Output* output, TRITONSERVER_BufferAttributes** buffer_attributes) {
  (void)output;
  (void)buffer_attributes;
  return UNSUPPORTED("TRITONBACKEND_OutputBufferAttributes");
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSend(
    TRITONBACKEND_Response* response, const uint32_t send_flags, TRITONSERVER_Error* error) {
  REQUIRE(response, "response");
  rayton_event* event = calloc(1, sizeof(*event));
  event->kind = RAYTON_EVENT_RESPONSE;
  event->token = response->token;
  event->flags = send_flags;
  event->response = response;
  /* The backend keeps its error (Triton's own backends delete it after sending): the
   * response carries a copy of its code and message. */
  event->error = error ? error_new(error->code, "%s", error->message) : NULL;
  queue_push(response->queue, event);
  return NULL;
}

/* ------------------------------------------------------------------ implicit state */

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateNew(
    TRITONBACKEND_State** state, TRITONBACKEND_Request* request, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count) {
  (void)state;
  (void)request;
  (void)name;
  (void)datatype;
  (void)shape;
  (void)dims_count;
  return UNSUPPORTED("implicit state (TRITONBACKEND_StateNew)");
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateUpdate(TRITONBACKEND_State* state) {
  (void)state;
  return UNSUPPORTED("implicit state (TRITONBACKEND_StateUpdate)");
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateBuffer(
    TRITONBACKEND_State* state, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  (void)state;
  (void)buffer;
  (void)buffer_byte_size;
  (void)memory_type;
  (void)memory_type_id;
  return UNSUPPORTED("implicit state (TRITONBACKEND_StateBuffer)");
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_StateBufferAttributes(
    TRITONBACKEND_State* state, TRITONSERVER_BufferAttributes** buffer_attributes) {
  (void)state;
  (void)buffer_attributes;
  return UNSUPPORTED("implicit state (TRITONBACKEND_StateBufferAttributes)");
}

/* ================================================================== rayton's side */

RAYTON_EXPORT void rayton_set_verbose_logging(int on) { verbose_logging = on; }

RAYTON_EXPORT rayton_queue* rayton_queue_new(void) {
  rayton_queue* queue = calloc(1, sizeof(*queue));
  pthread_mutex_init(&queue->lock, NULL);
  queue->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return queue;
}

RAYTON_EXPORT int rayton_queue_fd(rayton_queue* queue) { return queue->fd; }

/* Holds (+1) or lets go (-1) of the queue's wake-ups; letting go of the last hold with events
 * waiting wakes the reader, so none is missed. */
RAYTON_EXPORT void rayton_queue_hold(rayton_queue* queue, int delta) {
  pthread_mutex_lock(&queue->lock);
  queue->holds += delta;
  int wake = queue->holds == 0 && queue->head != NULL;
  pthread_mutex_unlock(&queue->lock);
  if (wake) queue_signal(queue);
}

/* Pops the oldest event into *out (its next pointer cleared); 0 when none waits. */
static int queue_pop(rayton_queue* queue, rayton_event* out) {
  uint64_t count;
  pthread_mutex_lock(&queue->lock);
  rayton_event* event = queue->head;
  if (event != NULL) {
    queue->head = event->next;
    if (queue->head == NULL) queue->tail = NULL;
  } else {
    while (read(queue->fd, &count, sizeof(count)) < 0 && errno == EINTR) {
    }
  }
  pthread_mutex_unlock(&queue->lock);
  if (event == NULL) return 0;
  *out = *event;
  out->next = NULL;
  free(event);
  return 1;
}

/* Pops up to `capacity` events into out[0..n) (one call for a whole batch's events); n. Fewer
 * than `capacity` means the queue is empty now. */
RAYTON_EXPORT uint32_t rayton_queue_pop_many(rayton_queue* queue, rayton_event* out,
                                             uint32_t capacity) {
  uint32_t count = 0;
  while (count < capacity && queue_pop(queue, &out[count])) ++count;
  return count;
}

RAYTON_EXPORT void rayton_queue_delete(rayton_queue* queue) {
  rayton_event event;
  while (queue_pop(queue, &event)) {
    TRITONBACKEND_ResponseDelete(event.response);
    TRITONSERVER_ErrorDelete(event.error);
  }
  close(queue->fd);
  pthread_mutex_destroy(&queue->lock);
  free(queue);
}

/* Loads libtriton_<name>.so from `path` and runs its TRITONBACKEND_Initialize. */
RAYTON_EXPORT TRITONBACKEND_Backend* rayton_backend_load(
    const char* path, const char* name, const char* config_json, const char* artifacts,
    TRITONSERVER_Error** error) {
  *error = NULL;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    *error = error_new(TRITONSERVER_ERROR_UNAVAILABLE, "unable to load backend library: %s",
                       dlerror());
    return NULL;
  }
  instance_execute_fn execute =
      (instance_execute_fn)dlsym(library, "TRITONBACKEND_ModelInstanceExecute");
  if (execute == NULL) {
    *error = error_new(TRITONSERVER_ERROR_UNAVAILABLE,
                       "backend '%s' (%s) does not export TRITONBACKEND_ModelInstanceExecute",
                       name, path);
    dlclose(library);
    return NULL;
  }
  TRITONBACKEND_Backend* backend = calloc(1, sizeof(*backend));
  backend->name = copy_text(name);
  backend->config_json = copy_text(config_json && *config_json ? config_json : "{}");
  backend->config_message = message_new(backend->config_json, strlen(backend->config_json));
  backend->artifacts = copy_text(artifacts);
  backend->library = library;
  backend->execute = execute;
  backend->finalize = (backend_init_fn)dlsym(library, "TRITONBACKEND_Finalize");
  backend->model_initialize = (model_init_fn)dlsym(library, "TRITONBACKEND_ModelInitialize");
  backend->model_finalize = (model_init_fn)dlsym(library, "TRITONBACKEND_ModelFinalize");
  backend->instance_initialize =
      (instance_init_fn)dlsym(library, "TRITONBACKEND_ModelInstanceInitialize");
  backend->instance_finalize =
      (instance_init_fn)dlsym(library, "TRITONBACKEND_ModelInstanceFinalize");
  backend_init_fn initialize = (backend_init_fn)dlsym(library, "TRITONBACKEND_Initialize");
  if (initialize != NULL) {
    TRITONSERVER_Error* failed = initialize(backend);
    if (failed != NULL) {
      *error = failed;
      free(backend->name);
      free(backend->config_json);
      TRITONSERVER_MessageDelete(backend->config_message);
      free(backend->artifacts);
      free(backend);
      dlclose(library);
      return NULL;
    }
  }
  return backend;
}

/* Runs TRITONBACKEND_Finalize and unloads the library; the backend's error, if any. */
RAYTON_EXPORT TRITONSERVER_Error* rayton_backend_unload(TRITONBACKEND_Backend* backend) {
  TRITONSERVER_Error* error = backend->finalize ? backend->finalize(backend) : NULL;
  dlclose(backend->library);
  free(backend->name);
  free(backend->config_json);
  TRITONSERVER_MessageDelete(backend->config_message);
  free(backend->artifacts);
  free(backend);
  return error;
}

RAYTON_EXPORT TRITONBACKEND_Model* rayton_model_new(
    TRITONBACKEND_Backend* backend, const char* name, uint64_t version, const char* repository,
    const char* config_json, int auto_complete, TRITONSERVER_Error** error) {
  TRITONBACKEND_Model* model = calloc(1, sizeof(*model));
  model->backend = backend;
  model->name = copy_text(name);
  model->version = version;
  model->repository = copy_text(repository);
  model->config_json = copy_text(config_json);
  model->auto_complete = auto_complete != 0;
  pthread_mutex_init(&model->config_lock, NULL);
  *error = backend->model_initialize ? backend->model_initialize(model) : NULL;
  if (*error != NULL) {
    free(model->name);
    free(model->repository);
    free(model->config_json);
    pthread_mutex_destroy(&model->config_lock);
    free(model);
    return NULL;
  }
  return model;
}

/* The model's config as JSON, with what TRITONBACKEND_ModelSetConfig changed; free() it. */
RAYTON_EXPORT char* rayton_model_config(TRITONBACKEND_Model* model) {
  pthread_mutex_lock(&model->config_lock);
  char* json = copy_text(model->config_json);
  pthread_mutex_unlock(&model->config_lock);
  return json;
}

RAYTON_EXPORT void rayton_free(void* pointer) { free(pointer); }

RAYTON_EXPORT TRITONSERVER_Error* rayton_model_delete(TRITONBACKEND_Model* model) {
  TRITONBACKEND_Backend* backend = model->backend;
  TRITONSERVER_Error* error = backend->model_finalize ? backend->model_finalize(model) : NULL;
  free(model->name);
  free(model->repository);
  free(model->config_json);
  pthread_mutex_destroy(&model->config_lock);
  free(model);
  return error;
}

RAYTON_EXPORT TRITONBACKEND_ModelInstance* rayton_instance_new(
    TRITONBACKEND_Model* model, const char* name, int kind, int32_t device_id,
    TRITONSERVER_Error** error) {
  TRITONBACKEND_ModelInstance* instance = calloc(1, sizeof(*instance));
  instance->model = model;
  instance->name = copy_text(name);
  instance->kind = (TRITONSERVER_InstanceGroupKind)kind;
  instance->device_id = device_id;
  pthread_mutex_init(&instance->stats_lock, NULL);
  instance_init_fn initialize = model->backend->instance_initialize;
  *error = initialize ? initialize(instance) : NULL;
  if (*error != NULL) {
    free(instance->name);
    pthread_mutex_destroy(&instance->stats_lock);
    free(instance);
    return NULL;
  }
  return instance;
}

RAYTON_EXPORT TRITONSERVER_Error* rayton_instance_delete(TRITONBACKEND_ModelInstance* instance) {
  instance_init_fn finalize = instance->model->backend->instance_finalize;
  TRITONSERVER_Error* error = finalize ? finalize(instance) : NULL;
  free(instance->name);
  free(instance->reports);
  pthread_mutex_destroy(&instance->stats_lock);
  free(instance);
  return error;
}

/* Moves up to `capacity` of the reports not yet taken into `out`, oldest first; how many. */
RAYTON_EXPORT uint32_t rayton_instance_take_reports(
    TRITONBACKEND_ModelInstance* instance, rayton_report* out, uint32_t capacity) {
  pthread_mutex_lock(&instance->stats_lock);
  uint32_t taken = instance->report_count < capacity ? instance->report_count : capacity;
  memcpy(out, instance->reports, taken * sizeof(*out));
  memmove(instance->reports, instance->reports + taken,
          (instance->report_count - taken) * sizeof(*out));
  instance->report_count -= taken;
  pthread_mutex_unlock(&instance->stats_lock);
  return taken;
}

/* Runs the backend's Execute on `requests`: an error means the backend took none of them. */
RAYTON_EXPORT TRITONSERVER_Error* rayton_instance_execute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count) {
  return instance->model->backend->execute(instance, requests, count);
}

RAYTON_EXPORT TRITONBACKEND_Request* rayton_request_new(
    rayton_queue* queue, uint64_t token, const char* id, uint64_t correlation_id,
    const char* correlation_id_string, uint32_t flags) {
  TRITONBACKEND_Request* request = calloc(1, sizeof(*request));
  request->queue = queue;
  request->token = token;
  request->id = copy_text(id);
  request->correlation_id = correlation_id;
  request->correlation_id_string = correlation_id_string ? copy_text(correlation_id_string) : NULL;
  request->flags = flags;
  return request;
}

/* Adds an input whose data stays at `buffer` (the caller keeps it alive until the release). */
RAYTON_EXPORT void rayton_request_add_input(
    TRITONBACKEND_Request* request, const char* name, int datatype, const int64_t* shape,
    uint32_t dims_count, const void* buffer, uint64_t byte_size) {
  request->inputs =
      realloc(request->inputs, (request->input_count + 1) * sizeof(*request->inputs));
  TRITONBACKEND_Input* input = &request->inputs[request->input_count++];
  input->name = copy_text(name);
  input->datatype = (TRITONSERVER_DataType)datatype;
  input->dims_count = dims_count;
  input->shape = calloc(dims_count ? dims_count : 1, sizeof(int64_t));
  if (dims_count) memcpy(input->shape, shape, dims_count * sizeof(int64_t));
  input->buffer = buffer;
  input->byte_size = byte_size;
}

RAYTON_EXPORT void rayton_request_add_output(TRITONBACKEND_Request* request, const char* name) {
  request->outputs =
      realloc(request->outputs, (request->output_count + 1) * sizeof(*request->outputs));
  request->outputs[request->output_count++] = copy_text(name);
}

static rayton_parameter* add_parameter(
    TRITONBACKEND_Request* request, const char* key, TRITONSERVER_ParameterType type) {
  request->parameters = realloc(
      request->parameters, (request->parameter_count + 1) * sizeof(*request->parameters));
  rayton_parameter* parameter = &request->parameters[request->parameter_count++];
  memset(parameter, 0, sizeof(*parameter));
  parameter->key = copy_text(key);
  parameter->type = type;
  return parameter;
}

RAYTON_EXPORT void rayton_request_add_string_parameter(
    TRITONBACKEND_Request* request, const char* key, const char* value) {
  add_parameter(request, key, TRITONSERVER_PARAMETER_STRING)->text = copy_text(value);
}

RAYTON_EXPORT void rayton_request_add_int_parameter(
    TRITONBACKEND_Request* request, const char* key, int64_t value) {
  add_parameter(request, key, TRITONSERVER_PARAMETER_INT)->integer = value;
}

RAYTON_EXPORT void rayton_request_add_bool_parameter(
    TRITONBACKEND_Request* request, const char* key, int value) {
  add_parameter(request, key, TRITONSERVER_PARAMETER_BOOL)->boolean = value != 0;
}

RAYTON_EXPORT void rayton_request_add_double_parameter(
    TRITONBACKEND_Request* request, const char* key, double value) {
  add_parameter(request, key, TRITONSERVER_PARAMETER_DOUBLE)->number = value;
}

/* Frees a request once the backend released it (or when Execute failed and never took it). */
RAYTON_EXPORT void rayton_request_delete(TRITONBACKEND_Request* request) {
  for (uint32_t i = 0; i < request->input_count; ++i) {
    free(request->inputs[i].name);
    free(request->inputs[i].shape);
  }
  for (uint32_t i = 0; i < request->output_count; ++i) free(request->outputs[i]);
  for (uint32_t i = 0; i < request->parameter_count; ++i) {
    free(request->parameters[i].key);
    free(request->parameters[i].text);
  }
  free(request->inputs);
  free(request->outputs);
  free(request->parameters);
  free(request->id);
  free(request->correlation_id_string);
  free(request);
}

/* What the reader sees of one output of a sent response; the pointers live as long as the
 * response. */
typedef struct {
  const char* name;
  int datatype;
  const int64_t* shape;
  uint32_t dims_count;
  const void* buffer;
  uint64_t byte_size;
} rayton_output_view;

/* Fills out[0..min(count, capacity)) with the response's outputs; their count. */
RAYTON_EXPORT uint32_t rayton_response_outputs(TRITONBACKEND_Response* response,
                                               rayton_output_view* out, uint32_t capacity) {
  for (uint32_t index = 0; index < response->output_count && index < capacity; ++index) {
    TRITONBACKEND_Output* output = response->outputs[index];
    out[index].name = output->name;
    out[index].datatype = (int)output->datatype;
    out[index].shape = output->shape;
    out[index].dims_count = output->dims_count;
    out[index].buffer = output->buffer;
    out[index].byte_size = output->buffer ? output->byte_size : 0;
  }
  return response->output_count;
}
