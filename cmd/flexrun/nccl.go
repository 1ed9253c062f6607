package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ncclPreload is the LD_PRELOAD export that makes every rank's NCCL calls
// go to flexlink's libnccl.so.2 in dir (default: build/nccl/lib of the
// checkout flexrun was built in, or lib/ beside flexrun's bin/), ahead of
// whatever the ranks' LD_PRELOAD already holds (existing). LD_PRELOAD, not
// LD_LIBRARY_PATH: PyTorch finds its wheel's NCCL through an RPATH, which
// LD_LIBRARY_PATH does not override.
func ncclPreload(dir, existing string) (string, error) {
	var dirs []string
	if dir != "" {
		dirs = []string{dir}
	} else if exe, err := os.Executable(); err == nil {
		bin := filepath.Dir(exe)
		dirs = []string{filepath.Join(bin, "..", "build", "nccl", "lib"), filepath.Join(bin, "..", "lib")}
	}
	for _, d := range dirs {
		lib, err := filepath.Abs(filepath.Join(d, "libnccl.so.2"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(lib); err == nil {
			if existing != "" {
				return "LD_PRELOAD=" + lib + ":" + existing, nil
			}
			return "LD_PRELOAD=" + lib, nil
		}
	}
	if len(dirs) == 0 {
		return "", errors.New("--nccl: cannot tell where flexrun is installed: give --nccl-lib DIR")
	}
	return "", fmt.Errorf("--nccl: no libnccl.so.2 in %v (build it with `make libnccl`, or give --nccl-lib DIR)", dirs)
}
