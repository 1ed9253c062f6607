package bootstrap

// Event is something the server saw that its owner (the launcher) may use
// to name the cause of a failed job: who joined, who left, who was lost or
// refused, what the ranks put (communicators publish why they ended under
// keys of their own), and the job's failure. The store stays a mover of
// opaque bytes: it says what happened, not what it means.
type Event struct {
	Kind EventKind
	// Rank the event is about: the rank that joined, left, was lost,
	// was refused (the rank its hello claimed; -1 when there was no
	// hello), put a key, or aborted the job (-1: the launcher or the
	// server itself).
	Rank int
	Host string // the rank's host, as it named itself ("" when unknown)
	// Text says how a rank was lost or why a connection was refused;
	// for EventFailed the failure as ranks see it (Err's text).
	Text  string
	Err   error  // EventFailed: the error every rank's calls fail with
	Key   string // EventPut
	Value []byte // EventPut: the bytes put (the caller must not keep or change them)
	// Dup (EventPut): the key was set already; with other bytes the put
	// was refused (keys are write-once).
	Dup bool
}

// EventKind says what an Event is about.
type EventKind int

// The kinds of Event.
const (
	EventJoined  EventKind = iota + 1 // Rank joined (proved the job secret)
	EventLeft                         // Rank said goodbye (closed its store)
	EventLost                         // Rank's connection ended before goodbye, or it fell silent
	EventRefused                      // a connection was refused during the handshake
	EventFailed                       // the job failed (first failure only)
	EventPut                          // Rank put Key (told even after the job failed, when it is not kept)
)

func (k EventKind) String() string {
	switch k {
	case EventJoined:
		return "joined"
	case EventLeft:
		return "left"
	case EventLost:
		return "lost"
	case EventRefused:
		return "refused"
	case EventFailed:
		return "failed"
	case EventPut:
		return "put"
	}
	return "unknown"
}

// emit hands ev to the owner's hook, if any. Hooks are called from the
// server's goroutines, some under the engine's lock: they must not block
// and must not call back into the server.
func (e *engine) emit(ev Event) {
	if e.onEvent != nil {
		e.onEvent(ev)
	}
}
