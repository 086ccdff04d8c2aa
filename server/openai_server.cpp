// server/openai_server.cpp: (being written)
namespace lorakv::server {}
