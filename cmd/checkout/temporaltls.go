package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"go.temporal.io/sdk/client"
)

// temporalSecurity is how the product proves itself to a secured Temporal: TLS, with a
// client certificate (mTLS) or an API key (Temporal Cloud). Read from the environment once
// at start; a bad file or a half-set pair stops the process with the variable's name.
type temporalSecurity struct {
	TLS    *tls.Config // nil: plaintext, as a local dev server wants
	APIKey string
}

// temporalTLSEnv are the variables of a secured Temporal, as set: TEMPORAL_TLS (true: TLS
// with the system's roots), TEMPORAL_TLS_CA (a PEM file of roots instead), TEMPORAL_TLS_CERT
// and TEMPORAL_TLS_KEY (a client certificate and its key, for mTLS; both or neither),
// TEMPORAL_TLS_SERVER_NAME (the name to verify, when the address is not it) and
// TEMPORAL_API_KEY (sent as a bearer token; it implies TLS).
type temporalTLSEnv struct {
	on                                bool
	ca, cert, key, serverName, apiKey string
}

// readTemporalSecurity builds the security from its variables. Any of them but
// TEMPORAL_TLS=false turns TLS on.
func readTemporalSecurity(env temporalTLSEnv) (temporalSecurity, error) {
	sec := temporalSecurity{APIKey: env.apiKey}
	var errs []error
	ca, cert, key := env.ca, env.cert, env.key
	if !env.on && ca == "" && cert == "" && key == "" && env.serverName == "" && env.apiKey == "" {
		return sec, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: env.serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("TEMPORAL_TLS_CA: %w", err))
		case !pool.AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("TEMPORAL_TLS_CA=%s: no PEM certificate in it", ca))
		default:
			cfg.RootCAs = pool
		}
	}
	switch {
	case (cert == "") != (key == ""):
		errs = append(errs, errors.New("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both (a client certificate and its key) or neither"))
	case cert != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY: %w", err))
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	sec.TLS = cfg
	return sec, errors.Join(errs...)
}

// apply puts the settings on a client's options.
func (s temporalSecurity) apply(opts *client.Options) {
	opts.ConnectionOptions.TLS = s.TLS
	if s.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(s.APIKey)
	}
}
