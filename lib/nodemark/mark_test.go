package nodemark

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

func TestMark(t *testing.T) {
	for _, c := range []struct {
		levels []string
		want   string
	}{
		{nil, Ready},
		{[]string{findings.ImpactNative}, Ready},
		{[]string{findings.ImpactNative, findings.ImpactXt}, NeedsExtra},
		{[]string{findings.ImpactXt, "unclassified"}, Unknown},
		{[]string{findings.ImpactXt, Unknown}, Unknown},
		{[]string{Unknown, findings.ImpactLegacy, findings.ImpactXt}, Breaks},
	} {
		m := map[string]Entry{}
		for i, l := range c.levels {
			m[string(rune('a'+i))] = Entry{Level: l}
		}
		if got := Mark(m); got != c.want {
			t.Errorf("Mark(%v) = %q, want %q", c.levels, got, c.want)
		}
	}
}

func rec(uid string, state findings.State, worst string) findings.Record {
	r := findings.Record{Schema: findings.Schema, Time: findings.Now(), State: state, Pod: findings.Pod{Namespace: "ns", Name: "p-" + uid, UID: uid}}
	if uid == "" {
		r.Subject = findings.SubjectNode
	}
	if state == findings.StatePresent {
		r.Nft, r.Worst = findings.Nft{Rules: 1}, worst
	}
	return r
}

// TestConsume: the label follows the records, worst first, survives a new
// Marker on the same state file, and a refused patch holds no line and is
// tried again.
func TestConsume(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	path := filepath.Join(t.TempDir(), "state.json")
	log, _ := logtest.NewNullLogger()
	m, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil {
		t.Fatal(err)
	}
	label := func() string {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[DefaultLabel]
	}
	steps := []struct {
		r    findings.Record
		want string
	}{
		{rec("u1", findings.StatePresent, findings.ImpactNative), Ready},
		{rec("u2", findings.StatePresent, findings.ImpactXt), NeedsExtra},
		{rec("", findings.StatePresent, findings.ImpactLegacy), Breaks},
		{rec("u3", findings.StateUnknown, ""), Breaks},
		{rec("", findings.StateGone, ""), Unknown},
		{rec("u3", findings.StateGone, ""), NeedsExtra},
	}
	for i, s := range steps {
		if err := m.Consume(ctx, s.r); err != nil {
			t.Fatal(err)
		}
		if got := label(); got != s.want {
			t.Fatalf("step %d: label %q, want %q", i, got, s.want)
		}
	}
	again, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil {
		t.Fatal(err)
	}
	if v := again.Value(); v != NeedsExtra {
		t.Errorf("after a restart: %q, want %q", v, NeedsExtra)
	}
	// Refused: Consume still returns nil; apply later succeeds.
	refuse, tries := true, 0
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries++
		if refuse {
			return true, nil, errors.New("forbidden")
		}
		return false, nil, nil
	})
	if err := again.Consume(ctx, rec("u2", findings.StateGone, "")); err != nil {
		t.Fatalf("Consume with the patch refused: %v", err)
	}
	// More findings of the same value: the retry ticker's, not theirs.
	for _, uid := range []string{"u4", "u5"} {
		if err := again.Consume(ctx, rec(uid, findings.StatePresent, findings.ImpactNative)); err != nil {
			t.Fatal(err)
		}
	}
	if tries != 1 {
		t.Errorf("%d patches tried for one value refused, want 1", tries)
	}
	if got := label(); got != NeedsExtra {
		t.Fatalf("label %q while refused", got)
	}
	refuse = false
	again.apply(ctx)
	if got := label(); got != Ready {
		t.Errorf("after the retry: label %q, want %q", got, Ready)
	}
}

// TestBound: beyond MaxEntries the oldest sighting goes.
func TestBound(t *testing.T) {
	m := &Marker{entries: map[string]Entry{}, log: logrus.New(), path: filepath.Join(t.TempDir(), "s")}
	base := findings.Now()
	for i := range MaxEntries + 1 {
		m.entries[string(rune(0x4e00+i))] = Entry{Level: findings.ImpactXt, Seen: base.Add(-1e9 * time.Duration(i))}
	}
	m.bound()
	if len(m.entries) != MaxEntries {
		t.Fatalf("%d entries", len(m.entries))
	}
	if _, ok := m.entries[string(rune(0x4e00+MaxEntries))]; ok {
		t.Errorf("the oldest sighting kept")
	}
}
