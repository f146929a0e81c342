package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// The azurerm provider mirror `make tf-provider` builds (see the Makefile):
// terraform init -plugin-dir reads it, so the checks need no network.
const (
	tfAzurermVersion = "5.2.0"
	tfPluginDirEnv   = "FLEET_TF_PLUGIN_DIR"
)

// TestTerraform runs what `make tf-check` runs (fmt -check, init against the
// provider mirror, validate, and the mock-provider tests in terraform/tests)
// through hashicorp/terraform-exec. It skips, with one line, when terraform
// or the provider mirror is missing.
func TestTerraform(t *testing.T) {
	tfPath, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("terraform checks skipped: terraform is not on PATH")
	}
	pluginDir := tfPluginDir()
	provider := filepath.Join(pluginDir, "registry.terraform.io", "hashicorp", "azurerm", tfAzurermVersion,
		runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-azurerm_v"+tfAzurermVersion)
	if _, err := os.Stat(provider); err != nil {
		t.Skipf("terraform checks skipped: no azurerm %s provider mirror at %s (run `make tf-provider` once to build it)", tfAzurermVersion, pluginDir)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	src := filepath.Join(tfRepoRoot(t), "terraform")

	// fmt -check runs on the source itself; everything else on a copy, so
	// the offline init (its lock file and plugin-dir setting) never lands in
	// terraform/, where a real `terraform init` would trip over it.
	t.Run("fmt", func(t *testing.T) {
		tf := tfNew(t, src, tfPath)
		ok, files, err := tf.FormatCheck(ctx, tfexec.Recursive(true))
		if err != nil {
			t.Fatalf("terraform fmt -check: %v", err)
		}
		if !ok {
			t.Fatalf("not formatted (run `terraform -chdir=terraform fmt -recursive`): %s", strings.Join(files, ", "))
		}
	})

	work := t.TempDir()
	tfCopyModule(t, src, work)
	tf := tfNew(t, work, tfPath)

	if !t.Run("init", func(t *testing.T) {
		if err := tf.Init(ctx, tfexec.Backend(false), tfexec.PluginDir(pluginDir)); err != nil {
			t.Fatalf("terraform init -backend=false -plugin-dir=%s: %v", pluginDir, err)
		}
	}) {
		return
	}

	t.Run("validate", func(t *testing.T) {
		out, err := tf.Validate(ctx)
		if err != nil {
			t.Fatalf("terraform validate: %v", err)
		}
		for _, d := range out.Diagnostics {
			t.Logf("%s: %s: %s", d.Severity, d.Summary, d.Detail)
		}
		if !out.Valid || out.ErrorCount > 0 || out.WarningCount > 0 {
			t.Fatalf("terraform validate: valid=%t, %d errors, %d warnings", out.Valid, out.ErrorCount, out.WarningCount)
		}
	})

	t.Run("test", func(t *testing.T) {
		var out bytes.Buffer
		runErr := tf.Test(ctx, &out)
		summary := tfReportTest(t, &out)
		if runErr != nil {
			t.Fatalf("terraform test: %v", runErr)
		}
		if summary.Status != "pass" || summary.Passed == 0 || summary.Failed+summary.Errored > 0 {
			t.Fatalf("terraform test: %s, %d passed, %d failed, %d errored", summary.Status, summary.Passed, summary.Failed, summary.Errored)
		}
	})
}

// No output may be secret: none is marked sensitive, none reads a token or a
// secret, and terraform/tests/outputs.tftest.hcl checks every one of them
// against the token values (so a new output cannot skip that check).
func TestTerraformOutputsAreNotSecret(t *testing.T) {
	dir := filepath.Join(tfRepoRoot(t), "terraform")
	outputs := tfReadFile(t, filepath.Join(dir, "outputs.tf"))
	tftest := tfReadFile(t, filepath.Join(dir, "tests", "outputs.tftest.hcl"))

	blocks := regexp.MustCompile(`(?m)^output\s+"([^"]+)"\s*\{`).FindAllStringSubmatchIndex(outputs, -1)
	if len(blocks) == 0 {
		t.Fatal("terraform/outputs.tf declares no outputs")
	}
	secretRef := regexp.MustCompile(`var\.operator_token|var\.factory_tokens|azurerm_key_vault_secret\.|connection_string|primary_key|secondary_key|access_key|\bsensitive\s*=`)
	for i, b := range blocks {
		name := outputs[b[2]:b[3]]
		end := len(outputs)
		if i+1 < len(blocks) {
			end = blocks[i+1][0]
		}
		body := outputs[b[0]:end]
		if m := secretRef.FindString(body); m != "" {
			t.Errorf("output %q uses %q: outputs must carry no secrets", name, m)
		}
		if !regexp.MustCompile(`\boutput\.` + regexp.QuoteMeta(name) + `\b`).MatchString(tftest) {
			t.Errorf("output %q is not checked in terraform/tests/outputs.tftest.hcl", name)
		}
	}
}

func tfPluginDir() string {
	if d := os.Getenv(tfPluginDirEnv); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "fleet-terraform", "plugins")
	}
	return filepath.Join(home, ".cache", "fleet-terraform", "plugins")
}

func tfNew(t *testing.T, dir, tfPath string) *tfexec.Terraform {
	t.Helper()
	tf, err := tfexec.NewTerraform(dir, tfPath)
	if err != nil {
		t.Fatal(err)
	}
	return tf
}

// tfCopyModule copies the root module and its tests, leaving out local
// state, plans, variable files and any earlier init.
func tfCopyModule(t *testing.T, src, dst string) {
	t.Helper()
	skip := regexp.MustCompile(`^(\.terraform|\.terraform\.lock\.hcl|.*\.tfstate.*|.*\.tfplan|terraform\.tfvars|.*\.auto\.tfvars)$`)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel != "." && skip.MatchString(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copying %s: %v", src, err)
	}
}

type tfTestSummary struct {
	Status  string `json:"status"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Errored int    `json:"errored"`
	Skipped int    `json:"skipped"`
}

// tfReportTest logs each run's result and every error diagnostic from
// `terraform test -json`, and returns the summary.
func tfReportTest(t *testing.T, out *bytes.Buffer) tfTestSummary {
	t.Helper()
	var summary tfTestSummary
	scanner := bufio.NewScanner(out)
	scanner.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for scanner.Scan() {
		var msg struct {
			Level      string                   `json:"@level"`
			Message    string                   `json:"@message"`
			Type       string                   `json:"type"`
			TestFile   string                   `json:"@testfile"`
			TestRun    *struct{ Status string } `json:"test_run"`
			Summary    *tfTestSummary           `json:"test_summary"`
			Diagnostic *struct {
				Summary string `json:"summary"`
				Detail  string `json:"detail"`
			} `json:"diagnostic"`
		}
		if json.Unmarshal(scanner.Bytes(), &msg) != nil {
			continue
		}
		switch {
		case msg.Summary != nil:
			summary = *msg.Summary
			t.Log(msg.Message)
		case msg.TestRun != nil && msg.TestRun.Status != "":
			t.Logf("%s %s", msg.TestFile, strings.TrimSpace(msg.Message))
		case msg.Diagnostic != nil && msg.Level == "error":
			t.Logf("%s: %s: %s", msg.TestFile, msg.Diagnostic.Summary, msg.Diagnostic.Detail)
		}
	}
	return summary
}

func tfReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
