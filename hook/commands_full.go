//go:build !hookonly

package main

// commands of the full build: the hook side and the consumers.
func commands() []command {
	return []command{agentCommand, forwardCommand, hookCommand, installHookCommand, renderCommand, reportCommand, scanCommand, textfileCommand, uninstallHookCommand, versionCommand}
}
