// server/request_mapping.h: the seam between the HTTP API and the sessions API: an OpenAI
// request as a request handle's options, and lorakv's typed errors as OpenAI's error
// objects with their HTTP status (one table).
#pragma once

#include <string>
#include <vector>

#include "lorakv/agents/request.h"
#include "lorakv/common/errors.h"
#include "lorakv/server/api/api_request.h"
#include "lorakv/server/server_options.h"

namespace lorakv::server {

// The models a server answers to: the base model and its adapters, by name.
struct ServedModels {
  std::string base;                   // the base model's id
  std::vector<std::string> adapters;  // each adapter's name: its model id
  bool has(const std::string& name) const;
};

// The handle options of one API request: its model as the adapter (empty for the base
// model), sampling, stop strings, log-probabilities, n, the server's sharing and limits.
// Throws ApiError 404 (model_not_found) for a model the server does not serve.
agents::RequestOptions to_request_options(const api::ApiRequest& request, const ServedModels& models,
                                          const ServerOptions& options);

// The API error of a lorakv::Error: its status (400, 404, 503, 500), type, param and code.
api::ApiError api_error_of(const Error& error);

}  // namespace lorakv::server
