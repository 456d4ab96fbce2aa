package report

import (
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// Bounds of what an Item keeps of each value read. The hook's records fit
// them (findings.Encode cuts to less); an Event's summary is whatever its
// author wrote, and anyone allowed to create Events in a namespace can
// write one that names our controller.
const (
	// maxText bounds free text: a rule, a hint, a link, an error.
	maxText = 512
	// maxName bounds a name: Kubernetes names are at most 253 bytes.
	maxName = 253
	// maxVendorName bounds a vendor's name, a short table key.
	maxVendorName = 64
	// maxUID bounds a pod UID: 36 for a UUID, 32 for a static pod's hash.
	maxUID = 64
)

// valid gives it with every value read checked, so that what the writers
// get has a meaning they know, whichever input it came from. A level that
// is not one of findings.ImpactLevels becomes "" (not classified: under
// --fail-on breaks that fails, so a forged level cannot pass); a negative
// count 0; a name that is not a Kubernetes name is shown Go-quoted; an
// owner that is not a kind and a name is the pod's; a doc link that is not
// http(s) is dropped; lists and free text are bounded. Each value refused
// or replaced counts in sk.Invalid. The writers still escape everything:
// checked is not safe to print.
func valid(it Item, sk *Skipped) Item {
	it, ownerOK := validShared(it, sk)
	return validPod(it, ownerOK, sk)
}

// validPod is the part of valid that reads the pod's name and UID: the
// pod's name, its UID and an owner that is the pod itself, or one that is
// not a kind and a name (ownerOK false, as validShared found).
func validPod(it Item, ownerOK bool, sk *Skipped) Item {
	pod := it.Pod
	it.Pod = validName(it.Pod, subdomain, sk)
	if uid := safetext.Name(it.PodUID, maxUID); it.PodUID != "" && uid != it.PodUID {
		sk.Invalid++
		it.PodUID = uid
	}
	switch o := it.Owner; {
	case o == owner.Bare(pod):
		// The pod itself: its name was checked (and counted) above.
		it.Owner = owner.Bare(it.Pod)
	case !ownerOK:
		sk.Invalid++
		it.Owner = owner.Bare(it.Pod)
	}
	return it
}

// validShared is the rest of valid, which the pods of one workload's
// Report share (resultCache); ownerOK says the owner is none or a kind and
// a name.
func validShared(it Item, sk *Skipped) (Item, bool) {
	bad := func(ok bool) bool {
		if !ok {
			sk.Invalid++
		}
		return !ok
	}
	it.Namespace = validName(it.Namespace, validation.IsDNS1123Label, sk)
	it.Node = validName(it.Node, plainName, sk)
	o := it.Owner
	ownerOK := o == (owner.Owner{}) || validKind(o.Kind) && len(validation.IsDNS1123Subdomain(o.Name)) == 0
	// Kind Node is a node finding's own (no namespace): a pod's Event
	// or Report naming a node as its owner would pass for the node's
	// finding and hide the node's own (podOf).
	if o.Kind == KindNode && it.Namespace != "" {
		ownerOK = false
	}
	if bad(validLevel(it.Worst)) {
		it.Worst = ""
	}
	for _, n := range []*int{&it.Impact.Legacy, &it.Impact.Xt, &it.Impact.Native} {
		if bad(*n >= 0) {
			*n = 0
		}
	}
	it.Error = safetext.Cut(it.Error, maxText)
	it.Writer = safetext.Cut(it.Writer, maxText)
	it.Command = safetext.Cut(it.Command, maxText)

	if bad(len(it.Vendors) <= findings.MaxVendors) {
		it.Vendors = it.Vendors[:findings.MaxVendors]
	}
	// Copies: the input's slices are not ours to change.
	vs := make([]findings.Vendor, 0, len(it.Vendors))
	for _, v := range it.Vendors {
		v.Name, v.Hint = safetext.Cut(v.Name, maxVendorName), safetext.Cut(v.Hint, maxText)
		if v.Doc != "" && bad(validDoc(v.Doc)) {
			v.Doc = ""
		}
		vs = append(vs, v)
	}
	it.Vendors = vs

	if bad(len(it.Examples) <= findings.MaxExamples) {
		it.Examples = it.Examples[:findings.MaxExamples]
	}
	exs := make([]findings.Example, 0, len(it.Examples))
	for _, ex := range it.Examples {
		ex.Family, ex.Table, ex.Chain = safetext.Cut(ex.Family, maxName), safetext.Cut(ex.Table, maxName), safetext.Cut(ex.Chain, maxName)
		ex.Rule = safetext.Cut(ex.Rule, maxText)
		if bad(validLevel(ex.Impact)) {
			ex.Impact = ""
		}
		exs = append(exs, ex)
	}
	it.Examples = exs
	for _, l := range []*[]string{&it.Modules.Legacy, &it.Modules.Xt, &it.Modules.Native} {
		*l = validModules(*l, sk)
	}
	return it, ownerOK
}

// validLevel: one of findings.ImpactLevels, or "" for not classified.
func validLevel(l string) bool {
	return l == "" || findings.ImpactRank(l) < len(findings.ImpactLevels)
}

// validName returns s when empty or check finds nothing wrong, else s
// Go-quoted and bounded (counted in sk.Invalid): still told apart from
// other names, visibly not a name, and printable ASCII.
func validName(s string, check func(string) []string, sk *Skipped) string {
	if s == "" || len(check(s)) == 0 {
		return s
	}
	sk.Invalid++
	return safetext.Quote(s, maxName)
}

// subdomain is validation.IsDNS1123Subdomain, which a name that is
// plainly one (dot-separated labels of [a-z0-9-], each starting and ending
// with a letter or digit, 253 bytes at most) skips: its regular
// expression was a tenth of a report's own CPU over 100,000 pods.
func subdomain(s string) []string {
	if plainSubdomain(s) {
		return nil
	}
	return validation.IsDNS1123Subdomain(s)
}

func plainSubdomain(s string) bool {
	if s == "" || len(s) > validation.DNS1123SubdomainMaxLength {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case alnum(c):
		case c == '-' || c == '.':
			// Never first or last, nor beside a dot.
			if i == 0 || i == len(s)-1 || !alnum(s[i-1]) && !(c == '-' && s[i-1] == '-') || c == '.' && !alnum(s[i+1]) || s[i+1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// plainName checks a node name the way safetext.Name prints one bare: a
// hook's --node may be a host name that is not a DNS subdomain (upper
// case), which is no attack.
func plainName(s string) []string {
	if safetext.Name(s, maxName) != s {
		return []string{"not a plain name"}
	}
	return nil
}

// validKind: a kind as the API accepts one (a CRD's kind, lower-cased, is
// a DNS-1035 label).
func validKind(kind string) bool {
	return len(validation.IsDNS1035Label(strings.ToLower(kind))) == 0
}

// validDoc: an absolute http or https link with a host, bounded. Anything
// else (javascript:, data:, file:, a relative path) is not a vendor's
// documentation, and a Markdown or HTML viewer could follow it.
func validDoc(doc string) bool {
	u, err := url.Parse(doc)
	return err == nil && len(doc) <= maxText && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		safetext.Display(doc) == doc
}

// maxModules bounds a level's module list read back (findings.Encode
// writes at most 24).
const maxModules = 32

// validModules keeps the names that are a kernel module's (letters,
// digits, underscores, at most 56 bytes, the kernel's MODULE_NAME_LEN),
// at most maxModules; every other is dropped and counted.
func validModules(l []string, sk *Skipped) []string {
	if len(l) == 0 {
		return l
	}
	out := make([]string, 0, min(len(l), maxModules))
	for _, m := range l {
		ok := m != "" && len(m) <= 56 && len(out) < maxModules
		for _, c := range m {
			ok = ok && (c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
		}
		if !ok {
			sk.Invalid++
			continue
		}
		out = append(out, m)
	}
	return out
}
