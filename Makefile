# flexlink — see README.md
GO       ?= go
BIN      := bin
GOFLAGS  ?=
TESTTIME ?= 18m

.PHONY: all build demo test vet bench bench-mpi clean gpu-build libnccl

all: build

build:
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/... ./examples/...

# The main job on this machine: data-parallel training on 4 local ranks.
demo: build
	$(BIN)/flexrun -np 4 --oversubscribe --tag-output $(BIN)/train

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every test, then the calls into C libraries once more without cgo (their
# purego path, internal/ccall/call_purego.go). FLEXLINK_REQUIRE_SYSTEM=1 (set by .ci/run) turns skips for
# missing system components into failures.
test: vet
	$(GO) test -timeout $(TESTTIME) -count=1 ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./internal/ccall ./gpu/internal/cu ./fabric/net/ucx/internal/ucp

# Host benchmarks beside the OpenMPI anchor (figures for docs/PERF.md).
bench: build
	scripts/bench-host.sh

# The same, named for the MPI side by side (needs libopenmpi-dev).
bench-mpi: bench

clean:
	rm -rf $(BIN)

# flexlink's NCCL-compatible C library and header (docs/NCCL-API.md):
# build/nccl/lib/libnccl.so.2 exporting only nccl*/pnccl*, build/nccl/include/nccl.h
# (and nccl_device.h, which only stops a build that needs NCCL's device API).
# -tags nonvml: the library does not link go-nvml (fabric/topo's NVML
# detection), whose unresolved nvml* symbols would break every program
# linked against it; it finds its GPU through the CUDA driver instead.
NCCL_DIR ?= build/nccl
libnccl:
	mkdir -p $(NCCL_DIR)/lib $(NCCL_DIR)/include
	cp include/nccl.h include/nccl_device.h $(NCCL_DIR)/include/
	$(GO) build $(GOFLAGS) -tags nonvml -buildmode=c-shared \
	  -ldflags "-extldflags '-Wl,-soname,libnccl.so.2 -Wl,--version-script=$(CURDIR)/cmd/libnccl/exports.map'" \
	  -o $(NCCL_DIR)/lib/libnccl.so.2 ./cmd/libnccl
	rm -f $(NCCL_DIR)/lib/libnccl.so.h
	ln -sf libnccl.so.2 $(NCCL_DIR)/lib/libnccl.so
