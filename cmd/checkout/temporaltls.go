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

// readTemporalSecurity reads TEMPORAL_TLS (true: TLS with the system's roots),
// TEMPORAL_TLS_CA (a PEM file of roots instead), TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY (a
// client certificate and its key, for mTLS; both or neither), TEMPORAL_TLS_SERVER_NAME (the
// name to verify, when the address is not it) and TEMPORAL_API_KEY (sent as a bearer token;
// it implies TLS). Any of them but TEMPORAL_TLS=false turns TLS on.
func readTemporalSecurity(str func(name, def string) string) (temporalSecurity, error) {
	var sec temporalSecurity
	var errs []error
	on := false
	switch v := str("TEMPORAL_TLS", "false"); v {
	case "true", "1":
		on = true
	case "false", "0":
	default:
		errs = append(errs, fmt.Errorf("TEMPORAL_TLS=%q: must be true or false", v))
	}
	ca, cert, key := str("TEMPORAL_TLS_CA", ""), str("TEMPORAL_TLS_CERT", ""), str("TEMPORAL_TLS_KEY", "")
	serverName := str("TEMPORAL_TLS_SERVER_NAME", "")
	sec.APIKey = str("TEMPORAL_API_KEY", "")
	if ca != "" || cert != "" || key != "" || serverName != "" || sec.APIKey != "" {
		on = true
	}
	if !on {
		return sec, errors.Join(errs...)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
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
