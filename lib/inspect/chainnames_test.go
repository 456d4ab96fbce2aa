package inspect

import (
	"math/rand/v2"
	"testing"
)

// TestChainNamesHostileBlob: any bytes, offsets pointing anywhere, give
// names or none, never a panic or an endless walk.
func TestChainNamesHostileBlob(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		b := make([]byte, r.IntN(600))
		for j := range b {
			b[j] = byte(r.IntN(256))
			if r.IntN(4) == 0 {
				b[j] = byte(r.IntN(8)) // small offsets, often
			}
		}
		for _, lf := range legacyFamilies {
			if lf.targetOffset > 0 {
				if n := chainNames(b, lf.targetOffset); len(n) > maxLegacyChains {
					t.Fatalf("%d names", len(n))
				}
			}
		}
	}
}
