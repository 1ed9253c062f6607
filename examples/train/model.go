package main

import (
	"math"
	"math/rand"
)

// dataset is a seeded synthetic binary-classification problem: features
// drawn from a normal distribution, labels from a hidden linear rule with
// label noise. Every rank builds the same dataset from the same seed.
type dataset struct {
	x        [][]float64
	y        []float64
	features int
}

func makeDataset(seed int64, samples, features int) dataset {
	rng := rand.New(rand.NewSource(seed))
	truth := make([]float64, features+1)
	for i := range truth {
		truth[i] = rng.NormFloat64()
	}
	d := dataset{x: make([][]float64, samples), y: make([]float64, samples), features: features}
	for s := range d.x {
		row := make([]float64, features)
		z := truth[features]
		for j := range row {
			row[j] = rng.NormFloat64()
			z += truth[j] * row[j]
		}
		d.x[s] = row
		if z+0.5*rng.NormFloat64() > 0 {
			d.y[s] = 1
		}
	}
	return d
}

// model is logistic regression: features weights and a bias (last entry).
type model []float64

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

func (m model) predict(x []float64) float64 {
	z := m[len(m)-1]
	for j, v := range x {
		z += m[j] * v
	}
	return sigmoid(z)
}

// gradSum adds the log-loss gradient of samples idx into g (not divided by
// the batch size, so shards add up to the full-batch gradient) and returns
// the summed loss.
func (m model) gradSum(d dataset, idx []int, g []float64) float64 {
	loss := 0.0
	for _, s := range idx {
		p := m.predict(d.x[s])
		e := p - d.y[s]
		for j, v := range d.x[s] {
			g[j] += e * v
		}
		g[len(g)-1] += e
		p = math.Min(math.Max(p, 1e-12), 1-1e-12)
		loss -= d.y[s]*math.Log(p) + (1-d.y[s])*math.Log(1-p)
	}
	return loss
}

// batch returns the sample indices of global batch b that belong to shard r
// of n (every n-th sample), so the union over ranks is the whole batch.
func batch(b, batchSize, samples, r, n int) []int {
	var idx []int
	for s := b * batchSize; s < min((b+1)*batchSize, samples); s++ {
		if s%n == r {
			idx = append(idx, s)
		}
	}
	return idx
}
