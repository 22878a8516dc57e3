package main

// Port-forward, the runtime's half: each forwarded connection is a TCP connection to
// localhost:PORT inside the pod's network namespace (the node's, for a hostNetwork pod, which
// is where this server runs), as CRI runtimes make it.
//
// The socket is made on an OS thread that has entered the pod's namespace with setns(2) and
// never leaves it: the goroutine keeps the thread locked and ends locked, so the Go runtime
// retires the thread instead of running anything else in the pod's namespace. A socket stays
// in the namespace it was made in, so the connection is then used from any thread.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// How long a connection to the pod's port may take to open.
const dialTimeout = 10 * time.Second

// podPorts forwards to one pod's ports.
type podPorts struct {
	pod   *podRecord
	netns string // "" for a hostNetwork pod
}

var _ portforward.PortForwarder = (*podPorts)(nil)

// PortForward copies between the client's stream and a new connection to the pod's port,
// until the pod's side of the connection ends.
func (p *podPorts) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	conn, err := p.dial(port)
	if err != nil {
		return fmt.Errorf("cannot connect to port %d of pod %s: %w", port, p.pod.key(), err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	go func() {
		_, _ = io.Copy(conn, stream)
		// The client is done sending: pass the half-close on, as a TCP proxy does.
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}()
	if _, err := io.Copy(stream, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("port %d of pod %s: %w", port, p.pod.key(), err)
	}
	return nil
}

func (p *podPorts) dial(port int32) (net.Conn, error) {
	if p.netns == "" {
		return dialLocalhost(port)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Deliberately never unlocked: see the file's comment.
		runtime.LockOSThread()
		fd, err := unix.Open(p.netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{nil, fmt.Errorf("network namespace of the pod: %w", err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		_ = unix.Close(fd)
		if err != nil {
			done <- result{nil, fmt.Errorf("cannot enter the pod's network namespace: %w", err)}
			return
		}
		conn, err := dialLocalhost(port)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// dialLocalhost connects to localhost:port, IPv4 first, on the calling thread: with an
// address literal, net makes the socket on the calling goroutine, which "localhost" (a name
// with two addresses, dialled in parallel) would not.
func dialLocalhost(port int32) (net.Conn, error) {
	p := strconv.Itoa(int(port))
	conn, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", p), dialTimeout)
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		return conn, err
	}
	if conn6, err6 := net.DialTimeout("tcp6", net.JoinHostPort("::1", p), dialTimeout); err6 == nil {
		return conn6, nil
	}
	return nil, err
}
