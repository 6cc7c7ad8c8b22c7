package pathlock

// Real redis-server (or valkey-server) processes with the pathlock module, each on a free
// loopback port in a directory of its own, for the tests to start, pause, stop, and wire into a
// replica or a cluster. REDIS_SERVER names the server binary (default redis-server),
// PATHLOCK_MODULE the module (default target/release/libpathlock.so of this checkout).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type server struct {
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func serverBinary() string {
	if s := os.Getenv("REDIS_SERVER"); s != "" {
		return s
	}
	return "redis-server"
}

func modulePath() (string, error) {
	path := os.Getenv("PATHLOCK_MODULE")
	if path == "" {
		path = filepath.Join("..", "..", "target", "release", "libpathlock.so")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no module at %s: run `make build` or set PATHLOCK_MODULE", path)
	}
	return path, nil
}

// freePort is a loopback port nobody listens on; for a cluster node, its bus port (+10000) too.
func freePort(cluster bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port found")
}

func newServer(cluster bool, extra ...string) (*server, error) {
	module, err := modulePath()
	if err != nil {
		return nil, err
	}
	port, err := freePort(cluster)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pathlock-go-")
	if err != nil {
		return nil, err
	}
	s := &server{port: port, dir: dir, args: []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "no", "--loadmodule", module, "--logfile", "server.log",
	}}
	if cluster {
		s.args = append(s.args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	}
	s.args = append(s.args, extra...)
	if err := s.start(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *server) start() error {
	s.cmd = exec.Command(serverBinary(), s.args...)
	s.cmd.SysProcAttr = dieWithParent()
	if err := s.cmd.Start(); err != nil {
		return err
	}
	client := s.client()
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start: %v\n%s", serverBinary(), err, s.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr()})
}

// stop kills the server at once, as a crash would.
func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func (s *server) close() {
	s.stop()
	_ = os.RemoveAll(s.dir)
}

func (s *server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// ownServer is a server of the test's own, which it may pause or stop.
func ownServer(t testing.TB, extra ...string) *server {
	t.Helper()
	s, err := newServer(false, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// replicaOf starts a replica of master and waits for its link to be up.
func replicaOf(t testing.TB, master *server) *server {
	t.Helper()
	replica := ownServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	client := replica.client()
	defer client.Close()
	waitUntil(t, 10*time.Second, "the replica's link to be up", func() bool {
		info, _ := client.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	return replica
}

// The server and the cluster most tests share, started on first use and stopped by TestMain.
// Each test uses keys of its own, so that tests run in parallel.
var (
	shared struct {
		once    sync.Once
		server  *server
		err     error
		cluster []*server
		cOnce   sync.Once
		cErr    error
	}
)

func sharedServer(t testing.TB) *server {
	t.Helper()
	shared.once.Do(func() { shared.server, shared.err = newServer(false) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.server
}

// sharedCluster is a 3-master cluster, its slots split evenly, made with CLUSTER ADDSLOTSRANGE
// and CLUSTER MEET (no redis-cli needed).
func sharedCluster(t testing.TB) []*server {
	t.Helper()
	shared.cOnce.Do(func() { shared.cluster, shared.cErr = newCluster(3) })
	if shared.cErr != nil {
		t.Fatal(shared.cErr)
	}
	return shared.cluster
}

func newCluster(masters int) (nodes []*server, err error) {
	defer func() {
		if err != nil {
			for _, n := range nodes {
				n.close()
			}
			nodes = nil
		}
	}()
	ctx := context.Background()
	for range masters {
		n, err := newServer(true)
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, n)
	}
	for i, n := range nodes {
		c := n.client()
		first, last := i*16384/masters, (i+1)*16384/masters-1
		err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err()
		if err == nil && i > 0 {
			err = c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(nodes[0].port)).Err()
		}
		c.Close()
		if err != nil {
			return nodes, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		c := n.client()
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", masters)) {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				return nodes, fmt.Errorf("the cluster did not come up: %s", info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return nodes, nil
}

func clusterClient(t testing.TB, nodes []*server) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestMain(m *testing.M) {
	// The examples (example_test.go) talk to the shared server.
	shared.once.Do(func() { shared.server, shared.err = newServer(false) })
	if shared.err != nil {
		fmt.Fprintln(os.Stderr, shared.err)
		os.Exit(1)
	}
	SetExampleAddr(shared.server.addr())
	code := m.Run()
	if shared.server != nil {
		shared.server.close()
	}
	for _, n := range shared.cluster {
		n.close()
	}
	os.Exit(code)
}

func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
