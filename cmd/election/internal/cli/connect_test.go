package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// secret is the password, token or key material of every test here: no
// output may contain it.
const secret = "s3cretPa55"

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// wantConnects runs bucket create with args and env, and checks it connects
// (exit 0) or not (exit 1), printing no secret either way.
func wantConnects(t *testing.T, connects bool, env map[string]string, args ...string) {
	t.Helper()
	isolateNATSEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	code := Main(append([]string{"bucket", "create", "--bucket", "AUTH"}, args...), &out, &errOut)
	stdout, stderr := out.String(), errOut.String()
	isolateNATSEnv(t)
	want := ExitOK
	if !connects {
		want = ExitError
	}
	if code != want {
		t.Errorf("%v %v: exit %d, want %d:\n%s%s", env, args, code, want, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Errorf("%v %v printed a secret:\n%s%s", env, args, stdout, stderr)
	}
}

func TestUserAndPasswordTokenAndNkey(t *testing.T) {
	seed, pub := userNkey(t)
	users := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "app", Password: secret}}
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	})
	token := testenv.ConfiguredServer(t, func(o *server.Options) { o.Authorization = secret })
	seedFile := writeFile(t, "user.nk", seed)
	otherSeed, _ := userNkey(t)
	otherSeedFile := writeFile(t, "other.nk", otherSeed)
	u, tk := users.ClientURL(), token.ClientURL()

	wantConnects(t, true, nil, "-s", u, "--user", "app", "--password", secret)
	wantConnects(t, false, nil, "-s", u, "--user", "app", "--password", "wrong"+secret)
	wantConnects(t, false, nil, "-s", u)
	wantConnects(t, true, map[string]string{"NATS_USER": "app", "NATS_PASSWORD": secret}, "-s", u)
	wantConnects(t, true, map[string]string{"NATS_PASSWORD": "wrong" + secret}, "-s", u, "--user", "app", "--password", secret)
	wantConnects(t, true, nil, "-s", u, "--nkey", seedFile)
	wantConnects(t, true, map[string]string{"NATS_NKEY": seedFile}, "-s", u)
	wantConnects(t, false, nil, "-s", u, "--nkey", otherSeedFile)

	wantConnects(t, true, nil, "-s", tk, "--token", secret)
	wantConnects(t, true, nil, "-s", tk, "--user", secret) // a lone --user is a token, as in the nats CLI
	wantConnects(t, true, map[string]string{"NATS_TOKEN": secret}, "-s", tk)
	wantConnects(t, false, nil, "-s", tk, "--token", "wrong"+secret)
}

func userNkey(t *testing.T) (seed []byte, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ = kp.Seed()
	public, _ = kp.PublicKey()
	return seed, public
}

// TestCredsFile connects with a user JWT and seed, as NGS and operator-mode
// deployments hand them out.
func TestCredsFile(t *testing.T) {
	operator, _ := nkeys.CreateOperator()
	operatorPub, _ := operator.PublicKey()
	operatorClaims := jwt.NewOperatorClaims(operatorPub)
	if _, err := operatorClaims.Encode(operator); err != nil {
		t.Fatal(err)
	}
	account, _ := nkeys.CreateAccount()
	accountPub, _ := account.PublicKey()
	accountClaims := jwt.NewAccountClaims(accountPub)
	accountClaims.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accountJWT, err := accountClaims.Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	system, _ := nkeys.CreateAccount()
	systemPub, _ := system.PublicKey()
	systemJWT, err := jwt.NewAccountClaims(systemPub).Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	for pub, claims := range map[string]string{accountPub: accountJWT, systemPub: systemJWT} {
		if err := resolver.Store(pub, claims); err != nil {
			t.Fatal(err)
		}
	}
	s := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{operatorClaims}
		o.AccountResolver = resolver
		o.SystemAccount = systemPub
	})
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	userJWT, err := jwt.NewUserClaims(userPub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, userSeed)
	if err != nil {
		t.Fatal(err)
	}
	credsFile := writeFile(t, "user.creds", creds)
	bogus := writeFile(t, "bogus.creds", []byte("-----BEGIN NATS USER JWT-----\n"+secret+"\n------END NATS USER JWT------\n"))

	wantConnects(t, true, nil, "-s", s.ClientURL(), "--creds", credsFile)
	wantConnects(t, true, map[string]string{"NATS_CREDS": credsFile}, "-s", s.ClientURL())
	wantConnects(t, false, nil, "-s", s.ClientURL(), "--creds", bogus)
	wantConnects(t, false, nil, "-s", s.ClientURL())
}

