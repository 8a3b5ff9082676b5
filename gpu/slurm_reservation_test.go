package gpu

import (
	"testing"
	"time"
)

const sampleReservations = "ReservationName=suanli-L.P StartTime=2026-12-04T07:02:32 EndTime=2026-12-04T07:07:12 Duration=00:04:40 Nodes=gpu[01-02] NodeCnt=2 CoreCnt=64 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=64 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"

func TestParseReservations(t *testing.T) {
	rs, err := ParseReservations([]byte(sampleReservations))
	if err != nil || len(rs) != 1 {
		t.Fatalf("%+v, %v", rs, err)
	}
	r := rs[0]
	if r.Name != "suanli-L.P" || r.Nodes != "gpu[01-02]" || r.NodeCount != 2 || r.Users != "root" || r.State != "ACTIVE" ||
		!r.Start.Equal(time.Date(2026, 12, 4, 7, 2, 32, 0, time.UTC)) || r.End.Sub(r.Start) != 280*time.Second {
		t.Errorf("%+v", r)
	}
	if rs, err := ParseReservations([]byte("No reservations in the system\n")); err != nil || len(rs) != 0 {
		t.Errorf("none: %+v, %v", rs, err)
	}
	for _, bad := range []string{"ReservationName=x StartTime=yesterday", "ReservationName= NodeCnt=1", "ReservationName=x NodeCnt=many"} {
		if _, err := ParseReservations([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got := SlurmTime(time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("CST", 8*3600))); got != "2026-01-01T19:04:05" {
		t.Errorf("SlurmTime = %s", got)
	}
}

func FuzzParseReservations(f *testing.F) {
	f.Add([]byte(sampleReservations))
	f.Add([]byte("No reservations in the system\n"))
	f.Add([]byte("ReservationName=a NodeCnt=-1 StartTime=2026-12-04T07:02:32\nReservationName=b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseReservations(b)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Name == "" {
				t.Fatalf("%q: a reservation without a name", b)
			}
		}
	})
}
