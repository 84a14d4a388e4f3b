package cluster

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"

	"github.com/llm-ring/llm-ring/internal/config"
)

// advertise expands ${VAR} in c.Advertise with getenv and checks the result.
func advertise(c *config.Cluster, getenv func(string) string) (string, error) {
	if c.Advertise == "" {
		return "", nil
	}
	a := os.Expand(c.Advertise, getenv)
	if err := config.CheckHostPort(a, true); err != nil {
		return "", fmt.Errorf("cluster.advertise: %v (expanded from %q)", err, c.Advertise)
	}
	return a, nil
}

// ReadKey reads the gossip key file: exactly 16, 24 or 32 raw bytes (AES-128,
// -192, -256), or such a key in standard base64 (surrounding whitespace
// ignored), as `openssl rand -base64 32` writes it. Errors name the key and
// the file, never the content.
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster.secret_file: %w", err)
	}
	if keyLen(len(b)) {
		return b, nil
	}
	txt := bytes.TrimSpace(b)
	k := make([]byte, base64.StdEncoding.DecodedLen(len(txt)))
	n, err := base64.StdEncoding.Decode(k, txt)
	if err == nil && keyLen(n) {
		return k[:n], nil
	}
	return nil, fmt.Errorf("cluster.secret_file: %s: holds %d bytes; want a 16, 24 or 32-byte key, raw or base64", path, len(b))
}

func keyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
