//go:build agentonly && !hookonly

package main

// commands of the agentonly build, the NRI agent's own: the agent, its
// health probe and version, so none of the API consumers' dependencies
// (client-go and its schemes) is linked. Its file-backed RSS is the part
// of the binary it touches: docs/performance.md has the figures.
// buildName is what version and the build_info metric call this build.
const buildName = "agentonly"

func commands() []command {
	return []command{agentCommand, healthCommand, versionCommand}
}
