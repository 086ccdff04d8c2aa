// server/api/api_request.cpp: parse_request (to be written).
#include "lorakv/server/api/api_request.h"

namespace lorakv::server::api {

ApiRequest parse_request(std::string_view, Endpoint, const ParseLimits&) { throw bad_request("not implemented yet"); }

}  // namespace lorakv::server::api
