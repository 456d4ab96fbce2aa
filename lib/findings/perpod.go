package findings

import (
	"sort"
	"time"
)

// PodKey is what NewestPerPod compares of an item: the pod's namespace and
// name, the time of its finding, and an id (sandbox, UID) to break ties.
type PodKey struct {
	Namespace, Name string
	Time            time.Time
	ID              string
}

// NewestPerPod keeps one item per pod namespace and name, the newest
// (of equal times, the greater ID), ordered by namespace and name: a pod
// recreated under its name has two entries until the old one goes, and
// metrics series must never repeat their labels (node-exporter and
// client_golang refuse the whole set).
func NewestPerPod[T any](items []T, key func(T) PodKey) []T {
	byName := map[[2]string]T{}
	for _, it := range items {
		k := key(it)
		n := [2]string{k.Namespace, k.Name}
		old, ok := byName[n]
		if !ok {
			byName[n] = it
			continue
		}
		o := key(old)
		if k.Time.After(o.Time) || k.Time.Equal(o.Time) && k.ID > o.ID {
			byName[n] = it
		}
	}
	out := make([]T, 0, len(byName))
	for _, it := range byName {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := key(out[i]), key(out[j])
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}
