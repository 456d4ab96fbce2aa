package main

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
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
	log := logrus.New()
	log.SetOutput(stderr)
	if lvl, err := logrus.ParseLevel(l.level); err == nil {
		log.SetLevel(lvl)
	} else {
		log.WithField("log_level", l.level).Warn("unknown log level, using info")
	}
	if l.format == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	} else {
		log.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	}
	return log
}

// addFile makes log also append to --log-file. Only a regular file is
// taken: opening a FIFO planted there would wait for a reader forever
// (O_NONBLOCK makes the open fail instead), and writing to one that has a
// reader may block as soon as the reader stops. O_NOFOLLOW refuses a
// planted symlink.
func (l *logFlags) addFile(log *logrus.Logger, stderr io.Writer) {
	if l.file == "" {
		return
	}
	f, err := os.OpenFile(l.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o640)
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", fi.Mode().Type())
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		log.WithError(err).WithField("log_file", l.file).Warn("cannot open log file, logging to stderr only")
		return
	}
	// The file first: it is what an admin reads later, and a stderr that
	// nobody reads must not keep a line from it.
	log.SetOutput(everyWriter{f, stderr})
}

// everyWriter writes to each writer whatever the others do; unlike
// io.MultiWriter, one failing writer does not stop the rest.
type everyWriter []io.Writer

func (ws everyWriter) Write(p []byte) (int, error) {
	var first error
	for _, w := range ws {
		if _, err := w.Write(p); err != nil && first == nil {
			first = err
		}
	}
	return len(p), first
}
