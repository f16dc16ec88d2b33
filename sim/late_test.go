package sim

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
)

// webhook-late holds a request past the engine's request expiry (a lease,
// then up to a cleanup interval), so the message is sent again while it is
// in flight; the bot then reads it, and the node is handed an answer it has
// given up on. The reference engine ignores it: no invariant fires, and the
// event reaches the handler once (the other request is a duplicate).
func TestScheduledLateAnswer(t *testing.T) {
	w := explicitWorld()
	// Within the receiver's timestamp tolerance (a request held longer is
	// rejected as stale, also through no fault of its signer).
	w.CleanupInterval = 30 * time.Second
	none := faults.None()
	sched := []Fault{{Kind: faults.WebhookLate, Bot: "a", Event: "e3", Attempt: 1, Delay: 5 * time.Second}}
	r, err := Run(Config{Seed: 1, Workload: &w, Plan: &none, Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Violations {
		t.Errorf("%v", v)
	}
	late := faultRecords(r, faults.WebhookLate)
	if len(late) != 1 || recField(late[0], "event") != "e3" || late[0].Actor != "bot/a" {
		t.Fatalf("webhook-late records: %v", late)
	}
	req := recField(late[0], "req")
	var sentAt, answeredAt time.Time
	sends, handled, dups := 0, 0, 0
	for _, rec := range r.Trace {
		switch {
		case rec.Kind == "send" && recField(rec, "bot") == "a" && recField(rec, "event") == "e3":
			sends++
			if recField(rec, "req") == req && sentAt.IsZero() {
				sentAt = rec.Time
			}
		case rec.Kind == "result-late" && recField(rec, "req") == req:
			answeredAt = rec.Time
		case rec.Actor == "bot/a" && recField(rec, "event") == "e3" && rec.Kind == "handled":
			handled++
		case rec.Actor == "bot/a" && recField(rec, "event") == "e3" && rec.Kind == "duplicate":
			dups++
		}
	}
	cfg := w.EngineConfig()
	if answeredAt.IsZero() || answeredAt.Sub(sentAt) < cfg.Lease+cfg.CleanupInterval {
		t.Fatalf("late answer at %v for a send at %v: want one handed to the node at least a lease and a cleanup interval (%v) later",
			answeredAt, sentAt, cfg.Lease+cfg.CleanupInterval)
	}
	if sends < 2 || handled != 1 || dups < 1 {
		t.Fatalf("e3 to bot a: %d sends, %d handler runs, %d duplicates; want the message sent again while held, handled once", sends, handled, dups)
	}
	if r.Coverage[CovLateResent] == 0 {
		t.Fatalf("coverage %s not reached", CovLateResent)
	}
}
