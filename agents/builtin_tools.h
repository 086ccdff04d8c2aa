// agents/builtin_tools.h: the agentic QA task's tools (tools/agentic_qa/README.md), writing
// exactly what the Python reference writes: `calculator` is generate_data.calc and `lookup`
// is run_episodes.py's knowledge-base lookup.
//
//   auto store = std::make_shared<DocumentStore>(DocumentStore::from_jsonl("assets/agentic_qa/kb_test.jsonl"));
//   ToolRegistry tools;
//   tools.add(calculator_tool());
//   tools.add(lookup_tool(store));
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "lorakv/agents/tools.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents {

inline constexpr const char* kCannotCalculate = "Error: cannot calculate.";
inline constexpr const char* kNoDocumentFound = "No document found.";

// Where Python's int() or str() raise ValueError inside calc (an operand "--5" or "1²", or a
// number over Python's 4300 digits): the Python runner stops there; calculate() throws
// this, with Python's message, and the registry turns it into the tool's "Error: ..." text.
class CalculationError : public Error {
 public:
  explicit CalculationError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kCalculation, "calculation error", message, std::move(context)) {}
};

// A document store that cannot be built: a file that cannot be read, a line that is not a
// JSON object with string "name" and "document", a document without a name. Names the file
// and the line.
class DocumentStoreError : public Error {
 public:
  explicit DocumentStoreError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kDocumentStore, "document store error", message, std::move(context)) {}
};

// `Calculate[a op b]`: the whitespace-separated "a op b" with a and b integers (any length:
// Python's ints) and op one of + - *, as the integer result's text; anything else gives
// kCannotCalculate. As in the Python, op is accepted when it is a substring of "+-*" ("+-"
// and "-*" multiply), and an operand is digits after any number of leading '-'.
std::string calculate(const std::string& expression);

// Documents by entity name. A name given twice keeps the later document (the Python reads
// the knowledge base into a dict).
class DocumentStore {
 public:
  // Each document keyed by its text before the first ':', stripped ("Dok Gramein: born
  // 1914, ..." is Dok Gramein's), which is how the task's documents are written. Throws
  // DocumentStoreError for a document without ':' or with an empty name.
  static DocumentStore from_documents(const std::vector<std::string>& documents);
  // The kb_*.jsonl format: one JSON object per line with string members "name" and
  // "document" (blank lines skipped), keyed by "name" as run_episodes.py does.
  static DocumentStore from_jsonl(const std::string& path);

  void add(const std::string& name, const std::string& document);
  const std::string* find(const std::string& name) const;  // nullptr when absent
  size_t size() const { return documents_.size(); }

 private:
  std::unordered_map<std::string, std::string> documents_;
};

// `Lookup[name]`: the document about the stripped name exactly as stored, else kNoDocumentFound.
std::string lookup(const DocumentStore& store, const std::string& name);

// The two as registry tools (no deadline). The lookup tool shares the store.
Tool calculator_tool(const std::string& name = "calculator");
Tool lookup_tool(std::shared_ptr<const DocumentStore> store, const std::string& name = "lookup");

}  // namespace lorakv::agents
