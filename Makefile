# lorakv: the two commands. Each sets up a fresh machine (Debian packages, Python env with
# the pinned libtorch, the model), then builds and runs.
.PHONY: demo test build clean

demo:
	bash tools/demo.sh

test:
	bash tools/test.sh

build:
	bash tools/build.sh

clean:
	rm -rf build
