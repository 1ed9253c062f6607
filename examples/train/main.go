// Command train is data-parallel training of a logistic-regression model on
// a seeded synthetic dataset: every rank computes the gradient of its shard
// of each batch, the gradients (and the loss) are allreduced, and every rank
// applies the same update. It prints the loss per epoch, then checks that
// every rank holds identical weights and that they equal single-process
// training on the full batch.
//
//	flexrun -np 4 ./train -epochs 10
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

func main() {
	epochs := flag.Int("epochs", 10, "passes over the dataset")
	samples := flag.Int("samples", 4096, "dataset size")
	features := flag.Int("features", 32, "features per sample")
	batchSize := flag.Int("batch", 256, "global batch size")
	lr := flag.Float64("lr", 0.5, "learning rate")
	seed := flag.Int64("seed", 1, "dataset seed")
	check := flag.Bool("check", true, "compare with single-process training")
	flag.Parse()
	if err := run(*epochs, *samples, *features, *batchSize, *lr, *seed, *check); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(rank.ExitCode(err))
	}
}

func run(epochs, samples, features, batchSize int, lr float64, seed int64, check bool) error {
	ctx := context.Background()
	comm, err := rank.Init(ctx)
	if err != nil {
		return err
	}
	defer comm.Close()
	me, n := comm.Rank(), comm.Size()
	data := makeDataset(seed, samples, features)
	w := make(model, features+1)
	// buf holds the gradient and, in its last slot, the loss: one allreduce
	// per step carries both.
	buf := make([]float64, features+2)
	steps := (samples + batchSize - 1) / batchSize
	for e := 0; e < epochs; e++ {
		epochLoss := 0.0
		for b := 0; b < steps; b++ {
			clear(buf)
			buf[features+1] = w.gradSum(data, batch(b, batchSize, samples, me, n), buf[:features+1])
			if err := comm.AllReduce(ctx, rank.Of(buf), rank.Of(buf), dtype.Sum); err != nil {
				return fmt.Errorf("epoch %d step %d: %w", e, b, err)
			}
			size := float64(min((b+1)*batchSize, samples) - b*batchSize)
			for j := range w {
				w[j] -= lr * buf[j] / size
			}
			epochLoss += buf[features+1]
		}
		if me == 0 {
			fmt.Printf("epoch %2d  loss %.6f\n", e+1, epochLoss/float64(samples))
		}
	}
	// Identical weights on every rank: the element-wise min and max over
	// ranks must both equal this rank's weights, bit for bit.
	lo, hi := append([]float64(nil), w...), append([]float64(nil), w...)
	if err := comm.AllReduce(ctx, rank.Of(lo), rank.Of(lo), dtype.Min); err != nil {
		return err
	}
	if err := comm.AllReduce(ctx, rank.Of(hi), rank.Of(hi), dtype.Max); err != nil {
		return err
	}
	for j := range w {
		if lo[j] != w[j] || hi[j] != w[j] {
			return fmt.Errorf("rank %d: weight %d differs across ranks: min %v max %v mine %v", me, j, lo[j], hi[j], w[j])
		}
	}
	if me == 0 {
		fmt.Printf("weights identical on all %d ranks\n", n)
	}
	if !check {
		return nil
	}
	ref := serial(data, epochs, samples, batchSize, lr)
	worst := 0.0
	for j := range w {
		worst = math.Max(worst, math.Abs(w[j]-ref[j])/math.Max(1, math.Abs(ref[j])))
	}
	if worst > 1e-9 {
		return fmt.Errorf("rank %d: weights differ from single-process training by %.3g (relative)", me, worst)
	}
	if me == 0 {
		fmt.Printf("matches single-process training (max relative difference %.2g)\n", worst)
	}
	return comm.Barrier(ctx)
}

// serial is the single-process reference: the same batches, full-batch
// gradients, no communication.
func serial(data dataset, epochs, samples, batchSize int, lr float64) model {
	w := make(model, data.features+1)
	g := make([]float64, data.features+1)
	steps := (samples + batchSize - 1) / batchSize
	for e := 0; e < epochs; e++ {
		for b := 0; b < steps; b++ {
			clear(g)
			w.gradSum(data, batch(b, batchSize, samples, 0, 1), g)
			size := float64(min((b+1)*batchSize, samples) - b*batchSize)
			for j := range w {
				w[j] -= lr * g[j] / size
			}
		}
	}
	return w
}
