package orderbook

// Added by Suanli (issue 20), never part of geseq/orderbook: the loops of
// its own BenchmarkThroughput and BenchmarkThroughputDeep with the
// iteration count taken from b.N instead of a fixed duration, reporting
// ops/s and cpu-ns/op (getrusage, user + system over all threads) the way
// Suanli's market benchmarks do.

import (
	"math/rand"
	"syscall"
	"testing"
	"time"

	decimal "github.com/geseq/udecimal"
)

func zzCPUNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func zzReport(b *testing.B, cpu0 int64, ops int) {
	b.StopTimer()
	b.ReportMetric(float64(zzCPUNanos()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(ops*b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkCmpThroughput(b *testing.B) {
	ob := getOrderBook()
	bid, ask, bidQty, askQty := getInitialVars(lowerBound, upperBound, minSpread)
	var tok, buyID, sellID uint64
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	b.ReportAllocs()
	cpu0 := zzCPUNanos()
	b.ResetTimer()
	for range b.N {
		dec := rnd.Intn(10) < 5
		bid, ask = getPrice(bid, ask, minSpread, dec)
		if bid.LessThan(lowerBound) {
			bid, ask = getPrice(bid, ask, minSpread, false)
		} else if bid.GreaterThan(upperBound) {
			bid, ask = getPrice(bid, ask, minSpread, true)
		}
		tok++
		ob.CancelOrder(tok, buyID)
		tok++
		ob.CancelOrder(tok, sellID)
		tok++
		buyID = tok
		tok++
		sellID = tok
		ob.AddOrder(buyID, buyID, Limit, Buy, bidQty, bid, decimal.Zero, None)
		ob.AddOrder(sellID, sellID, Limit, Sell, askQty, ask, decimal.Zero, None)
	}
	zzReport(b, cpu0, 4)
}

func BenchmarkCmpThroughputDeep(b *testing.B) {
	ob := getOrderBook()
	mid := lowerBound.Add(upperBound).Div(decimal.NewI(2, 0))
	qty := decimal.NewI(10, 0)
	bandSteps := int64(upperBound.Sub(lowerBound).Div(minSpread).Float() / 2)
	if bandSteps < 1 {
		bandSteps = 1
	}
	priceFor := func(i uint64) (decimal.Decimal, SideType) {
		step := decimal.NewI((i%uint64(bandSteps))+1, 0).Mul(minSpread)
		if i&1 == 0 {
			return mid.Sub(step), Buy
		}
		return mid.Add(step), Sell
	}
	var tok, id uint64
	var oldest uint64 = 1
	for live := 0; live < deepWindow; live++ {
		id++
		tok++
		price, side := priceFor(id)
		ob.AddOrder(tok, id, Limit, side, qty, price, decimal.Zero, None)
	}
	b.ReportAllocs()
	cpu0 := zzCPUNanos()
	b.ResetTimer()
	for range b.N {
		id++
		tok++
		price, side := priceFor(id)
		ob.AddOrder(tok, id, Limit, side, qty, price, decimal.Zero, None)
		tok++
		ob.CancelOrder(tok, oldest)
		oldest++
	}
	zzReport(b, cpu0, 2)
}
