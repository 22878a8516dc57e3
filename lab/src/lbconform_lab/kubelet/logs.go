package main

// containerLogs, as the kubelet serves it to `kubectl logs`: the run's log (or the previous
// run's), its last tailLines lines, at most limitBytes bytes, and with follow, what the
// container writes next until it stops running.
//
// A lab container's log is the raw output of its process, stdout and stderr in one file, with
// no per-line times: what needs times (timestamps, sinceSeconds, sinceTime) or one stream of
// the two is refused with a message saying so, rather than answered wrongly.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// How often a follow looks for more output at the end of the log.
const followPollInterval = 100 * time.Millisecond

type logOptions struct {
	follow     bool
	previous   bool
	tailLines  int64 // -1: all
	limitBytes int64 // -1: no limit
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q is not a boolean", name, v)
	}
	return b, nil
}

func intParam(q url.Values, name string, least int64) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < least {
		return 0, fmt.Errorf("%s=%q must be an integer of at least %d", name, v, least)
	}
	return n, nil
}

// parseLogOptions reads the query as the kubelet reads a v1.PodLogOptions (with the legacy
// "tail" parameter), and refuses what the lab's logs cannot answer.
func parseLogOptions(q url.Values) (logOptions, error) {
	o := logOptions{}
	var err error
	if tail := q.Get("tail"); tail != "" && q.Get("tailLines") == "" && tail != "all" {
		q.Set("tailLines", tail)
	}
	if o.follow, err = boolParam(q, "follow"); err != nil {
		return o, err
	}
	if o.previous, err = boolParam(q, "previous"); err != nil {
		return o, err
	}
	if o.tailLines, err = intParam(q, "tailLines", 0); err != nil {
		return o, err
	}
	if o.limitBytes, err = intParam(q, "limitBytes", 1); err != nil {
		return o, err
	}
	timestamps, err := boolParam(q, "timestamps")
	if err != nil {
		return o, err
	}
	const noTimes = "the lab's container logs carry no times (raw process output)"
	switch {
	case timestamps:
		return o, errors.New(noTimes + ": timestamps are not supported")
	case q.Get("sinceSeconds") != "" || q.Get("sinceTime") != "":
		return o, errors.New(noTimes + ": sinceSeconds and sinceTime are not supported")
	case q.Get("stream") != "" && q.Get("stream") != "All":
		return o, fmt.Errorf("the lab's container logs hold stdout and stderr together: stream=%s is not supported",
			q.Get("stream"))
	}
	return o, nil
}

func (s *server) containerLogs(w http.ResponseWriter, r *http.Request) {
	opts, err := parseLogOptions(r.URL.Query())
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	rec, c, err := s.target(r)
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	name := r.PathValue("container")
	path := c.Log
	switch {
	case opts.previous && c.PreviousLog == "":
		fail(w, fmt.Errorf("previous terminated container %q in pod %q not found", name, rec.key()),
			http.StatusBadRequest)
		return
	case opts.previous:
		path = c.PreviousLog
	case path == "":
		fail(w, fmt.Errorf("container %q in pod %q is waiting to start", name, rec.key()), http.StatusBadRequest)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		fail(w, fmt.Errorf("log of container %q in pod %q: %w", name, rec.key(), err), http.StatusInternalServerError)
		return
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	start := int64(0)
	if opts.tailLines >= 0 {
		if start, err = tailOffset(f, info.Size(), opts.tailLines); err != nil {
			fail(w, err, http.StatusInternalServerError)
			return
		}
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	pid := c.running()
	more := func() bool {
		if !opts.follow || opts.previous || pid == 0 {
			return false
		}
		_, now, err := s.pods.container(rec.Namespace, rec.Name, name)
		return err == nil && now.Log == path && now.running() == pid
	}
	w.Header().Set("Content-Type", "text/plain")
	var out io.Writer = flushWriter{w: w, rc: http.NewResponseController(w)}
	if opts.limitBytes > 0 {
		out = &limitWriter{w: out, left: opts.limitBytes}
	}
	err = copyLog(r.Context(), f, out, more)
	if err != nil && !errors.Is(err, errLimitReached) && !errors.Is(err, context.Canceled) {
		// The status line is gone already: all the client can get is the end of the stream.
		log.Printf("containerLogs %s/%s: %v", rec.key(), name, err)
	}
}

// copyLog writes f from its offset to w; at the end of the file, while more() says the
// container still writes this log, it waits for more instead of ending.
func copyLog(ctx context.Context, f *os.File, w io.Writer, more func() bool) error {
	buf := make([]byte, 32*1024)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if !more() {
			// The process may have written its last bytes after the read above and before it
			// ended: one more read after its end has them all.
			_, err := io.CopyBuffer(w, f, buf)
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followPollInterval):
		}
	}
}

// tailOffset is where the last n lines of the file's first size bytes begin (as `tail -n`:
// a newline that ends the file ends its last line, it does not start another).
func tailOffset(f *os.File, size, n int64) (int64, error) {
	if n == 0 {
		return size, nil
	}
	const chunk = 32 * 1024
	buf := make([]byte, chunk)
	found := int64(0)
	for end := size; end > 0; {
		start := max(0, end-chunk)
		if _, err := f.ReadAt(buf[:end-start], start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := end - start - 1; i >= 0; i-- {
			if buf[i] != '\n' || start+i == size-1 {
				continue
			}
			if found++; found == n {
				return start + i + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// flushWriter sends each write to the client at once: a follower sees lines as they come.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

var errLimitReached = errors.New("limitBytes reached")

// limitWriter passes on at most `left` bytes, then ends the copy.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errLimitReached
	}
	cut := p
	if int64(len(cut)) > l.left {
		cut = cut[:l.left]
	}
	n, err := l.w.Write(cut)
	l.left -= int64(n)
	if err == nil && len(cut) < len(p) {
		err = errLimitReached
	}
	return n, err
}
