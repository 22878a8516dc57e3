package main

// The node agent's pod registry, read-only: one JSON file per pod, replaced atomically by the
// agent whenever a container starts, stops or gets a new log (format: the Python module
// lbconform.lab.agent.registry). Read afresh on every request: a pod's processes change
// under a running server, and the files are small.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Names as the apiserver validates them (DNS-1123 subdomains and labels); anything else
// cannot name a pod, and never reaches the file system.
var (
	subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	netnsName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
)

// netnsDir is where `ip netns` keeps its named network namespaces (a variable for the tests).
var netnsDir = "/var/run/netns"

type containerRecord struct {
	// PID is the container's running process, nil when it does not run.
	PID *int `json:"pid"`
	// Log is this run's log file ("" before the first run); PreviousLog the run's before.
	Log         string `json:"log"`
	PreviousLog string `json:"previousLog"`
}

type podRecord struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Netns is the pod's network namespace, nil for a hostNetwork pod (the node's).
	Netns      *string                    `json:"netns"`
	IP         string                     `json:"ip"`
	Containers map[string]containerRecord `json:"containers"`
}

func (p *podRecord) key() string { return p.Namespace + "/" + p.Name }

// netnsPath is the pod's network namespace file, "" for a hostNetwork pod.
func (p *podRecord) netnsPath() (string, error) {
	if p.Netns == nil {
		return "", nil
	}
	if !netnsName.MatchString(*p.Netns) {
		return "", fmt.Errorf("pod %s names no valid network namespace (%q)", p.key(), *p.Netns)
	}
	return filepath.Join(netnsDir, *p.Netns), nil
}

// notFound is a request for a pod or container this node does not have: an HTTP 404.
type notFound struct{ msg string }

func (e notFound) Error() string { return e.msg }

type registry struct{ dir string }

// pod reads one pod's record; a notFound error when the node has no such pod.
func (r registry) pod(namespace, name string) (*podRecord, error) {
	missing := notFound{fmt.Sprintf("pod %q does not exist on this node", namespace+"/"+name)}
	if !label.MatchString(namespace) || !subdomain.MatchString(name) {
		return nil, missing
	}
	data, err := os.ReadFile(filepath.Join(r.dir, namespace+"_"+name+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, missing
	}
	if err != nil {
		return nil, err
	}
	var rec podRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("the record of pod %s is damaged: %w", namespace+"/"+name, err)
	}
	return &rec, nil
}

// container finds one container of a pod; a notFound error names the containers there are.
func (r registry) container(namespace, name, container string) (*podRecord, containerRecord, error) {
	rec, err := r.pod(namespace, name)
	if err != nil {
		return nil, containerRecord{}, err
	}
	c, ok := rec.Containers[container]
	if !ok {
		names := make([]string, 0, len(rec.Containers))
		for n := range rec.Containers {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, containerRecord{}, notFound{fmt.Sprintf(
			"container %q not found in pod %q (it has: %s)", container, rec.key(), strings.Join(names, ", "))}
	}
	return rec, c, nil
}

// running is the container's process id when it runs now; 0 when it does not.
func (c containerRecord) running() int {
	if c.PID == nil || *c.PID <= 0 {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(*c.PID) + "/stat")
	if err != nil {
		return 0
	}
	// The state follows the command name, which may hold spaces and parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	if fields := strings.Fields(rest); len(fields) == 0 || fields[0] == "Z" || fields[0] == "X" {
		return 0
	}
	return *c.PID
}
