package main

// A terminal for `kubectl exec -t`: a pseudo-terminal pair from /dev/ptmx, the command's
// session led by its slave side, resizes from the client applied to the master side.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// openPTY returns a new pseudo-terminal's master and slave ends.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var number int
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return err
		}
		number, err = unix.IoctlGetInt(fd, unix.TIOCGPTN)
		return err
	})
	if err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", number), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// control runs fn on the file's descriptor without taking it out of the runtime's poller
// (File.Fd would make it blocking, and Close would then no longer interrupt a Read).
func control(f *os.File, fn func(fd int) error) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var inner error
	if err := raw.Control(func(fd uintptr) { inner = fn(int(fd)) }); err != nil {
		return err
	}
	return inner
}

// runInTerminal runs proc with a terminal as its stdin, stdout and stderr.
func runInTerminal(proc *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	master, slave, err := openPTY()
	if err != nil {
		return err
	}
	defer func() { _ = master.Close() }()
	proc.Stdin, proc.Stdout, proc.Stderr = slave, slave, slave
	proc.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = proc.Start()
	_ = slave.Close()
	if err != nil {
		return err
	}
	if resize != nil {
		// Ends when the client's resize stream does (the streaming code closes the channel).
		go func() {
			for size := range resize {
				_ = control(master, func(fd int) error {
					return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
				})
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	if out == nil {
		out = io.Discard
	}
	copied := make(chan struct{})
	go func() {
		// Ends with EIO once no process holds the terminal any more.
		_, _ = io.Copy(out, master)
		close(copied)
	}()
	waitErr := proc.Wait()
	select {
	case <-copied:
	case <-time.After(outputDrainTimeout):
	}
	return exitStatus(waitErr)
}
