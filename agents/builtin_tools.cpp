// agents/builtin_tools.cpp: Lookup, and the two built-ins as registry tools.
#include "lorakv/agents/builtin_tools.h"

#include "lorakv/agents/python_text.h"

namespace lorakv::agents {

// kb.get(act[1].strip(), "No document found.")
std::string lookup(const DocumentStore& store, const std::string& name) {
  const std::string* document = store.find(python::strip(name));
  return document != nullptr ? *document : kNoDocumentFound;
}

Tool calculator_tool(const std::string& name) {
  return {name, "the integer result of 'a op b', op one of + - * (Calculate[1940 - 1914])", calculate, {}};
}

Tool lookup_tool(std::shared_ptr<const DocumentStore> store, const std::string& name) {
  if (!store) throw ToolError("the lookup tool needs a document store", {"", name});
  // The store is captured by shared_ptr: it lives as long as any call of the tool.
  auto function = [store](const std::string& argument) { return lookup(*store, argument); };
  return {name, "the document about a person or a city, by name (Lookup[Dok Gramein])", function, {}};
}

}  // namespace lorakv::agents
