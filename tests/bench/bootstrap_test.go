package main

import (
	"testing"
	"time"
)

// TestBootstrap: the interval of a median holds the sample's median and
// is narrower than the sample's range; that of a difference of medians
// between two groups shifted by 10 ms holds 10 ms; a fixed seed gives
// the same interval twice.
func TestBootstrap(t *testing.T) {
	var a, b []time.Duration
	for i := 0; i < 201; i++ {
		a = append(a, time.Duration(i)*time.Millisecond)
		b = append(b, time.Duration(i+10)*time.Millisecond)
	}
	med := func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) }
	lo, hi := bootstrap(med, a)
	if m := quantile(a, 0.5); lo > m || hi < m || hi-lo >= 100*time.Millisecond || lo == hi {
		t.Errorf("median %v: interval %v .. %v", m, lo, hi)
	}
	lo, hi = bootstrap(func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) - quantile(s[1], 0.5) }, b, a)
	if lo > 10*time.Millisecond || hi < 10*time.Millisecond {
		t.Errorf("difference 10ms: interval %v .. %v", lo, hi)
	}
	if lo2, hi2 := bootstrap(func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) - quantile(s[1], 0.5) }, b, a); lo2 != lo || hi2 != hi {
		t.Errorf("two runs gave %v .. %v and %v .. %v", lo, hi, lo2, hi2)
	}
}
