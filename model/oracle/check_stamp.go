package oracle

import (
	"strings"
	"time"
)

// The receiver's timestamp rule, judged on what it accepted as well as
// on what it refused (signed-requests-verify). Rejections of requests an
// engine signed are judged in check_wire.go (rejected); this file holds
// the other half: a receiver that accepts what the Standard Webhooks
// rules reject lets a captured request be replayed for ever, or a
// request stamped far ahead be held and replayed later, and no
// rejection ever shows it.

// stampInTolerance is the Standard Webhooks rule for webhook-timestamp
// stamp (Unix seconds) read at now, written from the specification (and
// its reference library's arithmetic): too old when now is more than tol
// after the stamp, too new when the stamp is more than tol after now.
// Exactly tol either way is still accepted.
func stampInTolerance(now time.Time, stamp int64, tol time.Duration) bool {
	at := time.Unix(stamp, 0)
	return now.Sub(at) <= tol && !at.After(now.Add(tol))
}

// stampAccepted: a receiver handled a request (or answered it as a
// duplicate, which it does only after verifying it) at o.Time; its stamp
// must have been within the tolerance then.
func (c *checker) stampAccepted(o *Observation) {
	if !o.Stamped || stampInTolerance(o.Time, o.Stamp, c.p.ReceiverTolerance) {
		return
	}
	c.report(InvSignedVerify, o.Bot, o.EventID, "",
		"the bot's receiver accepted (%s) a request whose webhook-timestamp %d is %s from its clock %s, outside the tolerance %s",
		o.Kind, o.Stamp, stampDistance(o.Time, o.Stamp), o.Time.Format(chkTimeFormat), c.p.ReceiverTolerance)
}

// stampProbe judges a twin receiver's answer to a correctly signed copy
// stamped at an edge of the tolerance: accepted exactly when the rule
// accepts it, and refused for its timestamp (400) otherwise: the stamp is
// checked before the signature, and the signature is good.
func (c *checker) stampProbe(o *Observation) {
	in := stampInTolerance(o.Time, o.Stamp, c.p.ReceiverTolerance)
	switch {
	case o.OK && !in:
		c.report(InvSignedVerify, o.Bot, o.EventID, "",
			"the receiver accepted a signed request whose webhook-timestamp %d is %s from its clock %s, outside the tolerance %s",
			o.Stamp, stampDistance(o.Time, o.Stamp), o.Time.Format(chkTimeFormat), c.p.ReceiverTolerance)
	case !o.OK && in:
		c.report(InvSignedVerify, o.Bot, o.EventID, "",
			"the receiver refused (%d, %q) a correctly signed request whose webhook-timestamp %d is %s from its clock %s, within the tolerance %s",
			o.Status, o.Detail, o.Stamp, stampDistance(o.Time, o.Stamp), o.Time.Format(chkTimeFormat), c.p.ReceiverTolerance)
	case !o.OK && (o.Status != 400 || !strings.Contains(o.Detail, "timestamp")):
		c.report(InvSignedVerify, o.Bot, o.EventID, "",
			"the receiver answered %d (%q) to a correctly signed request with a webhook-timestamp %s from its clock, not 400 for the timestamp",
			o.Status, o.Detail, stampDistance(o.Time, o.Stamp))
	}
}

// stampDistance says how far stamp lies from now, and on which side.
func stampDistance(now time.Time, stamp int64) string {
	d := time.Unix(stamp, 0).Sub(now)
	if d > 0 {
		return d.String() + " ahead"
	}
	return (-d).String() + " old"
}
