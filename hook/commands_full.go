//go:build !hookonly

package main

// commands of the full build: the hook side and the consumers. The order is
// the usage's.
func commands() []command {
	return []command{forwardCommand, hookCommand, installHookCommand, renderCommand, reportCommand, textfileCommand, uninstallHookCommand, versionCommand}
}
