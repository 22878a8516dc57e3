package main

// The kubelet API's routes, laid out as the kubelet lays them out (pkg/kubelet/server/server.go:
// each path with and without the pod's UID, GET and POST for the streaming ones), behind the
// one check this server makes of its caller: the apiserver's client certificate.

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

const (
	// A streaming connection with no traffic for this long is closed (the kubelet's
	// streamingConnectionIdleTimeout default).
	streamIdleTimeout = 4 * time.Hour
	// How long a client has to open the streams it asked for after the upgrade.
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

type server struct {
	pods    registry
	allowed string
}

func newHandler(pods registry, allowed string) (http.Handler, error) {
	if allowed == "" {
		return nil, errors.New("no client identity to serve")
	}
	s := &server{pods: pods, allowed: allowed}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	for _, method := range []string{"GET", "POST"} {
		for _, suffix := range []string{"{namespace}/{pod}/{container}", "{namespace}/{pod}/{uid}/{container}"} {
			mux.HandleFunc(method+" /exec/"+suffix, s.exec)
			mux.HandleFunc(method+" /attach/"+suffix, s.attach)
		}
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	return s.authenticated(mux), nil
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

// authenticated serves only the allowed client; the TLS handshake already required a client
// certificate signed by the lab's CA.
func (s *server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "Unauthorized: a client certificate is required", http.StatusUnauthorized)
			return
		}
		who := r.TLS.PeerCertificates[0].Subject.CommonName
		if who != s.allowed {
			log.Printf("refused %s %s: client %q is not %q", r.Method, r.URL.Path, who, s.allowed)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not use this node's kubelet API "+
				"(the lab's kubelet serves only the apiserver, %q)", who, s.allowed), http.StatusForbidden)
			return
		}
		log.Printf("%s %s", r.Method, r.URL.Path)
		next.ServeHTTP(w, r)
	})
}

// fail answers an error that came before any upgrade: 404 for what this node does not have.
func fail(w http.ResponseWriter, err error, status int) {
	var nf notFound
	if errors.As(err, &nf) {
		status = http.StatusNotFound
	}
	http.Error(w, err.Error(), status)
}

// target finds the pod and container a request names, and checks the UID when it names one.
func (s *server) target(r *http.Request) (*podRecord, containerRecord, error) {
	rec, c, err := s.pods.container(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"))
	if err != nil {
		return nil, c, err
	}
	if uid := r.PathValue("uid"); uid != "" && uid != rec.UID {
		return nil, c, notFound{fmt.Sprintf("pod %q with UID %s does not exist on this node", rec.key(), uid)}
	}
	return rec, c, nil
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
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
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		fail(w, errors.New("no command given: exec needs at least one command parameter"), http.StatusBadRequest)
		return
	}
	pid := c.running()
	if pid == 0 {
		fail(w, fmt.Errorf("container %q in pod %q is not running", name, rec.key()), http.StatusBadRequest)
		return
	}
	runner := &containerProcess{pod: rec, name: name, pid: pid, opts: *opts}
	remotecommand.ServeExec(w, r, runner, rec.key(), rec.UID, name, cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *server) attach(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
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
	if opts.Stdin {
		fail(w, fmt.Errorf("container %q in pod %q has no stdin to attach to (the lab runs containers "+
			"with stdin from /dev/null): attach without -i/--stdin", name, rec.key()), http.StatusBadRequest)
		return
	}
	pid := c.running()
	if pid == 0 {
		fail(w, fmt.Errorf("container %q in pod %q is not running", name, rec.key()), http.StatusBadRequest)
		return
	}
	runner := &containerProcess{pod: rec, name: name, pid: pid, opts: *opts, log: c.Log, pods: s.pods}
	remotecommand.ServeAttach(w, r, runner, rec.key(), rec.UID, name, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *server) portForward(w http.ResponseWriter, r *http.Request) {
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	rec, err := s.pods.pod(r.PathValue("namespace"), r.PathValue("pod"))
	if err == nil && r.PathValue("uid") != "" && r.PathValue("uid") != rec.UID {
		err = notFound{fmt.Sprintf("pod %q with UID %s does not exist on this node", rec.key(), r.PathValue("uid"))}
	}
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	nsPath, err := rec.netnsPath()
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	portforward.ServePortForward(w, r, &podPorts{pod: rec, netns: nsPath}, rec.key(), rec.UID, opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}
