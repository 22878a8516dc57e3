package main

// Exec and attach, the runtime's half of them: the streaming code (ServeExec, ServeAttach)
// hands over the client's streams, and this file runs a command in a container or copies a
// container's output to them.
//
// A lab container is a process in its own mount and UTS namespaces, in its pod's network
// namespace (the agent's rootfs and sandbox modules). A command runs where the container does
// by nsenter into those three namespaces of the container's process, with its environment
// (/proc/PID/environ) and working directory, as a CRI runtime's exec runs with the
// container's process spec. nsenter does not fork for these namespaces, so the command's exit
// status is nsenter's and reaches kubectl as the exit code.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// outputDrainTimeout bounds how long an exec waits, once its command has exited, for output
// still held open by processes the command left behind.
const outputDrainTimeout = 2 * time.Second

// containerProcess is one request's view of one container: its process and, for attach, the
// run's log, which holds everything the process writes.
type containerProcess struct {
	pod  *podRecord
	name string
	pid  int
	opts remotecommand.Options
	log  string
	pods registry
}

var (
	_ remotecommand.Executor = (*containerProcess)(nil)
	_ remotecommand.Attacher = (*containerProcess)(nil)
)

// ExecInContainer runs cmd in the container's namespaces and returns its exit status as the
// streaming code expects it: nil, or an ExitError that carries the code.
func (c *containerProcess) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize,
	_ time.Duration) error {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("nsenter (util-linux) is needed to enter containers: %w", err)
	}
	env, err := processEnv(c.pid)
	if err != nil {
		return fmt.Errorf("container %q in pod %q: %w", c.name, c.pod.key(), err)
	}
	if tty && !hasVar(env, "TERM") {
		env = append(env, "TERM=xterm") // as container runtimes do for a terminal
	}
	// --wd without a directory: the working directory of the container's process.
	args := append([]string{"--target", strconv.Itoa(c.pid), "--mount", "--uts", "--net", "--wd", "--"}, cmd...)
	proc := exec.CommandContext(ctx, nsenter, args...)
	proc.Env = env
	proc.WaitDelay = outputDrainTimeout
	if !c.opts.Stdin {
		in = nil
	}
	if tty {
		return runInTerminal(proc, in, out, resize)
	}
	var stdin io.WriteCloser
	if in != nil {
		if stdin, err = proc.StdinPipe(); err != nil {
			return err
		}
	}
	if c.opts.Stdout && out != nil {
		proc.Stdout = out
	}
	if c.opts.Stderr && errOut != nil {
		proc.Stderr = errOut
	}
	if err := proc.Start(); err != nil {
		return err
	}
	if stdin != nil {
		// Not waited for: the client may hold stdin open after the command has exited (Wait
		// closes the pipe then, and the connection's end stops this copy).
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	return exitStatus(proc.Wait())
}

// AttachContainer copies what the container writes from now on, until it stops running or
// the client goes away. Lab containers write stdout and stderr to one log, so it all goes to
// the first output stream the client asked for.
func (c *containerProcess) AttachContainer(ctx context.Context, _, _, _ string, _ io.Reader,
	out, errOut io.WriteCloser, _ bool, resize <-chan remotecommand.TerminalSize) error {
	go discardResizes(ctx, resize) // the container has no terminal to resize
	var w io.Writer = io.Discard
	switch {
	case c.opts.Stdout && out != nil:
		w = out
	case c.opts.Stderr && errOut != nil:
		w = errOut
	}
	if c.log == "" {
		return fmt.Errorf("container %q in pod %q has no log yet", c.name, c.pod.key())
	}
	f, err := os.Open(c.log)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	stillRunning := func() bool {
		_, now, err := c.pods.container(c.pod.Namespace, c.pod.Name, c.name)
		return err == nil && now.Log == c.log && now.running() == c.pid
	}
	err = copyLog(ctx, f, w, stillRunning)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func discardResizes(ctx context.Context, resize <-chan remotecommand.TerminalSize) {
	for {
		select {
		case _, ok := <-resize:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// exitStatus turns Wait's result into what ServeExec reports: a non-zero exit (128+N for a
// death by signal N, as container runtimes report it) carries its code to the client.
func exitStatus(err error) error {
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil // exited 0; only output held by what it left behind was cut
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return err
	}
	code := exitErr.ExitCode()
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// processEnv is a process's environment as it was started.
func processEnv(pid int) ([]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil, fmt.Errorf("cannot read its environment: %w", err)
	}
	var env []string
	for _, kv := range strings.Split(string(data), "\x00") {
		if kv != "" {
			env = append(env, kv)
		}
	}
	return env, nil
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}
