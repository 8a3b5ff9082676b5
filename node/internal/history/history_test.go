package history

import (
	"bytes"
	"testing"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
)

func TestTelemetryHistoryRing(t *testing.T) {
	var h Telemetry
	t0 := time.Unix(0, 0)
	for i := range Samples + 10 {
		h.Add(t0.Add(time.Duration(i)*time.Second), []gpu.Telemetry{{UUID: "a", UtilizationPercent: uint32(i % 100)}, {UUID: "b"}})
	}
	s := h.Series("a")
	if len(s) != Samples || !s[0].Time.Equal(t0.Add(10*time.Second)) || s[len(s)-1].UtilizationPercent != uint32((Samples+9)%100) {
		t.Errorf("series = %d samples from %v, want %d from %v", len(s), s[0].Time, Samples, t0.Add(10*time.Second))
	}
	if len(h.Series("none")) != 0 {
		t.Error("series of an unknown GPU is not empty")
	}
}

func FuzzDecodeHistPoint(f *testing.F) {
	f.Add(Point{Price: 2_500_000, Count: 3, Index: 2_400_000}.Encode())
	f.Add(Point{Price: 1, Count: 1}.Encode())
	f.Add(Point{Price: 2_500_000, Count: 2, Index: 2_400_000, LeaseType: market.Reserved}.Encode())
	f.Add(append(Point{Price: 1, Count: 1}.Encode(), 0))
	f.Add(append(Point{Price: 1, Count: 1}.Encode(), 9))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, PointLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePoint(b)
		if err != nil {
			return
		}
		if !bytes.Equal(p.Encode(), b) {
			t.Errorf("decode(%x) = %+v re-encodes as %x", b, p, p.Encode())
		}
		if p.Price <= 0 || p.Count == 0 || p.Index < 0 {
			t.Errorf("decode(%x) = %+v: accepted a non-positive value", b, p)
		}
	})
}
