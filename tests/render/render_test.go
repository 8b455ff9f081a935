package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	chartDir   = "../../deployments/helm/gpuctk"
	kustomize  = "../../deployments/kubernetes"
	goldenDir  = "../../deployments/kubernetes/testdata/rendered"
	namespace  = "gpuctk"
	releaseNam = "gpuctk"
)

// helmTemplate renders the chart as `helm template gpuctk CHART -n gpuctk
// -f VALUES` does: each template's output in file name order, empty
// ones left out.
func helmTemplate(valuesFile string) ([]byte, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	if valuesFile != "" {
		v, err := chartutil.ReadValuesFile(valuesFile)
		if err != nil {
			return nil, err
		}
		vals = v.AsMap()
	}
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: releaseNam, Namespace: namespace, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(chrt, top)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		body := strings.TrimSpace(files[name])
		if !strings.HasSuffix(name, ".yaml") || body == "" {
			continue
		}
		out.WriteString("---\n# Source: " + name + "\n" + body + "\n")
	}
	return out.Bytes(), nil
}

// kustomizeBuild renders a kustomization as `kubectl apply -k DIR` (or
// `kustomize build DIR`) does.
func kustomizeBuild(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// TestRender renders the chart and the kustomizations and compares each
// with its golden file (go test -update rewrites them), which
// deployments/kubernetes's TestRendered decodes strictly.
func TestRender(t *testing.T) {
	for _, tc := range []struct {
		golden string
		render func() ([]byte, error)
	}{
		{"kustomize.yaml", func() ([]byte, error) { return kustomizeBuild(kustomize) }},
		// The base with the mps component, as the README says to add it.
		{"kustomize-mps.yaml", func() ([]byte, error) { return kustomizeBuild("testdata/kustomize-mps") }},
		// The base with the per-node component.
		{"kustomize-per-node.yaml", func() ([]byte, error) { return kustomizeBuild("testdata/kustomize-per-node") }},
		{"helm.yaml", func() ([]byte, error) { return helmTemplate("") }},
		// NVIDIA's chart's shape: several configs and a default (per-node
		// configs), MPS, a containerised driver, an image of one's own
		// registry.
		{"helm-mps.yaml", func() ([]byte, error) { return helmTemplate("testdata/values-mps.yaml") }},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := tc.render()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(goldenDir, tc.golden)
			if *update {
				if err := os.MkdirAll(goldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from what renders now (go test -update rewrites it):\n%s", path, got)
			}
		})
	}
}

// objects decodes a rendered stream into kind/name -> object, without the
// labels Helm adds (the kustomize manifests have none of them).
func objects(t *testing.T, data []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split("\n"+string(data), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o == nil {
			continue
		}
		meta := o["metadata"].(map[string]any)
		if labels, ok := meta["labels"].(map[string]any); ok {
			for _, k := range []string{"app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
				delete(labels, k)
			}
			if len(labels) == 0 {
				delete(meta, "labels")
			}
		}
		out[o["kind"].(string)+"/"+meta["name"].(string)] = o
	}
	return out
}

// TestChartMatchesKustomize: the chart with its default values deploys the
// objects the kustomize manifests do (the Namespace aside, which Helm's
// --create-namespace makes), with mps.enabled those of the mps component,
// and with config.perNode those of the per-node component: two ways to
// deploy, one deployment.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct{ kustomize, values string }{
		{kustomize, ""},
		{"testdata/kustomize-mps", "testdata/values-mps-only.yaml"},
		{"testdata/kustomize-per-node", "testdata/values-per-node.yaml"},
	} {
		k, err := kustomizeBuild(tc.kustomize)
		if err != nil {
			t.Fatal(err)
		}
		h, err := helmTemplate(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		ko, ho := objects(t, k), objects(t, h)
		delete(ko, "Namespace/"+namespace)
		for name, want := range ko {
			if got, ok := ho[name]; !ok {
				t.Errorf("%s: the chart has no %s", tc.kustomize, name)
			} else if !reflect.DeepEqual(got, want) {
				g, _ := yaml.Marshal(got)
				w, _ := yaml.Marshal(want)
				t.Errorf("%s: the chart's %s differs from kustomize's:\n--- chart\n%s\n--- kustomize\n%s", tc.kustomize, name, g, w)
			}
		}
		for name := range ho {
			if _, ok := ko[name]; !ok {
				t.Errorf("%s: the chart has %s, kustomize has not", tc.kustomize, name)
			}
		}
	}
}

// TestChartRefuses: values the chart cannot deploy fail the render with
// one line saying what to change, before anything reaches the cluster.
func TestChartRefuses(t *testing.T) {
	_, err := helmTemplate("testdata/values-bad-default.yaml")
	if err == nil || !strings.Contains(err.Error(), `config.default "a100" is not a key of config.map (h100.toml, l40s.toml): name one of them`) {
		t.Errorf("render with config.default not in config.map: %v", err)
	}
}
