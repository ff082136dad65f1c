package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// composeVar matches docker-compose.yml's ${VAR:-default} with nothing exported.
var composeVar = regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)

// docker-compose.yml passes the server only variables Strata reads, with defaults that
// load; the load test's key is the server's admin key, so the loadtest profile works with
// nothing exported; the model directory is a volume.
func TestComposeFileMatchesTheConfiguration(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var f struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &f))
	server, loadtest := f.Services["server"], f.Services["loadtest"]

	known := map[string]bool{}
	ty := reflect.TypeOf(Config{})
	for i := 0; i < ty.NumField(); i++ {
		if name := ty.Field(i).Tag.Get("env"); name != "" {
			known[strings.Split(name, ",")[0]] = true
		}
	}
	env := map[string]string{}
	for k, v := range server.Environment {
		require.True(t, known[k], "docker-compose.yml passes %s, which Strata does not read", k)
		env[k] = composeVar.ReplaceAllString(v, "$1")
	}
	for _, k := range []string{"STRATA_LLM_MODEL", "STRATA_DB_MAX_CONNS", "STRATA_ONNX_MODEL_DIR", "STRATA_RIVER_LOG_LEVEL", "STRATA_ADMIN_KEY"} {
		require.Contains(t, server.Environment, k)
	}
	require.Contains(t, server.Volumes, "${STRATA_ONNX_MODEL_HOST_DIR:-./models}:"+env["STRATA_ONNX_MODEL_DIR"]+":ro")

	c, err := Load(func(k string) string { return env[k] })
	require.NoError(t, err, "the compose defaults load")
	require.True(t, strings.HasPrefix(c.AdminKey, DevKeyPrefix), "the default admin key is marked as a development key: %q", c.AdminKey)
	require.Equal(t, server.Environment["STRATA_ADMIN_KEY"], loadtest.Environment["STRATA_API_KEY"],
		"the load test uses the server's admin key")
	env["STRATA_ENV"], env["STRATA_AUDIT_SIGNING_KEY"], env["STRATA_PSEUDONYM_KEY"] = "production", "/k", "/p"
	_, err = Load(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "STRATA_ADMIN_KEY", "production refuses the published key")
}
