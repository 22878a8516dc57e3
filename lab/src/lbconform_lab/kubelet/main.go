// Command lab-kubelet serves the kubelet's API for the pods a lab node agent runs.
//
// The node agent (Python) plays the kubelet: it runs each pod's containers as local processes
// in the pod's own namespaces. What the apiserver asks of a kubelet for `kubectl logs`, `exec`,
// `attach` and `port-forward` is served here, on the node's address and the kubelet's port,
// with the kubelet's own streaming code (k8s.io/cri-streaming: the SPDY and WebSocket
// protocols of exec, attach and port-forward), so what kubectl and the apiserver speak to a lab
// node is the real protocol. This program owns only the lab's side of it: where a pod's
// processes and logs are (the agent's pod registry, registry.go), and how a command is run
// in a container (exec.go), its log read (logs.go) or a port reached (portforward.go).
//
// Like the kubelet it requires TLS client certificates; unlike the kubelet, which asks the
// apiserver to authorize each caller, it accepts only the apiserver's kubelet-client identity.
// It ends when the agent that started it is gone, as a kubelet's API dies with the kubelet.
//
// The source ships inside the lbconform Python package and is built by `lbconform lab build`
// inside the Kubernetes build module, so it links the same pinned k8s.io modules as the lab's
// control plane.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// How often the server checks that the agent that started it is still there.
const parentCheckInterval = time.Second

// A slow client may not hold a connection open forever before its request is read.
const readHeaderTimeout = 10 * time.Second

type config struct {
	address        string
	port           int
	healthzPort    int
	certFile       string
	keyFile        string
	clientCAFile   string
	allowed        string
	podsDir        string
	exitOnReparent bool
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("lab-kubelet", flag.ContinueOnError)
	fs.StringVar(&c.address, "address", "", "the node's IP address to serve on")
	fs.IntVar(&c.port, "port", 10250, "the kubelet API's port (HTTPS)")
	fs.IntVar(&c.healthzPort, "healthz-port", 10248, "plain-HTTP /healthz on 127.0.0.1 (0: off)")
	fs.StringVar(&c.certFile, "tls-cert-file", "", "serving certificate for the node's address")
	fs.StringVar(&c.keyFile, "tls-private-key-file", "", "key of the serving certificate")
	fs.StringVar(&c.clientCAFile, "client-ca-file", "", "CA that signs accepted client certificates")
	fs.StringVar(&c.allowed, "allowed-client", "", "the only client certificate common name served (the apiserver's)")
	fs.StringVar(&c.podsDir, "pods-dir", "", "the node agent's pod registry directory")
	fs.BoolVar(&c.exitOnReparent, "exit-with-parent", true, "exit once the process that started this one is gone")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for name, v := range map[string]string{
		"address": c.address, "tls-cert-file": c.certFile, "tls-private-key-file": c.keyFile,
		"client-ca-file": c.clientCAFile, "allowed-client": c.allowed, "pods-dir": c.podsDir,
	} {
		if v == "" {
			return c, fmt.Errorf("--%s is required", name)
		}
	}
	return c, nil
}

// tlsConfig serves the node's certificate and requires a client certificate from the lab's CA.
func tlsConfig(c config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	pem, err := os.ReadFile(c.clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA %s holds no PEM certificate", c.clientCAFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// exitWithParent ends the process once it has been re-parented: the agent that started it died.
func exitWithParent() {
	parent := os.Getppid()
	for range time.Tick(parentCheckInterval) {
		if os.Getppid() != parent {
			log.Printf("the agent (pid %d) is gone: exiting", parent)
			os.Exit(0)
		}
	}
}

func run(args []string) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	tc, err := tlsConfig(c)
	if err != nil {
		return err
	}
	if c.exitOnReparent {
		go exitWithParent()
	}
	handler, err := newHandler(registry{dir: c.podsDir}, c.allowed)
	if err != nil {
		return err
	}
	errs := make(chan error, 2)
	if c.healthzPort != 0 {
		health := http.NewServeMux()
		health.HandleFunc("GET /healthz", healthz)
		hs := &http.Server{
			Addr:              net.JoinHostPort("127.0.0.1", strconv.Itoa(c.healthzPort)),
			Handler:           health,
			ReadHeaderTimeout: readHeaderTimeout,
		}
		go func() { errs <- hs.ListenAndServe() }()
	}
	srv := &http.Server{
		Addr:              net.JoinHostPort(c.address, strconv.Itoa(c.port)),
		Handler:           handler,
		TLSConfig:         tc,
		ReadHeaderTimeout: readHeaderTimeout,
		// The streaming upgrades need the plain HTTP/1.1 connection to hijack.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	log.Printf("serving the kubelet API on %s for %s (pods in %s)", srv.Addr, c.allowed, c.podsDir)
	go func() { errs <- srv.ListenAndServeTLS("", "") }()
	return <-errs
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		log.Printf("lab-kubelet: %v", err)
		os.Exit(1)
	}
}
