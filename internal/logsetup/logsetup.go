// Package logsetup builds the commands' logrus logger from the log
// flags: stderr, and a --log-file opened so that a planted FIFO, device or
// symlink can neither block nor redirect the hook.
package logsetup

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/sirupsen/logrus"
)

// New is a logger writing to stderr at level (one logrus parses; anything
// else is info, with a warning) in format ("json", else text).
func New(level, format string, stderr io.Writer) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(stderr)
	if lvl, err := logrus.ParseLevel(level); err == nil {
		log.SetLevel(lvl)
	} else {
		log.WithField("log_level", level).Warn("unknown log level, using info")
	}
	if format == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	} else {
		log.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	}
	return log
}

// AddFile makes log also append to the file at path ("": none); a file
// it cannot open is a warning on log, never an error. Only a regular file is
// taken: opening a FIFO planted there would wait for a reader forever
// (O_NONBLOCK makes the open fail instead), and writing to one that has a
// reader may block as soon as the reader stops. O_NOFOLLOW refuses a
// planted symlink.
func AddFile(log *logrus.Logger, path string, stderr io.Writer) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o640)
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
		log.WithError(err).WithField("log_file", path).Warn("cannot open log file, logging to stderr only")
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
