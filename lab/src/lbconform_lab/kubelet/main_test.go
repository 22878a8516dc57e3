package main

// The server against client-go's own streaming clients (the SPDY executor and port-forwarder
// kubectl uses), over TLS with throwaway certificates, for "pods" that are local processes
// listed in a registry directory the test writes. Entering namespaces needs root: the tests
// skip without it. Run inside the lab's Kubernetes build module (lbconform's unit tests do):
//
//	go test ./cmd/lab-kubelet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	clientexec "k8s.io/client-go/util/exec"
)

const apiserverName = "kube-apiserver-kubelet-client"

type pemPair struct{ cert, key []byte }

type testPKI struct {
	caPEM   []byte
	server  pemPair
	clients map[string]pemPair
}

func newTestPKI(t *testing.T, clients ...string) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) pemPair {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
		return pemPair{
			pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		}
	}
	p := testPKI{
		caPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		server:  issue(2, "node", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")}),
		clients: map[string]pemPair{},
	}
	for i, cn := range clients {
		p.clients[cn] = issue(int64(10+i), cn, x509.ExtKeyUsageClientAuth, nil)
	}
	return p
}

// node is one server with its registry directory.
type node struct {
	t    *testing.T
	dir  string
	pki  testPKI
	srv  *httptest.Server
	logs string
}

func newNode(t *testing.T) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("entering namespaces needs root")
	}
	dir := t.TempDir()
	pki := newTestPKI(t, apiserverName, "intruder")
	for name, data := range map[string][]byte{
		"ca.crt": pki.caPEM, "node.crt": pki.server.cert, "node.key": pki.server.key,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tc, err := tlsConfig(config{
		certFile: filepath.Join(dir, "node.crt"), keyFile: filepath.Join(dir, "node.key"),
		clientCAFile: filepath.Join(dir, "ca.crt"),
	})
	if err != nil {
		t.Fatal(err)
	}
	pods := filepath.Join(dir, "pods")
	if err := os.Mkdir(pods, 0o755); err != nil {
		t.Fatal(err)
	}
	handler, err := newHandler(registry{dir: pods}, apiserverName)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = tc
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &node{t: t, dir: pods, pki: pki, srv: srv, logs: t.TempDir()}
}

// container starts a local process as container c of pod default/p (hostNetwork unless netns
// is given), its output in a fresh log; returns the process, reaped at the test's end.
func (n *node) container(name string, netns *string, argv ...string) *exec.Cmd {
	n.t.Helper()
	logPath := filepath.Join(n.logs, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "FROM_CONTAINER=yes")
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	_ = out.Close()
	n.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	n.publish(netns, map[string]containerRecord{name: {PID: &pid, Log: logPath}})
	return cmd
}

func (n *node) publish(netns *string, containers map[string]containerRecord) {
	rec := podRecord{Namespace: "default", Name: "p", UID: "uid-1", Netns: netns, IP: "127.0.0.1",
		Containers: containers}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(n.dir, "default_p.json"), data, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) restConfig(client string) *rest.Config {
	return &rest.Config{
		Host: n.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: n.pki.caPEM, CertData: n.pki.clients[client].cert, KeyData: n.pki.clients[client].key,
		},
	}
}

