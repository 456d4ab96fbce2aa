package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// Etcd is Debian's etcd-server binary.
const Etcd = "/usr/bin/etcd"

// APIServerPath is where build-kube.sh leaves the binary.
func APIServerPath() string {
	if p := os.Getenv("KUBE_APISERVER"); p != "" {
		return p
	}
	cache := os.Getenv("IPTA_CACHE")
	if cache == "" {
		cache = "/var/cache/iptables-alerter"
	}
	return filepath.Join(cache, "kube", "bin", "kube-apiserver")
}

// Need skips (or under CI=true fails) the test when etcd or kube-apiserver
// is missing; -short skips it always.
func Need(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping with -short: starts a real etcd and kube-apiserver")
	}
	_, err := os.Stat(Etcd)
	nstest.Need(t, err == nil, "needs "+Etcd+" (apt-get install etcd-server)")
	_, err = os.Stat(APIServerPath())
	nstest.Need(t, err == nil, "needs "+APIServerPath()+" (run tests/kube/build-kube.sh)")
}

// Cluster is one etcd and one kube-apiserver.
type Cluster struct {
	// URL is the API server's https address on 127.0.0.1.
	URL string
	// CAFile and CA hold the CA that signed the serving certificate.
	CAFile string
	CA     []byte
	// AdminToken authenticates as user "admin" in system:masters.
	AdminToken string
	// Dir holds certificates, keys and the process logs (etcd's data is
	// on tmpfs: nstest.RAMDir).
	Dir string

	t       testing.TB
	etcd    *exec.Cmd
	api     *exec.Cmd
	apiArgs []string
	apiPort int
	apiLog  string
	etcdLog string
	stopped bool
	// netns, when set, is the network namespace (a /run/netns path) etcd
	// and kube-apiserver run in; the test reaches them through Dial.
	netns string
}

// Start runs etcd and kube-apiserver and waits until /readyz answers ok.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartIn(t, "")
}

// StartIn is Start with etcd and kube-apiserver inside the network
// namespace at netns (empty: the test's own), e.g. for a kubelet that must
// not touch the host's firewall; 127.0.0.1 is then that namespace's.
func StartIn(t testing.TB, netns string) *Cluster {
	t.Helper()
	return start(t, netns, nil)
}

// StartArgs is Start with more kube-apiserver flags after the defaults:
// a flag given again wins, e.g. --event-ttl=30s for Events that expire
// while the test runs.
func StartArgs(t testing.TB, apiArgs ...string) *Cluster {
	t.Helper()
	return start(t, "", apiArgs)
}

func start(t testing.TB, netns string, extra []string) *Cluster {
	t.Helper()
	Need(t)
	dir := t.TempDir()
	// Before stopAll's cleanup, so removed after etcd is stopped.
	etcdDir := nstest.RAMDir(t)
	c := &Cluster{t: t, Dir: dir, AdminToken: randHex(16), netns: netns}
	t.Cleanup(c.stopAll)

	c.writePKI()
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"),
		[]byte(c.AdminToken+",admin,admin-uid,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatalf("write token file: %v", err)
	}

	// A port free a moment ago can be taken by another test's server
	// before ours binds it: a server that exits on a bind error gets new
	// ports, a few times.
	var etcdURL string
	c.etcdLog = filepath.Join(dir, "etcd.log")
	for attempt := 0; ; attempt++ {
		clientPort, peerPort := freePort(t), freePort(t)
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		c.etcd = c.spawn(Etcd, c.etcdLog,
			"--name=kubetest",
			"--data-dir="+filepath.Join(etcdDir, "etcd"+strconv.Itoa(attempt)),
			"--listen-client-urls="+etcdURL,
			"--advertise-client-urls="+etcdURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=kubetest="+peerURL,
		)
		if !c.waitHTTP(etcdURL+"/health", nil, "", 60*time.Second, c.etcdLog, c.etcd, attempt < maxBindRetries) {
			break
		}
	}

	c.apiLog = filepath.Join(dir, "kube-apiserver.log")
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + filepath.Join(dir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "serving.key"),
		"--client-ca-file=" + filepath.Join(dir, "ca.crt"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/24",
		// No controller-manager runs, so nothing creates the default
		// ServiceAccount a pod would otherwise need.
		"--disable-admission-plugins=ServiceAccount",
		"--event-ttl=1h",
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
	}
	// A flag given again wins: the default is dropped (a list flag such as
	// --authorization-mode would take both), and --authorization-config
	// replaces --authorization-mode, which it may not meet.
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		if name == "--authorization-config" {
			name = "--authorization-mode"
		}
		args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, name+"=") })
	}
	args = append(args, extra...)
	for attempt := 0; ; attempt++ {
		c.apiPort = freePort(t)
		c.URL = "https://127.0.0.1:" + strconv.Itoa(c.apiPort)
		c.apiArgs = append(slices.Clip(args), "--secure-port="+strconv.Itoa(c.apiPort))
		if !c.startAPIServer(attempt < maxBindRetries) {
			break
		}
	}
	return c
}