// TestTLS connects to a server that requires a client certificate, with the
// TLS handshake first or after the server's greeting.
func TestTLS(t *testing.T) {
	files := writeTLSFiles(t)
	for _, first := range []bool{false, true} {
		s := testenv.ConfiguredServer(t, func(o *server.Options) {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: files.serverCert, KeyFile: files.serverKey, CaFile: files.ca, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			o.TLSConfig, o.TLS, o.TLSVerify, o.TLSHandshakeFirst = tc, true, true, first
		})
		url := strings.Replace(s.ClientURL(), "nats://", "tls://", 1)
		tls := []string{"--tlscert", files.clientCert, "--tlskey", files.clientKey, "--tlsca", files.ca}
		if first {
			tls = append(tls, "--tlsfirst")
		}
		wantConnects(t, true, nil, append([]string{"-s", url}, tls...)...)
		wantConnects(t, true, map[string]string{"NATS_CERT": files.clientCert, "NATS_KEY": files.clientKey, "NATS_CA": files.ca}, append([]string{"-s", url}, tls[6:]...)...)
		wantConnects(t, false, nil, "-s", url, "--tlsca", files.ca) // no client certificate
	}
}

type tlsFiles struct{ ca, serverCert, serverKey, clientCert, clientKey string }

// writeTLSFiles writes a certificate authority and a server and a client
// certificate it signed, for 127.0.0.1.
func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvelect test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		template := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		return writeFile(t, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			writeFile(t, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	}
	var f tlsFiles
	f.ca = writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	f.serverCert, f.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	f.clientCert, f.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return f
}

// TestFlagsOverrideTheContext gives the context one set of credentials and
// the flags another: the flags' are used.
func TestFlagsOverrideTheContext(t *testing.T) {
	s := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "app", Password: secret}}
	})
	ctxFile := writeFile(t, "ctx.json", []byte(`{"url": "`+s.ClientURL()+`", "user": "app", "password": "wrong`+secret+`"}`))
	wantConnects(t, false, nil, "--context", ctxFile)
	wantConnects(t, true, nil, "--context", ctxFile, "--user", "app", "--password", secret)
	good := writeFile(t, "good.json", []byte(`{"url": "nats://127.0.0.1:1", "user": "app", "password": "`+secret+`"}`))
	wantConnects(t, true, nil, "--context", good, "-s", s.ClientURL())
}

// TestInboxPrefix connects as a user that may subscribe only under its own
// inbox prefix.
func TestInboxPrefix(t *testing.T) {
	s := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "app", Password: secret, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_app.>"}},
		}}}
	})
	wantConnects(t, true, nil, "-s", s.ClientURL(), "--user", "app", "--password", secret, "--inbox-prefix", "_INBOX_app")
}

func TestBadConnectionSettingsAreUsageErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.creds")
	file := writeFile(t, "some.pem", []byte("x"))
	for says, args := range map[string][]string{
		"--tlscert and --tlskey go together": {"--tlscert", file},
		`--creds "` + missing + `"`:          {"--creds", missing},
		`--tlsca "` + missing + `"`:          {"--tlsca", missing},
		"--user and --creds given together":  {"--user", "u", "--creds", file},
		"--token and --nkey given together":  {"--token", secret, "--nkey", file},
		"--password without --user":          {"--password", secret},
		`--inbox-prefix "_INBOX.>"`:          {"--inbox-prefix", "_INBOX.>"},
		`--js-domain "a.b"`:                  {"--js-domain", "a.b"},
	} {
		for _, command := range [][]string{{"status"}, {"bucket", "check"}, {"run", "--key", "k"}} {
			all := append(append(append([]string{}, command...), args...), "-s", "nats://127.0.0.1:1")
			if command[0] == "run" {
				all = append(all, "--", "true")
			}
			code, stdout, stderr := runCLI(t, all...)
			e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, says)
			if strings.Contains(stderr, secret) {
				t.Errorf("%v printed the secret: %s", all, stderr)
			}
		}
	}
}

// TestLeafNodeIntoAHubsJetStreamDomain runs the commands against a leaf node
// without JetStream, reaching the hub's JetStream through --js-domain.
func TestLeafNodeIntoAHubsJetStreamDomain(t *testing.T) {
	t.Parallel()
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	hub := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.ServerName, o.JetStreamDomain = "hub", "hub"
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: ports[0]}
	})
	remote, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	leaf := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.ServerName, o.JetStream = "leaf", false
		o.LeafNode = server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{remote}}}}
	})
	testenv.Eventually(t, "the leaf node connected to the hub", 10*time.Second, func() bool {
		return hub.NumLeafNodes() == 1 && leaf.NumLeafNodes() == 1
	})
	l := leaf.ClientURL()

	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", l, "--bucket", "LEAF", "--ttl", "2s")
	e2e.WantOneLineError(t, code, ExitError, "", stderr, "--js-domain")
	_ = stdout
	for _, args := range [][]string{
		{"bucket", "create", "-s", l, "--js-domain", "hub", "--bucket", "LEAF", "--ttl", "2s"},
		{"run", "-s", l, "--js-domain", "hub", "--bucket", "LEAF", "--key", "job", "--once", "--", "true"},
		{"status", "-s", l, "--js-domain", "hub", "--bucket", "LEAF"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Errorf("%v: exit %d:\n%s%s", args, code, stdout, stderr)
		}
	}
}

// TestNoCommandPrintsAPasswordOrToken runs every command with a password,
// and with a token, right and wrong, against servers that check them: no
// output of any holds the secret.
func TestNoCommandPrintsAPasswordOrToken(t *testing.T) {
	t.Parallel()
	users := testenv.ConfiguredServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "app", Password: secret}}
	})
	tokens := testenv.ConfiguredServer(t, func(o *server.Options) { o.Authorization = secret })
	commands := [][]string{
		{"bucket", "create", "--ttl", "2s"}, {"bucket", "check"}, {"status"}, {"status", "--key", "k"},
		{"resign", "--key", "k", "--timeout", "1s"}, {"transfer", "--key", "k", "--to", "b", "--timeout", "1s"},
		{"run", "--key", "k", "--once"},
	}
	for _, auth := range [][]string{
		{"-s", users.ClientURL(), "--user", "app", "--password", secret},
		{"-s", users.ClientURL(), "--user", "app", "--password", "wrong" + secret},
		{"-s", "nats://app:" + secret + "@" + strings.TrimPrefix(users.ClientURL(), "nats://")},
		{"-s", tokens.ClientURL(), "--token", secret},
		{"-s", tokens.ClientURL(), "--token", "wrong" + secret},
		{"-s", tokens.ClientURL(), "--user", secret},
	} {
		for _, command := range commands {
			args := append(append(append([]string{}, command...), auth...), "--", "true")
			if command[0] != "run" {
				args = args[:len(args)-2]
			}
			code, stdout, stderr := runCLI(t, args...)
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("election %s (exit %d) printed the secret:\n%s%s", strings.Join(command, " "), code, stdout, stderr)
			}
		}
	}
}
