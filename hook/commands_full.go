//go:build !hookonly && !agentonly

package main

// commands of the full build: the hook side and the consumers.
// buildName is what version and the build_info metric call this build.
const buildName = "full"

func commands() []command {
	return []command{agentCommand, forwardCommand, healthCommand, hookCommand, installHookCommand, renderCommand, reportCommand, scanCommand, textfileCommand, uninstallHookCommand, versionCommand}
}
