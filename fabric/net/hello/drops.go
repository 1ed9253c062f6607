package hello

import "github.com/flexlink/flexlink/internal/auth"

// Drops is auth.Drops: the rate-limited WARN of a listener's dropped
// connections, in internal/auth so that listeners below fabric/net (shm,
// bootstrap) share it.
type Drops = auth.Drops

// DefaultEvery is how often Drops warns at most.
const DefaultEvery = auth.DefaultEvery