// maxBindRetries bounds the new ports a server that lost its port gets.
const maxBindRetries = 4

// StartAPIServer (re)starts kube-apiserver on the same port and etcd.
func (c *Cluster) StartAPIServer() {
	c.t.Helper()
	c.startAPIServer(false)
}

// startAPIServer starts kube-apiserver and waits until it is ready; with
// retry, a server that exited on a bind error is reported (true) instead
// of failing the test.
func (c *Cluster) startAPIServer(retry bool) bool {
	c.t.Helper()
	c.api = c.spawn(APIServerPath(), c.apiLog, c.apiArgs...)
	return c.waitHTTP(c.URL+"/readyz", c.caPool(), c.AdminToken, 180*time.Second, c.apiLog, c.api, retry)
}

// StopAPIServer stops kube-apiserver and waits until it is gone; etcd and
// its data stay.
func (c *Cluster) StopAPIServer() {
	c.t.Helper()
	stop(c.api)
	c.api = nil
}

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash or an OOM
// kill would, and waits until it is gone.
func (c *Cluster) KillAPIServer() {
	c.t.Helper()
	if c.api != nil && c.api.Process != nil {
		_ = c.api.Process.Kill()
		stop(c.api)
	}
	c.api = nil
}

// Config is a client config for the API server with a bearer token.
func (c *Cluster) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CA},
		Timeout:         30 * time.Second,
		QPS:             100,
		Burst:           200,
		Dial:            c.Dial,
	}
}

