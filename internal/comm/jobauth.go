package comm

// JobAuth returns the job's secret and id: what every connection of the
// job proves it holds (internal/auth.Proof), for planes that open their
// own listeners (the GPU plane's net part). The secret is shared: do not
// modify it.
func (c *Comm) JobAuth() (secret []byte, jobID string) { return c.world.secret, c.world.jobID }
