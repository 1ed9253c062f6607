package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/internal/errs"
)

// Loss is one rank lost from a job whose store keeps going after a loss
// (ServerConfig.KeepOnLoss, NewInProcKeepOnLoss): the store publishes the
// k-th loss of the job under LossKey(k), so every rank can learn of each
// loss in order with Get (NextLoss does that) while the store serves the
// survivors on. Without KeepOnLoss a loss fails the whole store instead,
// and no record is written.
type Loss struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	Text string `json:"text"` // names the rank, its host and the cause
}

// Err is the loss as an error wrapping errs.ErrPeerLost.
func (l Loss) Err() error { return newWireError(classPeerLost, l.Text) }

// lossPrefix starts the keys of loss records; ranks may not put keys
// under it.
const lossPrefix = "bootstrap/lost/"

// LossKey is the key of the job's k-th loss record (k from 0).
func LossKey(k int) string { return lossPrefix + strconv.Itoa(k) }

// NextLoss waits for the job's k-th loss (k from 0) and returns it. It
// fails when ctx ends or the store does (closed, aborted, or, without
// KeepOnLoss, a lost rank).
func NextLoss(ctx context.Context, s Store, k int) (Loss, error) {
	b, err := s.Get(ctx, LossKey(k))
	if err != nil {
		return Loss{}, err
	}
	var l Loss
	if err := json.Unmarshal(b, &l); err != nil {
		return Loss{}, fmt.Errorf("bootstrap: loss record %d: %w", k, errMalformed)
	}
	return l, nil
}

// reservedKey refuses a rank's put under the keys the store writes.
func reservedKey(key string) error {
	if strings.HasPrefix(key, waitingPrefix) {
		return fmt.Errorf("key %q is reserved for the store's answers: %w", key, errs.ErrNotSupported)
	}
	if strings.HasPrefix(key, lossPrefix) {
		return fmt.Errorf("key %q is reserved for the store's loss records: %w", key, errs.ErrNotSupported)
	}
	return nil
}
