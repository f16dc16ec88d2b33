package engine

import (
	"fmt"
	"testing"

	"github.com/deliverysim/deliverysim/impl/webhook"
)

// Signatures cut from the arena must stay what they were when handed out
// while later ones are written after them and blocks fill up.
func TestSigArenaSignaturesStayIntact(t *testing.T) {
	var a sigArena
	s := webhook.NewSigner([]byte("secret"))
	var got, want []string
	for i := range 5*sigArenaBlock + 3 {
		id := fmt.Sprintf("ev-%d", i)
		got = append(got, a.sign(s, id, int64(1700000000+i), []byte(id)))
		want = append(want, webhook.Sign([]byte("secret"), id, int64(1700000000+i), []byte(id)))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("signature %d is %q after later signing, want %q", i, got[i], want[i])
		}
	}
}
