// Package hooksdtest holds hooks.d files CRI-O refuses, for the tests
// that hold lib/hookinstall's check to CRI-O's hooks library (podman's).
package hooksdtest

// Bad are hooks.d files CRI-O's hooks library refuses, each for one
// reason: a CRI-O that starts with one in its hooks directory stops.
var Bad = map[string]string{
	"unknown stage": `{"version":"1.0.0","hook":{"path":"/bin/true"},"when":{"always":true},"stages":["prestop"]}`,
	"cut short":     `{"version":"1.0.0","hook":{"path":"/bin/true"},`,
	"version":       `{"version":"1.0","hook":{"path":"/bin/true"},"when":{"always":true},"stages":["poststart"]}`,
	"no stages":     `{"version":"1.0.0","hook":{"path":"/bin/true"},"when":{"always":true}}`,
	"regexp":        `{"version":"1.0.0","hook":{"path":"/bin/true"},"when":{"annotations":{"(":"x"}},"stages":["poststart"]}`,
	"no path":       `{"version":"1.0.0","hook":{},"when":{"always":true},"stages":["poststart"]}`,
	"timeout type":  `{"version":"1.0.0","hook":{"path":"/bin/true","timeout":"10"},"when":{"always":true},"stages":["poststart"]}`,
	"always type":   `{"version":"1.0.0","hook":{"path":"/bin/true"},"when":{"always":"true"},"stages":["poststart"]}`,
	"args type":     `{"version":"1.0.0","hook":{"path":"/bin/true","args":"x"},"when":{"always":true},"stages":["poststart"]}`,
	"old, no stage": `{"hook":"/bin/true"}`,
	"old, both":     `{"version":"0.1.0","hook":"/bin/true","stage":["prestart"],"stages":["prestart"]}`,
	"old, stage":    `{"hook":"/bin/true","stage":["prestop"]}`,
}

// Good are hooks.d files CRI-O's hooks library takes, of each version it
// reads.
var Good = map[string]string{
	"1.0.0": `{"version":"1.0.0","hook":{"path":"/bin/true","args":["true"],"timeout":5},"when":{"always":true,"commands":["^x$"]},"stages":["poststart"]}`,
	"0.1.0": `{"version":"0.1.0","hook":"/bin/true","arguments":["a"],"stage":["prestart"],"cmds":["^x$"],"annotations":["^a$"]}`,
	"none":  `{"hook":"/bin/true","stages":["poststop"],"hasbindmounts":true}`,
}
