/* The overhead benchmark's backend: OUTPUT0 = INPUT0 (any datatype and shape), one response
 * per request, statistics reported: the least work a backend can do, so what a request costs
 * is the server's path around it. */
#include <string.h>
#include <time.h>

#include "triton_abi.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static TRITONSERVER_Error* copy_input(TRITONBACKEND_Request* request,
                                      TRITONBACKEND_Response* response, uint64_t* rows) {
  TRITONBACKEND_Input* input;
  TRITONSERVER_Error* error = TRITONBACKEND_RequestInput(request, "INPUT0", &input);
  if (error) return error;
  TRITONSERVER_DataType datatype;
  const int64_t* shape;
  uint32_t dims, buffer_count;
  uint64_t byte_size;
  error = TRITONBACKEND_InputProperties(input, NULL, &datatype, &shape, &dims, &byte_size,
                                        &buffer_count);
  if (error) return error;
  TRITONBACKEND_Output* output;
  error = TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", datatype, shape, dims);
  if (error) return error;
  void* out;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  error = TRITONBACKEND_OutputBuffer(output, &out, byte_size, &memory_type, &memory_type_id);
  if (error) return error;
  uint64_t offset = 0;
  for (uint32_t index = 0; index < buffer_count; ++index) {
    const void* buffer;
    uint64_t size;
    error = TRITONBACKEND_InputBuffer(input, index, &buffer, &size, &memory_type,
                                      &memory_type_id);
    if (error) return error;
    memcpy((char*)out + offset, buffer, size);
    offset += size;
  }
  *rows += dims > 0 ? (uint64_t)shape[0] : 1;
  return NULL;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count) {
  uint64_t start = now_ns();
  uint64_t rows = 0;
  for (uint32_t r = 0; r < request_count; ++r) {
    TRITONBACKEND_Request* request = requests[r];
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* error = TRITONBACKEND_ResponseNew(&response, request);
    if (error == NULL) {
      error = copy_input(request, response, &rows);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error);
    }
    uint64_t done = now_ns();
    TRITONBACKEND_ModelInstanceReportStatistics(instance, request, error == NULL, start, start,
                                                done, done);
    TRITONSERVER_ErrorDelete(error);
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  uint64_t end = now_ns();
  if (rows > 0)
    TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, rows, start, start, end, end);
  return NULL;
}