// Dial connects from the cluster's network namespace (plain DialContext
// when it runs in the test's own).
func (c *Cluster) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.netns == "" {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return DialIn(ctx, c.netns, network, addr)
}

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface {
	c.t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		c.t.Fatalf("make admin client: %v", err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig file using token and returns its path.
func (c *Cluster) Kubeconfig(name, token string) string {
	c.t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.CAFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(c.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		c.t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// LogTail returns the end of the API server's log, for failure messages.
func (c *Cluster) LogTail() string { return tail(c.apiLog, 4000) }

func (c *Cluster) stopAll() {
	if c.t.Failed() && c.api != nil {
		c.t.Logf("kube-apiserver goroutines at the end of the failed test:\n%s", c.goroutines())
	}
	stop(c.api)
	stop(c.etcd)
	if c.t.Failed() {
		c.t.Logf("kube-apiserver log tail:\n%s", tail(c.apiLog, 1500))
		c.t.Logf("etcd log tail:\n%s", tail(c.etcdLog, 600))
	}
}

// maxGoroutineDump bounds the goroutine dump a failed test logs: the
// stacks most goroutines share come first.
const maxGoroutineDump = 30000

// goroutines is the running API server's goroutine profile, grouped by
// stack: where a request that got no answer waits (CI once saw a list of
// Reports hang for the client's 30 s with nothing in either log).
func (c *Cluster) goroutines() string {
	// The admin's client (Config): its CA, token and netns dialer.
	client, err := rest.HTTPClientFor(c.Config(c.AdminToken))
	if err != nil {
		return err.Error()
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/debug/pprof/goroutine?debug=1", nil)
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxGoroutineDump))
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s\n%s", resp.Status, b)
}

func (c *Cluster) spawn(bin, logPath string, args ...string) *exec.Cmd {
	c.t.Helper()
	// Killed by the next test binary's sweep if this one dies first.
	nstest.MarkOwner()
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatalf("open log %q: %v", logPath, err)
	}
	cmd := exec.Command(bin, args...)
	if c.netns != "" {
		// nsenter execs the binary (no fork for --net), so cmd's pid is
		// the server's own and stop reaches it.
		cmd = exec.Command("nsenter", append([]string{"--net=" + c.netns, "--", bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group, so a ^C on the test does not reach it before the
	// cleanup stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		c.t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		_ = cmd.Wait()
		lf.Close()
	}()
	return cmd
}

// stop sends SIGTERM, and SIGKILL if the process lingers.
func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if cmd.Process.Signal(syscall.Signal(0)) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	for range 100 {
		if cmd.Process.Signal(syscall.Signal(0)) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHTTP waits until url answers 200. It fails the test when the limit
// passes or the server's process cmd ends first, except that with retry
// a process that ended on a bind error ("address already in use") is
// reported (true): its port was taken between freePort and its bind, and
// another answer on that port is not ours.
func (c *Cluster) waitHTTP(url string, pool *x509.CertPool, token string, limit time.Duration, logPath string, cmd *exec.Cmd, retry bool) (lostPort bool) {
	c.t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: c.Dial}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		if cmd.Process.Signal(syscall.Signal(0)) != nil {
			// Ended (spawn's goroutine reaped it); its log is complete.
			if retry && strings.Contains(tail(logPath, 3000), "address already in use") {
				c.t.Logf("%s lost its port to another process; trying another", filepath.Base(cmd.Path))
				return true
			}
			c.t.Fatalf("%s: the server exited before it was ready\nlog tail:\n%s", url, tail(logPath, 3000))
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			resp.Body.Close()
			// A 200 counts once the process holds the port's listening
			// socket: until then it came from another server, and the
			// process, still starting on a loaded machine or about to
			// exit on its lost port, is looked at again.
			if resp.StatusCode == http.StatusOK {
				if listens(cmd.Process.Pid, resp.Request.URL.Port()) {
					return false
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b.String())
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("%s not ready after %s: %s\nlog tail:\n%s", url, limit, last, tail(logPath, 3000))
	return false
}

// listens tells whether process pid holds a listening TCP socket on port
// (decimal) in its network namespace: one of its descriptors is the
// socket /proc/PID/net/tcp{,6} lists on that local port in state LISTEN.
func listens(pid int, port string) bool {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[l] {
			return true
		}
	}
	return false
}

func (c *Cluster) caPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(c.CA)
	return p
}

// writePKI makes a CA, a serving certificate for 127.0.0.1 and the
// service-account key pair; the test owns them all.
func (c *Cluster) writePKI() {
	c.t.Helper()
	caKey := genKey(c.t)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		c.t.Fatalf("create CA: %v", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey := genKey(c.t)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		c.t.Fatalf("create serving cert: %v", err)
	}
	saKey := genKey(c.t)
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		c.t.Fatalf("marshal sa key: %v", err)
	}
	c.CA = pemBlock("CERTIFICATE", caDER)
	c.CAFile = filepath.Join(c.Dir, "ca.crt")
	files := map[string][]byte{
		"ca.crt":      c.CA,
		"serving.crt": pemBlock("CERTIFICATE", srvDER),
		"serving.key": pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(srvKey)),
		"sa.key":      pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)),
		"sa.pub":      pemBlock("PUBLIC KEY", saPub),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), data, 0o600); err != nil {
			c.t.Fatalf("write %s: %v", name, err)
		}
	}
}

func genKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return k
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func freePort(t testing.TB) int { return nstest.FreePort(t) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// Ctx is a context bounded by a minute, cancelled when the test ends.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
