// ApiError: a request the server refuses, as an HTTP status and an OpenAI error object. What a
// request says is refused with core/error.h's Error (kind, field, message), by the request parser
// and by Engine::submit alike; the server turns it into an ApiError here (api_error), never by
// reading its message. ApiError itself is for refusals of the HTTP exchange (key, route, method,
// body size, shutdown).
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dspark {

// The OpenAI error object {"error": {"message", "type", "param", "code"}}. Types and codes:
//   400 invalid_request_error    (code null, or e.g. "context_length_exceeded")
//   401 authentication_error     code "invalid_api_key"
//   404 not_found_error          code "model_not_found" or "not_found"
//   405 invalid_request_error    code "method_not_allowed"
//   413 invalid_request_error    code "request_too_large"
//   503 service_unavailable_error code "server_draining"
//   500 server_error             code "internal_error"
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}

  int status;
  std::string type;
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// A request field refused (kind InvalidRequest): answered 400 invalid_request_error naming
// `param` (empty: null).
Error bad_request(const std::string& message, const std::string& param = "");

// The answer to a refused request: InvalidRequest is 400 invalid_request_error (code null),
// ContextLengthExceeded the same with code "context_length_exceeded", NotFound 404
// not_found_error ("model_not_found" for the model), Unavailable 503 service_unavailable_error
// ("server_draining"). `param` is the field as the request spells it (empty: null).
ApiError api_error(const Error& e, const std::string& param);
inline ApiError api_error(const Error& e) { return api_error(e, e.param()); }

nlohmann::ordered_json error_json(const ApiError& e);
// The JSON body of the error (a message that quotes a client's bytes is still valid JSON).
std::string error_body(const ApiError& e);
// The error for a bare status (unknown route, oversized body, ...) that no handler described.
ApiError error_for_status(int status, const std::string& path);

}  // namespace dspark
