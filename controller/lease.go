package controller

import (
	"context"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// microLeaseLock is client-go's LeaseLock whose raw record (the bytes the
// elector compares to notice a renewal) carries the Lease's renewTime to
// the microsecond it is stored with.
//
// client-go's LeaderElector dates the holder's last renewal by its own
// clock: when a Get returns raw bytes that differ from the last ones it
// saw, it sets observedTime to now, and it takes the Lease once now is
// past observedTime + leaseDurationSeconds. LeaseLock.Get marshals the
// record with metav1.Time, whose JSON has whole seconds, so two renewals
// within one second give the same bytes: the standby misses the later one
// and dates the lease from the earlier one, up to a second before the
// holder last renewed. The standby could then act up to 1 s before
// leaseDurationSeconds had passed since the holder's last renewal, which
// the holder's own timing (it stops leading at RenewDeadline) does not
// allow for. With the renewTime at full precision every renewal the
// standby polls is observed. The standby still never reads the holder's
// clock for its decision: the renewTime only makes two records differ.
//
// One elector uses one lock; the elector serializes its calls.
type microLeaseLock struct {
	*resourcelock.LeaseLock
}

// Get returns the record and raw bytes that differ whenever the renewTime
// does, to the microsecond.
func (l microLeaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.LeaseLock.Get(ctx)
	if err != nil {
		return rec, raw, err
	}
	// LeaseSpecToLeaderElectionRecord keeps the full time in
	// RenewTime.Time; only its JSON drops the fraction.
	raw = append(raw, ' ')
	raw = rec.RenewTime.UTC().AppendFormat(raw, time.RFC3339Nano)
	return rec, raw, nil
}
