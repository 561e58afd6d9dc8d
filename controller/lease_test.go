package controller

import (
	"bytes"
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestMicroLeaseLockObservesEveryRenewal: two renewals within one second
// give the same raw record through client-go's LeaseLock (its JSON has
// whole seconds), so a standby's elector misses the later one; through
// microLeaseLock they differ. A change of holder or of nothing behaves as
// before.
func TestMicroLeaseLockObservesEveryRenewal(t *testing.T) {
	base := time.Date(2026, 12, 2, 8, 0, 7, 100_000_000, time.UTC)
	holder := func(s string) *string { return &s }
	spec := func(h string, renew time.Time) coordinationv1.LeaseSpec {
		d := int32(4)
		return coordinationv1.LeaseSpec{HolderIdentity: holder(h), LeaseDurationSeconds: &d,
			AcquireTime: &metav1.MicroTime{Time: base}, RenewTime: &metav1.MicroTime{Time: renew}}
	}
	tests := []struct {
		name       string
		first, now coordinationv1.LeaseSpec
		plainSame  bool // what client-go's LeaseLock reports
		microSame  bool
	}{
		{"renewal 0.6 s later, same second", spec("a", base), spec("a", base.Add(600*time.Millisecond)), true, false},
		{"renewal 1 µs later", spec("a", base), spec("a", base.Add(time.Microsecond)), true, false},
		{"renewal in the next second", spec("a", base), spec("a", base.Add(time.Second)), false, false},
		{"no renewal", spec("a", base), spec("a", base), true, true},
		{"new holder", spec("a", base), spec("b", base), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lease := &coordinationv1.Lease{ObjectMeta: metavOf(LeaseName, "bh"), Spec: tc.first}
			cs := fake.NewClientset(lease)
			plain := &resourcelock.LeaseLock{LeaseMeta: metavOf(LeaseName, "bh"), Client: cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "standby"}}
			micro := microLeaseLock{&resourcelock.LeaseLock{LeaseMeta: metavOf(LeaseName, "bh"), Client: cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "standby"}}}
			ctx := context.Background()
			get := func(l resourcelock.Interface) []byte {
				rec, raw, err := l.Get(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !rec.RenewTime.Time.Equal(lease.Spec.RenewTime.Time) {
					t.Fatalf("record renewTime %s, want %s", rec.RenewTime.Time, lease.Spec.RenewTime.Time)
				}
				return raw
			}
			plain1, micro1 := get(plain), get(micro)
			lease.Spec = tc.now
			if _, err := cs.CoordinationV1().Leases("bh").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			plain2, micro2 := get(plain), get(micro)
			if same := bytes.Equal(plain1, plain2); same != tc.plainSame {
				t.Errorf("LeaseLock: raw records equal = %v, want %v (client-go changed its marshalling?)", same, tc.plainSame)
			}
			if same := bytes.Equal(micro1, micro2); same != tc.microSame {
				t.Errorf("microLeaseLock: raw records equal = %v, want %v\n%s\n%s", same, tc.microSame, micro1, micro2)
			}
		})
	}
}
