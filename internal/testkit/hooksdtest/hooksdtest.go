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
}
