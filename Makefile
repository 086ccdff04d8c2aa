# lorakv: the two commands. Each sets up a fresh machine (Debian packages, Python env with
# the pinned libtorch, the model), then builds and runs.
.PHONY: demo test build bench tsan fuzz clean

demo:
	bash tools/demo.sh

test:
	bash tools/test.sh

build:
	bash tools/build.sh

# A benchmark (outside `make test`): LORAKV_BENCH=attention (default), generate, quant or memory;
# LORAKV_BENCH_ARGS passes options,
# e.g. --quick). Run it on an idle machine.
bench:
	bash tools/bench.sh

# ThreadSanitizer build of the common, formats and cache tests, the adapter registry's, the
# engine thread's, and the concurrent sessions and request handles on the real engine
# (outside `make test`; its own build folder build-tsan/).
tsan:
	bash tools/tsan.sh

# libFuzzer targets for the file and config readers and the OpenAI request parser (gguf,
# safetensors, json, peft_config, session_config, openai_request; clang, ASan + UBSan;
# outside `make test`). LORAKV_FUZZ_SECONDS sets each target's run time.
fuzz:
	bash tools/fuzz.sh

clean:
	rm -rf build build-tsan build-fuzz
