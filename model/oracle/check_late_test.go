package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A request held on the wire (webhook-late) across its bot's key rotation
// and the old key's retirement is rejected by the receiver through no
// fault of its signer; one signed after the rotation with the old key is
// the engine's.
func TestCheckSignatureRejectedAfterKeyRetired(t *testing.T) {
	run := func(sendAt, rejectAt time.Duration, retire bool) []Violation {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		var steps []struct {
			at time.Duration
			o  Observation
		}
		add := func(at time.Duration, o Observation) {
			steps = append(steps, struct {
				at time.Duration
				o  Observation
			}{at, o})
		}
		add(sendAt, Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
		add(10*time.Second, Observation{Kind: ObsKeyRotated, Bot: "b1"})
		if retire {
			add(20*time.Second, Observation{Kind: ObsKeyRetired, Bot: "b1"})
		}
		add(rejectAt, Observation{Kind: ObsRejected, Bot: "b1", EventID: "e1", Request: 1, Detail: "no matching webhook-signature"})
		for i := 1; i < len(steps); i++ { // in time order (stable)
			for j := i; j > 0 && steps[j].at < steps[j-1].at; j-- {
				steps[j], steps[j-1] = steps[j-1], steps[j]
			}
		}
		for _, s := range steps {
			r.at(s.at).add(s.o)
		}
		var vs []Violation
		for _, v := range Check(r.obs, CheckFinal{}, chkParams()) {
			if v.Invariant == InvSignedVerify {
				vs = append(vs, v)
			}
		}
		return vs
	}
	if vs := run(5*time.Second, 25*time.Second, true); len(vs) != 0 {
		t.Errorf("signed before the rotation, read after the retirement: %v, want none", vs)
	}
	if vs := run(12*time.Second, 25*time.Second, true); len(vs) != 1 {
		t.Errorf("signed after the rotation, rejected: %d violations, want 1", len(vs))
	}
	if vs := run(5*time.Second, 15*time.Second, false); len(vs) != 1 {
		t.Errorf("rejected while both keys are held: %d violations, want 1", len(vs))
	}
}
