package market

import (
	"testing"
	"unsafe"
)

// TestHugeSlice checks that the tables' allocator returns n zeroed,
// writable elements and no more, for sizes below a huge page, at and past
// it, and for elements that do not divide one.
func TestHugeSlice(t *testing.T) {
	check := func(name string, n int, got func(int) (int, int, bool)) {
		t.Helper()
		l, c, ok := got(n)
		if l != n || c != n || !ok {
			t.Errorf("%s(%d): len %d cap %d zeroed-and-writable %v", name, n, l, c, ok)
		}
	}
	bucket := func(n int) (int, int, bool) {
		s := hugeSlice[memBucket](n)
		for i := range s {
			if s[i] != (memBucket{}) {
				return len(s), cap(s), false
			}
			s[i].passed = uint32(i)
		}
		for i := range s {
			if s[i].passed != uint32(i) {
				return len(s), cap(s), false
			}
		}
		return len(s), cap(s), true
	}
	odd := func(n int) (int, int, bool) {
		type rec [3]uint64 // 24 bytes: does not divide 2 MB
		s := hugeSlice[rec](n)
		for i := range s {
			if s[i] != (rec{}) {
				return len(s), cap(s), false
			}
			s[i][2] = uint64(i)
		}
		return len(s), cap(s), s[n-1][2] == uint64(n-1)
	}
	perHuge := int(2 << 20 / unsafe.Sizeof(memBucket{}))
	for _, n := range []int{1, 8, perHuge - 1, perHuge, perHuge + 1, 3 * perHuge} {
		check("hugeSlice[memBucket]", n, bucket)
	}
	for _, n := range []int{1, 1000, 100000, 300000} {
		check("hugeSlice[24 bytes]", n, odd)
	}
}

// TestPopulate checks that backing a ring block up front changes none of
// its bytes: a fresh block stays zero, a written one keeps what it holds,
// at, below and past the size populate acts on.
func TestPopulate(t *testing.T) {
	for _, n := range []int{1, populateMin/32 - 1, populateMin / 32, 4096, 4097} {
		s := populate(make([]memRec[struct{}], n))
		for i := range s {
			if s[i] != (memRec[struct{}]{}) {
				t.Fatalf("populate(%d): record %d not zero", n, i)
			}
			s[i].exp = int64(i) + 1
		}
		populate(s)
		for i := range s {
			if s[i].exp != int64(i)+1 {
				t.Fatalf("populate(%d): record %d changed to %d", n, i, s[i].exp)
			}
		}
	}
}
