#include "server/errors.h"

namespace dspark {

Error bad_request(const std::string& message, const std::string& param) {
  return Error(message, ErrorKind::InvalidRequest, param);
}

ApiError api_error(const Error& e, const std::string& param) {
  switch (e.kind()) {
    case ErrorKind::ContextLengthExceeded:
      return ApiError(400, "invalid_request_error", e.what(), param, "context_length_exceeded");
    case ErrorKind::NotFound:
      return ApiError(404, "not_found_error", e.what(), param,
                      param == "model" ? "model_not_found" : "not_found");
    case ErrorKind::Unavailable:
      return ApiError(503, "service_unavailable_error", e.what(), param, "server_draining");
    case ErrorKind::InvalidRequest:
      break;
  }
  return ApiError(400, "invalid_request_error", e.what(), param);
}

nlohmann::ordered_json error_json(const ApiError& e) {
  nlohmann::ordered_json err = {
      {"message", e.what()},
      {"type", e.type},
      {"param", e.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param)},
      {"code", e.code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.code)}};
  return {{"error", std::move(err)}};
}

std::string error_body(const ApiError& e) {
  // replace: a message may quote a client's bytes; it must still be valid JSON.
  return error_json(e).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
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
    case 415:
      return ApiError(415, "invalid_request_error",
                      "unsupported Content-Encoding: send the body uncompressed", "",
                      "unsupported_media_type");
    case 431:
      return ApiError(431, "invalid_request_error", "request header fields too large", "",
                      "headers_too_large");
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
