//go:build hookonly

package main

// commands of the hookonly build, the one the runtime execs at every
// container start: only what the hook side needs, so no consumer's
// dependencies (client-go, client_golang) are linked and initialised.
// buildName is what version calls this build.
const buildName = "hookonly"

func commands() []command {
	return []command{hookCommand, renderCommand, scanCommand, versionCommand}
}