func (n *node) httpClient(client string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(n.pki.caPEM)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != "" {
		cert, err := tls.X509KeyPair(n.pki.clients[client].cert, n.pki.clients[client].key)
		if err != nil {
			n.t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

func (n *node) get(path string) (int, string) {
	n.t.Helper()
	resp, err := n.httpClient(apiserverName).Get(n.srv.URL + path)
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

type execResult struct {
	stdout, stderr string
	err            error
}

func (n *node) exec(container string, stdin io.Reader, tty bool, cmd ...string) execResult {
	n.t.Helper()
	q := url.Values{"command": cmd, "output": {"1"}}
	if stdin != nil {
		q.Set("input", "1")
	}
	if tty {
		q.Set("tty", "1")
	} else {
		q.Set("error", "1")
	}
	u, _ := url.Parse(n.srv.URL + "/exec/default/p/" + container + "?" + q.Encode())
	executor, err := remotecommand.NewSPDYExecutor(n.restConfig(apiserverName), "POST", u)
	if err != nil {
		n.t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Tty: tty}
	if !tty {
		opts.Stderr = &stderr
	}
	err = executor.StreamWithContext(ctx, opts)
	return execResult{stdout.String(), stderr.String(), err}
}

func exitCode(err error) int {
	var code clientexec.CodeExitError
	if errors.As(err, &code) {
		return code.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestExecPipesStdinStdoutStderrAndTheExitCode(t *testing.T) {
	n := newNode(t)
	n.container("c", nil, "sleep", "60")
	r := n.exec("c", strings.NewReader("from stdin\n"), false,
		"sh", "-c", `cat; echo "env=$FROM_CONTAINER"; echo oops >&2; exit 3`)
	if exitCode(r.err) != 3 {
		t.Fatalf("exit code %d (%v), want 3", exitCode(r.err), r.err)
	}
	if r.stdout != "from stdin\nenv=yes\n" || r.stderr != "oops\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := n.exec("c", nil, false, "true"); r.err != nil {
		t.Fatalf("exit 0 reported as %v", r.err)
	}
}

func TestExecRunsInTheContainersMountNamespaceAndDirectory(t *testing.T) {
	n := newNode(t)
	private := t.TempDir()
	// A "container" whose view of `private` is a tmpfs of its own, where it works.
	n.container("c", nil, "unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -t tmpfs lbc-test "$0" && echo inside > "$0/f" && cd "$0" && exec sleep 60`, private)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := n.exec("c", nil, false, "sh", "-c", "pwd; cat f")
		if r.err == nil {
			if r.stdout != private+"\ninside\n" {
				t.Fatalf("stdout %q", r.stdout)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec never saw the container's file: %v %q", r.err, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if entries, _ := os.ReadDir(private); len(entries) != 0 {
		t.Fatalf("the container's file leaked to the node: %v", entries)
	}
}

func TestExecWithATerminal(t *testing.T) {
	n := newNode(t)
	n.container("c", nil, "sleep", "60")
	r := n.exec("c", strings.NewReader("exit 4\n"), true, "sh", "-c", `test -t 0 && echo "tty $TERM"; read cmd; eval "$cmd"`)
	if exitCode(r.err) != 4 || !strings.Contains(r.stdout, "tty xterm") {
		t.Fatalf("exit %d (%v), stdout %q", exitCode(r.err), r.err, r.stdout)
	}
}

func TestExecIntoAStoppedContainerIsRefusedBeforeTheUpgrade(t *testing.T) {
	n := newNode(t)
	cmd := n.container("c", nil, "true")
	_ = cmd.Wait()
	r := n.exec("c", nil, false, "true")
	if r.err == nil || !strings.Contains(r.err.Error(), `container "c" in pod "default/p" is not running`) {
		t.Fatalf("got %v", r.err)
	}
}

func TestLogsTailLimitPreviousAndErrors(t *testing.T) {
	n := newNode(t)
	dir := t.TempDir()
	current, previous := filepath.Join(dir, "1.log"), filepath.Join(dir, "0.log")
	_ = os.WriteFile(current, []byte("one\ntwo\nthree\n"), 0o644)
	_ = os.WriteFile(previous, []byte("before\n"), 0o644)
	n.publish(nil, map[string]containerRecord{
		"c":       {Log: current, PreviousLog: previous},
		"waiting": {},
	})
	cases := []struct {
		path   string
		status int
		body   string
	}{
		{"/containerLogs/default/p/c", 200, "one\ntwo\nthree\n"},
		{"/containerLogs/default/p/c?tailLines=2", 200, "two\nthree\n"},
		{"/containerLogs/default/p/c?tailLines=0", 200, ""},
		{"/containerLogs/default/p/c?tailLines=9", 200, "one\ntwo\nthree\n"},
		{"/containerLogs/default/p/c?limitBytes=5", 200, "one\nt"},
		{"/containerLogs/default/p/c?tail=1", 200, "three\n"},
		{"/containerLogs/default/p/c?previous=true", 200, "before\n"},
		{"/containerLogs/default/p/c?follow=true", 200, "one\ntwo\nthree\n"}, // not running: ends
		{"/containerLogs/default/p/waiting?previous=true", 400, `previous terminated container "waiting" in pod "default/p" not found`},
		{"/containerLogs/default/p/waiting", 400, "is waiting to start"},
		{"/containerLogs/default/p/c?timestamps=true", 400, "carry no times"},
		{"/containerLogs/default/p/nope", 404, `container "nope" not found in pod "default/p" (it has: c, waiting)`},
		{"/containerLogs/default/absent/c", 404, `pod "default/absent" does not exist on this node`},
		{"/containerLogs/default/..%2Fetc/c", 404, "does not exist"},
		{"/exec/default/absent/c?command=true&output=1", 404, "does not exist"},
		{"/portForward/default/p/other-uid", 404, "with UID other-uid does not exist"},
		{"/healthz", 200, "ok"},
	}
	for _, c := range cases {
		status, body := n.get(c.path)
		if status != c.status || !strings.Contains(body, c.body) || (c.status == 200 && body != c.body) {
			t.Errorf("%s: %d %q, want %d %q", c.path, status, body, c.status, c.body)
		}
	}
}

func TestLogsFollowShowsLinesAsTheyComeAndEndsWithTheContainer(t *testing.T) {
	n := newNode(t)
	n.container("c", nil, "sh", "-c", "echo first; sleep 1; echo second; sleep 0.5")
	started := time.Now()
	resp, err := n.httpClient(apiserverName).Get(n.srv.URL + "/containerLogs/default/p/c?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != "first" || time.Since(started) > 900*time.Millisecond {
		t.Fatalf("first line %q after %v", lines.Text(), time.Since(started))
	}
	if !lines.Scan() || lines.Text() != "second" {
		t.Fatalf("second line %q", lines.Text())
	}
	if lines.Scan() {
		t.Fatalf("more than two lines: %q", lines.Text())
	}
	if took := time.Since(started); took > 5*time.Second {
		t.Fatalf("follow ended %v after the start, not with the container", took)
	}
}

func TestAttachStreamsTheOutputFromNowOn(t *testing.T) {
	n := newNode(t)
	n.container("c", nil, "sh", "-c", "echo before; sleep 2; echo after; sleep 0.3")
	time.Sleep(300 * time.Millisecond)
	u, _ := url.Parse(n.srv.URL + "/attach/default/p/c?output=1&error=1")
	executor, err := remotecommand.NewSPDYExecutor(n.restConfig(apiserverName), "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "after\n" {
		t.Fatalf("attach saw %q", out.String())
	}
	status, body := n.get("/attach/default/p/c?input=1&output=1")
	if status != 400 || !strings.Contains(body, "no stdin") {
		t.Fatalf("attach with stdin: %d %q", status, body)
	}
}

// forward opens a port-forward to the pod's port and returns the local end's address.
func (n *node) forward(port int) string {
	n.t.Helper()
	transport, upgrader, err := spdy.RoundTripperFor(n.restConfig(apiserverName))
	if err != nil {
		n.t.Fatal(err)
	}
	u, _ := url.Parse(n.srv.URL + "/portForward/default/p")
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.New(dialer, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		n.t.Fatal(err)
	}
	go func() { _ = pf.ForwardPorts() }()
	n.t.Cleanup(func() { close(stop) })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		n.t.Fatal("port-forward never became ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		n.t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
}

func roundTrip(t *testing.T, addr, send string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(send)); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(conn)
	return string(got)
}

func TestPortForwardToAHostNetworkPod(t *testing.T) {
	n := newNode(t)
	n.container("c", nil, "sleep", "60")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			got, _ := io.ReadAll(conn)
			_, _ = conn.Write(append([]byte("echo:"), got...))
			_ = conn.Close()
		}
	}()
	local := n.forward(l.Addr().(*net.TCPAddr).Port)
	for _, msg := range []string{"one", "two"} {
		if got := roundTrip(t, local, msg); got != "echo:"+msg {
			t.Fatalf("got %q", got)
		}
	}
}

func TestPortForwardEntersThePodsNetworkNamespace(t *testing.T) {
	n := newNode(t)
	// A pod with a network namespace of its own, listening on its own loopback only.
	listener := `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 18080)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"pod:" + c.recv(64)); c.close()`
	cmd := n.container("c", nil, "unshare", "--net", "--", "sh", "-c",
		`ip link set lo up && exec python3 -c "$0"`, listener)
	netnsDir = fmt.Sprintf("/proc/%d/ns", cmd.Process.Pid)
	t.Cleanup(func() { netnsDir = "/var/run/netns" })
	name := "net"
	pid := cmd.Process.Pid
	n.publish(&name, map[string]containerRecord{"c": {PID: &pid, Log: filepath.Join(n.logs, "c.log")}})
	// The process's view of /proc/net is its network namespace's: wait for the listening socket.
	listening := fmt.Sprintf("0100007F:%04X 00000000:0000 0A", 18080)
	deadline := time.Now().Add(10 * time.Second)
	for {
		table, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
		if strings.Contains(string(table), listening) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod never listened: %s", table)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := roundTrip(t, n.forward(18080), "hi"); got != "pod:hi" {
		t.Fatalf("got %q from the pod's port", got)
	}
}

func TestOnlyTheApiserverIsServed(t *testing.T) {
	n := newNode(t)
	resp, err := n.httpClient("intruder").Get(n.srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another client of the CA got %d", resp.StatusCode)
	}
	if resp, err := n.httpClient("").Get(n.srv.URL + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a client without a certificate got %d", resp.StatusCode)
	}
}
