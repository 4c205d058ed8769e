#include "server/errors.h"

#include <httplib.h>

namespace dspark {

ApiError bad_request(const std::string& message, const std::string& param,
                     const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

nlohmann::ordered_json error_json(const ApiError& e) {
  nlohmann::ordered_json err = {
      {"message", e.what()},
      {"type", e.type},
      {"param", e.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param)},
      {"code", e.code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.code)}};
  return {{"error", std::move(err)}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  // replace: a message may quote a client's bytes; it must still be valid JSON.
  res.set_content(
      error_json(e).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
      "application/json");
}

ApiError error_for_status(int status, const std::string& path) {
  switch (status) {
    case 404:
      return ApiError(404, "not_found_error", "no route " + path, "", "not_found");
    case 405:
      return ApiError(405, "invalid_request_error", "method not allowed for " + path, "",
                      "method_not_allowed");
    case 413:
      return ApiError(413, "invalid_request_error", "request body too large", "",
                      "request_too_large");
    case 414:
      return ApiError(414, "invalid_request_error", "request URI too long", "", "uri_too_long");
    case 416:
      return ApiError(416, "invalid_request_error", "bad Range header", "", "bad_range");
    case 503:
      return ApiError(503, "service_unavailable_error", "the server is shutting down", "",
                      "server_draining");
    default:
      if (status >= 500)
        return ApiError(status, "server_error", "internal server error", "", "internal_error");
      return ApiError(status, "invalid_request_error",
                      "the request could not be read (HTTP " + std::to_string(status) + ")");
  }
}

}  // namespace dspark
