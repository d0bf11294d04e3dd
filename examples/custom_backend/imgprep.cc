// The article's custom pre-processing backend, written in C++ against the backend API:
// `backend: "imgprep"` in a model's config.pbtxt.
//
//   IMAGE   UINT8 [batch, height, width, 3]  an RGB image of any size (HWC, as PIL gives it)
//   OUTPUT  FP32  [batch, 3, H, W]           resized (bilinear, half-pixel centres), scaled
//                                            to [0, 1], normalised with ImageNet's mean/std
//
// H and W are the output's dims in the model's config. Each request is answered on its own
// (images of different sizes cannot share a tensor); a bad image fails only its request.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "triton_abi.h"

namespace {

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

struct ModelState {
  int64_t height;
  int64_t width;
};

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TRITONSERVER_Error* InvalidArg(const std::string& message) {
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, ("imgprep: " + message).c_str());
}

// The first output's dims in the config JSON: [3, H, W] (numbers, or strings of digits).
bool OutputSize(const std::string& json, int64_t* height, int64_t* width) {
  size_t output = json.find("\"output\"");
  size_t dims = json.find("\"dims\"", output == std::string::npos ? 0 : output);
  size_t open = json.find('[', dims == std::string::npos ? json.size() : dims);
  size_t close = json.find(']', open == std::string::npos ? json.size() : open);
  if (output == std::string::npos || close == std::string::npos) return false;
  std::vector<int64_t> values;
  const char* cursor = json.c_str() + open + 1;
  const char* end = json.c_str() + close;
  while (cursor < end) {
    if (*cursor == '-' || (*cursor >= '0' && *cursor <= '9')) {
      char* next;
      values.push_back(std::strtoll(cursor, &next, 10));
      cursor = next;
    } else {
      ++cursor;
    }
  }
  if (values.size() != 3 || values[0] != 3 || values[1] <= 0 || values[2] <= 0) return false;
  *height = values[1];
  *width = values[2];
  return true;
}

// One source coordinate's neighbours and weight (half-pixel centres, clamped at the edges).
struct Tap {
  int64_t low, high;
  float weight;
};

std::vector<Tap> Taps(int64_t source, int64_t target) {
  std::vector<Tap> taps(target);
  const float scale = static_cast<float>(source) / static_cast<float>(target);
  for (int64_t i = 0; i < target; ++i) {
    float position = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    position = std::clamp(position, 0.0f, static_cast<float>(source - 1));
    const int64_t low = static_cast<int64_t>(std::floor(position));
    taps[i] = {low, std::min(low + 1, source - 1), position - static_cast<float>(low)};
  }
  return taps;
}

void Preprocess(const uint8_t* image, int64_t height, int64_t width, int64_t out_height,
                int64_t out_width, float* out) {
  const std::vector<Tap> rows = Taps(height, out_height);
  const std::vector<Tap> columns = Taps(width, out_width);
  const int64_t plane = out_height * out_width;
  for (int64_t y = 0; y < out_height; ++y) {
    const uint8_t* top = image + rows[y].low * width * 3;
    const uint8_t* bottom = image + rows[y].high * width * 3;
    for (int64_t x = 0; x < out_width; ++x) {
      const Tap& c = columns[x];
      for (int channel = 0; channel < 3; ++channel) {
        const float upper = top[c.low * 3 + channel] +
                            (top[c.high * 3 + channel] - top[c.low * 3 + channel]) * c.weight;
        const float lower = bottom[c.low * 3 + channel] +
                            (bottom[c.high * 3 + channel] - bottom[c.low * 3 + channel]) *
                                c.weight;
        const float value = (upper + (lower - upper) * rows[y].weight) / 255.0f;
        out[channel * plane + y * out_width + x] = (value - kMean[channel]) / kStd[channel];
      }
    }
  }
}

