//go:build !mpi

package main

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/rank"
)

func openBackend(ctx context.Context, name string) (backend, error) {
	if name != "flexlink" {
		return nil, fmt.Errorf("--backend %s: this build has only flexlink (build with -tags mpi for mpi)", name)
	}
	c, err := rank.Init(ctx)
	if err != nil {
		return nil, err
	}
	return flexBackend{c}, nil
}
