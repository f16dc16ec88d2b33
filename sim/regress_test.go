package sim

import "testing"

// TestRegressionSeeds: seeds on which the reference engine once broke an
// invariant, or the checker once reported a correct run, run as the sweep
// runs them. Each names what it found.
func TestRegressionSeeds(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		what string
	}{
		// An Enqueue whose commit acknowledgement was lost had committed;
		// a claim sent the row and recorded its failure, and then the
		// redo of the hand-off sent the message direct again as attempt
		// 1: six sends against MaxAttempts 5 (bounded-retry). Found once
		// webhook-late changed this seed's run.
		{1076, "redo of an ambiguous hand-off sent direct beside its row"},
		// Checker false alarms (dead-letter-earned) beyond seed 10000:
		// a permanent 4xx answered to one node while another node's send
		// was acked, then dead-lettered by the first as the policy says;
		{12978, "a permanent answer carried past another node's ack"},
		// an ambiguous Fail repeated while other sends were unsettled;
		{23791, "an ambiguous Fail's repeat taken for a new failure"},
		// a direct send given up after its lease, recorded on a new row
		// after the lifetime it was sent in had ended.
		{39348, "a give-up recorded on a row of a later lifetime"},
		// retry-backoff: an operator's requeue a second after a 422
		// dead-lettered a direct send is sent at once, as it should be;
		{22958, "a requeue inside the first backoff of a rowless failure"},
		// reported-counters: a Fail whose commit acknowledgement was lost
		// still ended its lease; the node's direct send of the key hours
		// later was booked as sent from that row;
		{19593, "a lease ended by an ambiguous Fail"},
		// retention-bounds: a direct send beside another node's row was
		// given up after the lease and written to a new row aged from the
		// send, which the TTL check aged from the write.
		{16740, "a give-up's row aged from its send"},
		// idempotent-replay: events without members moved a timestamp
		// stream's cursor far past its last row; a duplicate batch behind
		// the lookback, whose id the engine had forgotten, was handed
		// off again.
		{20950, "a duplicate behind a cursor moved by memberless events"},
		// Found by a 200,000-seed sweep: the engine went on past a crash
		// point reached by a pending op's retry (run errors);
		{16131, "a Requeue after a retried op's pump hit a crash point"},
		{19618, "advanceJoins' GetCursor after a retried op hit a crash point"},
		// and checker false alarms: retry-backoff's slots filled after the
		// failure, or held by a request whose message was sent again;
		{173985, "a bot's request slots filled after its failure"},
		{70885, "a slot held by a request whose message was sent again"},
		// a direct send numbered as the claim made beside it in one step;
		{120637, "a direct send beside a claim in one step"},
		{125315, "a direct send beside a claim in one step, another bot"},
		// a claim by a node whose clock ran 73 s ahead while the holder's
		// lease still ran (bounded-retry).
		{151950, "a claim by a skewed clock inside the holder's lease"},
		// Engine bugs found by the same sweep: a direct send answered 400
		// in the batch that timed out the request holding its row (claimed
		// at boot), whose failure then left the row live (bounded-retry);
		{165571, "a 400 beside a timeout of the row's request"},
		// a bot joined before the stream's first event, whose hand-off
		// crashed before the join's done marker was written: the next
		// boot backfilled the event to it (idempotent-replay).
		{133665, "a crash in the first hand-off after an early join"},
		{189337, "a crash in the first hand-off after an early join, housekeeping between"},
		// From a sweep of seeds 200001-260000: the same 400-beside-a-
		// timeout, the row's request claimed at boot and answered 503;
		{258798, "a 422 beside a 503 of the row's request"},
		// a boot without a cursor subscribed from one member's start; a
		// later member with an earlier start anchored the cursor before it
		// but the subscription stayed (cursor-low-watermark, no-silent-loss).
		{246686, "an earlier join before any cursor, subscription not moved back"},
		// old backfills on a timestamp stream that stopped producing never
		// saw their replay end; every boot and every new join replayed the
		// whole stream from their start, and a new bot's events came 3m51s
		// late (no-head-of-line-blocking).
		{223182, "a rewind from the earliest pending join start, not where its replay got"},
	} {
		r := mustRun(t, Config{Seed: c.seed})
		for _, v := range r.Violations {
			t.Errorf("seed %d (%s): %v", c.seed, c.what, v)
		}
	}
}