// The request's IMAGE in one piece: its own memory when it arrived in one buffer.
TRITONSERVER_Error* ReadImage(TRITONBACKEND_Request* request, std::vector<int64_t>* shape,
                              const uint8_t** data, std::vector<uint8_t>* gathered) {
  TRITONBACKEND_Input* input;
  TRITONSERVER_Error* error = TRITONBACKEND_RequestInput(request, "IMAGE", &input);
  if (error) return error;
  TRITONSERVER_DataType datatype;
  const int64_t* dims;
  uint32_t dims_count, buffer_count;
  uint64_t byte_size;
  error = TRITONBACKEND_InputProperties(input, nullptr, &datatype, &dims, &dims_count,
                                        &byte_size, &buffer_count);
  if (error) return error;
  shape->assign(dims, dims + dims_count);
  if (datatype != TRITONSERVER_TYPE_UINT8 || dims_count != 4 || dims[3] != 3 || dims[1] <= 0 ||
      dims[2] <= 0)
    return InvalidArg("IMAGE must be UINT8 [batch, height, width, 3]");
  gathered->clear();
  for (uint32_t index = 0; index < buffer_count; ++index) {
    const void* buffer;
    uint64_t size;
    TRITONSERVER_MemoryType memory_type;
    int64_t memory_type_id;
    error = TRITONBACKEND_InputBuffer(input, index, &buffer, &size, &memory_type,
                                      &memory_type_id);
    if (error) return error;
    if (buffer_count == 1) {
      *data = static_cast<const uint8_t*>(buffer);
      return nullptr;
    }
    const uint8_t* bytes = static_cast<const uint8_t*>(buffer);
    gathered->insert(gathered->end(), bytes, bytes + size);
  }
  *data = gathered->data();
  return nullptr;
}

TRITONSERVER_Error* Answer(const ModelState& state, TRITONBACKEND_Request* request,
                           TRITONBACKEND_Response* response, uint64_t* rows) {
  std::vector<int64_t> shape;
  const uint8_t* image = nullptr;
  std::vector<uint8_t> gathered;
  TRITONSERVER_Error* error = ReadImage(request, &shape, &image, &gathered);
  if (error) return error;
  const int64_t out_shape[4] = {shape[0], 3, state.height, state.width};
  TRITONBACKEND_Output* output;
  error = TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT", TRITONSERVER_TYPE_FP32,
                                       out_shape, 4);
  if (error) return error;
  const uint64_t image_pixels = static_cast<uint64_t>(shape[1] * shape[2] * 3);
  const uint64_t out_values = static_cast<uint64_t>(3 * state.height * state.width);
  void* buffer;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  error = TRITONBACKEND_OutputBuffer(output, &buffer, shape[0] * out_values * sizeof(float),
                                     &memory_type, &memory_type_id);
  if (error) return error;
  float* out = static_cast<float*>(buffer);
  for (int64_t row = 0; row < shape[0]; ++row)
    Preprocess(image + row * image_pixels, shape[1], shape[2], state.height, state.width,
               out + row * out_values);
  *rows += static_cast<uint64_t>(shape[0]);
  return nullptr;
}

}  // namespace

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* config;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelConfig(model, 1, &config);
  if (error) return error;
  const char* json;
  size_t size;
  error = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  std::string text = error ? std::string() : std::string(json, size);
  TRITONSERVER_MessageDelete(config);
  if (error) return error;
  auto* state = new ModelState{};
  if (!OutputSize(text, &state->height, &state->width)) {
    delete state;
    return InvalidArg("the config's output must have dims [3, height, width]");
  }
  return TRITONBACKEND_ModelSetState(model, state);
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelState(model, &state);
  if (error) return error;
  delete static_cast<ModelState*>(state);
  return nullptr;
}

RAYTON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count) {
  TRITONBACKEND_Model* model;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceModel(instance, &model);
  if (error) return error;
  void* state;
  error = TRITONBACKEND_ModelState(model, &state);
  if (error) return error;
  const uint64_t start = NowNs();
  uint64_t rows = 0;
  for (uint32_t index = 0; index < request_count; ++index) {
    TRITONBACKEND_Request* request = requests[index];
    const uint64_t request_start = NowNs();
    TRITONBACKEND_Response* response;
    error = TRITONBACKEND_ResponseNew(&response, request);
    if (error == nullptr) {
      error = Answer(*static_cast<ModelState*>(state), request, response, &rows);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error);
    }
    const uint64_t request_end = NowNs();
    TRITONBACKEND_ModelInstanceReportStatistics(instance, request, error == nullptr,
                                                request_start, request_start, request_end,
                                                request_end);
    if (error) TRITONSERVER_ErrorDelete(error);
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  const uint64_t end = NowNs();
  if (rows > 0)
    TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, rows, start, start, end, end);
  return nullptr;
}
