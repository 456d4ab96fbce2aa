//go:build race

package execquiet

func init() { raceDetector = true }
