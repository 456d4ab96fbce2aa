package main

import (
	"io"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/internal/logsetup"
)

// logFlags are the logging flags every long-running subcommand shares.
// Plain strings, not enums: a bad value is a warning, never a reason for
// the hook to stop.
type logFlags struct {
	level  string
	format string
	file   string
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.file, "log-file", "", "also append logs to this regular file (runtimes drop a successful hook's stderr); a FIFO, device or symlink there is refused with a warning")
}

// logger builds the logger; a bad --log-file is reported on stderr but never
// stops the command, because the hook must keep going whatever happens.
func (l *logFlags) logger(stderr io.Writer) *logrus.Logger {
	log := l.stderrLogger(stderr)
	l.addFile(log, stderr)
	return log
}

// stderrLogger is the logger without --log-file.
func (l *logFlags) stderrLogger(stderr io.Writer) *logrus.Logger {
	return logsetup.New(l.level, l.format, stderr)
}

// addFile makes log also append to --log-file.
func (l *logFlags) addFile(log *logrus.Logger, stderr io.Writer) {
	logsetup.AddFile(log, l.file, stderr)
}
