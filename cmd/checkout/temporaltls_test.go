package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// A secured Temporal: the product dials it over TLS, with a client certificate when the
// server asks for one. The server here is a real dev server behind a TLS listener that, like
// a secured frontend, demands a certificate signed by its CA.
func TestTheClientDialsTemporalOverMutualTLS(t *testing.T) {
	dev := testenv.DevServer(t)
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	serverPair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsProxy(t, dev.FrontendHostPort(), &tls.Config{Certificates: []tls.Certificate{serverPair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})

	dial := func(env map[string]string) error {
		t.Setenv("TEMPORAL_ADDRESS", addr)
		for _, k := range []string{"TEMPORAL_TLS", "TEMPORAL_TLS_CA", "TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY", "TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_API_KEY"} {
			t.Setenv(k, env[k])
		}
		cfg, err := loadConfig(true)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := dialTemporal(ctx, cfg, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.CheckHealth(ctx, nil)
		return err
	}
	trusted := map[string]string{"TEMPORAL_TLS_CA": filepath.Join(dir, "ca.pem"), "TEMPORAL_TLS_SERVER_NAME": "localhost"}
	if err := dial(trusted); err == nil {
		t.Fatal("dialled a server that demands a client certificate without one")
	}
	trusted["TEMPORAL_TLS_CERT"], trusted["TEMPORAL_TLS_KEY"] = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if err := dial(trusted); err != nil {
		t.Fatalf("dial with the client certificate: %v", err)
	}
	if err := dial(map[string]string{}); err == nil {
		t.Fatal("dialled a TLS server in plaintext")
	}
}

// Half a certificate pair, an unreadable CA file or a bad TEMPORAL_TLS stop the process at
// start, naming the variable.
func TestBadTemporalTLSSettingsAreRefusedByName(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"TEMPORAL_TLS_CERT": {"TEMPORAL_TLS_CERT": "/nonexistent/client.pem"},
		"TEMPORAL_TLS_CA":   {"TEMPORAL_TLS_CA": "/nonexistent/ca.pem"},
		"TEMPORAL_TLS":      {"TEMPORAL_TLS": "yes"},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			if _, err := loadConfig(true); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("loadConfig = %v, want an error naming %s", err, name)
			}
		})
	}
}

// newCert writes name.pem and name-key.pem into dir: a CA when parent is nil, else a
// certificate for localhost signed by parent.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, kind string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// tlsProxy serves TLS on a loopback port and forwards each connection, decrypted, to to.
func tlsProxy(t *testing.T, to string, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String()
}
