// tests/install/consumer/main.cpp: loads a model through the installed lorakv and prints the
// library version and the greedy next token of a prompt.
//   lorakv_consumer <model.gguf> <prompt>
// prints "lorakv <version>" and "token\t<id>\t<text>".
#include <iostream>

#include "lorakv/common/errors.h"
#include "lorakv/common/version.h"
#include "lorakv/runtime/generator.h"
#include "lorakv/runtime/loaded_model.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: lorakv_consumer <model.gguf> <prompt>\n";
    return 2;
  }
  try {
    lorakv::runtime::LoadedModel loaded = lorakv::runtime::load_model(argv[1]);
    lorakv::runtime::GenerationRequest request;  // greedy by default
    request.prompt = loaded.tokenizer->encode(argv[2]);
    request.max_new_tokens = 1;
    const std::vector<lorakv::runtime::GenerationOutput> out =
        lorakv::runtime::generate(*loaded.model, loaded.tokenizer.get(), {request});
    const int32_t token = out.at(0).tokens.at(0);
    std::cout << "lorakv " << lorakv::version() << "\n"
              << "token\t" << token << "\t" << loaded.tokenizer->token_text(token) << "\n";
    return 0;
  } catch (const lorakv::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
