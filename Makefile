# Shortcuts for the scripts in tools/ (README.md uses the scripts, which need nothing installed).
.PHONY: build demo test asan clean
build:
	tools/build
demo:
	tools/demo
test:
	tools/test
asan:
	tools/test --asan
clean:
	rm -rf build build-asan
