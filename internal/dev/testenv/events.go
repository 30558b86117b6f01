package testenv

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Event is one event a controller emitted.
type Event struct {
	Type, Reason, Message string
}

func (e Event) String() string { return e.Type + " " + e.Reason + ": " + e.Message }

// Events is an events.EventRecorder keeping every event, for tests that
// assert on a controller's events.
type Events struct {
	mu   sync.Mutex
	list []Event
}

var _ events.EventRecorder = (*Events)(nil)

func (e *Events) Eventf(_ runtime.Object, _ runtime.Object, typ, reason, _, note string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, Event{Type: typ, Reason: reason, Message: fmt.Sprintf(note, args...)})
}

// All are the events so far, in order.
func (e *Events) All() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.list...)
}

// Reasons are the events' reasons, in order.
func (e *Events) Reasons() []string {
	var out []string
	for _, ev := range e.All() {
		out = append(out, ev.Reason)
	}
	return out
}

// Count is how many events have reason and a message containing says.
func (e *Events) Count(reason, says string) int {
	n := 0
	for _, ev := range e.All() {
		if ev.Reason == reason && strings.Contains(ev.Message, says) {
			n++
		}
	}
	return n
}
