package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const deployDir = "deploy"

// manifests is every object in deploy/*.yaml, each decoded strictly (an
// unknown or duplicated field fails) into its k8s.io/api type.
type manifests struct {
	sts      []appsv1.StatefulSet
	services []corev1.Service
	pdbs     []policyv1.PodDisruptionBudget
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	var m manifests
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			strict := func(into any) {
				if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
					t.Fatalf("%s document %d (%s): %v", f, i, tm.Kind, err)
				}
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 StatefulSet":
				var o appsv1.StatefulSet
				strict(&o)
				m.sts = append(m.sts, o)
			case "v1 Service":
				var o corev1.Service
				strict(&o)
				m.services = append(m.services, o)
			case "policy/v1 PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				strict(&o)
				m.pdbs = append(m.pdbs, o)
			default:
				t.Fatalf("%s document %d: unexpected %q %q", f, i, tm.APIVersion, tm.Kind)
			}
		}
	}
	if len(m.sts) != 1 || len(m.services) != 2 || len(m.pdbs) != 1 {
		t.Fatalf("want one StatefulSet, two Services, one PodDisruptionBudget; got %d, %d, %d", len(m.sts), len(m.services), len(m.pdbs))
	}
	return m
}

func (m manifests) service(t *testing.T, name string) corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return corev1.Service{}
}

// The manifests are valid Kubernetes objects that fit together, every
// `tether serve` flag and TETHER_ variable they use is one of serve's
// (parsed by its real flag set, with the values Kubernetes substitutes),
// the probe paths answer on a real node, and the README's commands name
// what the manifests use.
func TestDeployManifests(t *testing.T) {
	m := loadManifests(t)
	sts := m.sts[0]
	pod := sts.Spec.Template
	if sts.Spec.Selector == nil || !matches(sts.Spec.Selector.MatchLabels, pod.Labels) {
		t.Fatalf("the StatefulSet's selector %v does not select its pods %v", sts.Spec.Selector, pod.Labels)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("want 3 replicas started in parallel")
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g < 45 {
		t.Errorf("terminationGracePeriodSeconds %v: the hand-off may take 30 s of shutdown plus leaving", g)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod must run as non-root")
	}

	// Kubernetes expands $(VAR) from the container's env in args.
	podEnv := map[string]string{"POD_NAME": sts.Name + "-1", "POD_IP": "10.1.2.3"}
	secrets := map[string]bool{} // secret/key the pod reads
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			if _, ok := podEnv[e.Name]; !ok {
				t.Errorf("env %s: no test value for fieldRef %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			secrets[ref.Name+"/"+ref.Key] = true
			t.Setenv(e.Name, "secret-from-"+ref.Key)
		default:
			t.Setenv(e.Name, e.Value)
		}
	}
	for _, want := range []string{"TETHER_CLUSTER_SECRET", "TETHER_JWT_SECRET"} {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == want && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}) {
			t.Errorf("%s does not come from a Secret", want)
		}
	}
	args := append(slices.Clone(c.Command), c.Args...)
	for i, a := range args {
		args[i] = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(a, func(v string) string {
			name := v[2 : len(v)-1]
			if val, ok := podEnv[name]; ok {
				return val
			}
			t.Errorf("arg %q: $(%s) is not a pod field", a, name)
			return v
		})
	}
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("the container's args %v do not start with serve", args)
	}
	var cfg serveConfig
	fs := (&Main{Stdout: io.Discard, Stderr: io.Discard}).serveFlags(&cfg)
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "TETHER_") && !slices.ContainsFunc(fs.bound, func(b [2]string) bool { return b[1] == e.Name }) {
			t.Errorf("env %s is no tether serve variable", e.Name)
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("tether %v: %v", args, err)
	}
	if err := cfg.check(); err != nil {
		t.Fatalf("tether %v: %v", args, err)
	}
	if cfg.nodeID != podEnv["POD_NAME"] || cfg.data == "" || cfg.jwtSecret == "" || cfg.clusterSecret == "" {
		t.Errorf("node id %q (want the pod name), data %q, secrets set %v %v", cfg.nodeID, cfg.data, cfg.jwtSecret != "", cfg.clusterSecret != "")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == cfg.data }) ||
		len(sts.Spec.VolumeClaimTemplates) != 1 || c.VolumeMounts[0].Name != sts.Spec.VolumeClaimTemplates[0].Name {
		t.Errorf("--data %s is not the pod's own volume", cfg.data)
	}

	// Ports: the container's match the flags, the Services' target them.
	port := func(name string) corev1.ContainerPort {
		for _, p := range c.Ports {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no container port %q", name)
		return corev1.ContainerPort{}
	}
	if !strings.HasSuffix(cfg.listen, ":8080") || port("http").ContainerPort != 8080 ||
		!strings.HasSuffix(cfg.gossip, ":7946") || port("gossip").ContainerPort != 7946 || port("gossip-udp").Protocol != corev1.ProtocolUDP {
		t.Errorf("--listen %s / --gossip %s do not match the container ports %v", cfg.listen, cfg.gossip, c.Ports)
	}
	peers := m.service(t, sts.Spec.ServiceName)
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want headless, publishing not-ready pods", peers.Name)
	}
	for _, svc := range m.services {
		if !matches(svc.Spec.Selector, pod.Labels) {
			t.Errorf("Service %s does not select the pods", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.Type != intstr.String || orTCP(port(p.TargetPort.StrVal).Protocol) != orTCP(p.Protocol) {
				t.Errorf("Service %s port %s: target %v is not a container port of its protocol", svc.Name, p.Name, p.TargetPort)
			}
		}
	}
	m.service(t, "tether")
	for _, seed := range strings.Split(cfg.join, ",") {
		if !regexp.MustCompile(`^` + sts.Name + `-[0-9]+\.` + peers.Name + `:7946$`).MatchString(seed) {
			t.Errorf("--join seed %q is not a pod of the StatefulSet under its headless Service", seed)
		}
	}
	if !strings.HasPrefix(cfg.advertise, podEnv["POD_NAME"]+"."+peers.Name+":") {
		t.Errorf("--advertise %s is not the pod's stable name", cfg.advertise)
	}
	pdb := m.pdbs[0]
	if pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels, pod.Labels) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("the PodDisruptionBudget must select the pods and allow one down: %+v", pdb.Spec)
	}

	// The probe paths answer 200 on a real node.
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe}
	p := startServe(t, t.TempDir())
	hc := &http.Client{Timeout: 5 * time.Second}
	for kind, pr := range probes {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", kind)
			continue
		}
		if pr.HTTPGet.Port.StrVal != "http" {
			t.Errorf("%s probe port %v: want the http port", kind, pr.HTTPGet.Port)
		}
		resp, err := hc.Get(p.httpURL() + pr.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s probe GET %s: %d", kind, pr.HTTPGet.Path, resp.StatusCode)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %s: want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}

	checkReadme(t, secrets, sts.Name, "tether")
	checkDockerfile(t)
}

// checkReadme holds the README's "Deploy on Kubernetes" commands against
// the manifests: the files they name exist, the Secret they create is the
// one the pods read with the same keys.
func checkReadme(t *testing.T, secrets map[string]bool, stsName, svcName string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Deploy on Kubernetes\n")
	if !ok {
		t.Fatal(`README has no "Deploy on Kubernetes" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, _ := strings.Cut(sec, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^docker build -f (\S+) -t (\S+) \.$`),
		regexp.MustCompile(`^kubectl create secret generic (\S+)((?: --from-literal=[a-z-]+="[^"]+")+)$`),
		regexp.MustCompile(`^kubectl apply -f (\S+)$`),
		regexp.MustCompile(`^kubectl rollout status statefulset/(\S+)$`),
		regexp.MustCompile(`^kubectl port-forward service/(\S+) 8080:8080$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("README deploy commands: want %d lines, got:\n%s", len(want), block)
	}
	sub := make([][]string, len(want))
	for i, re := range want {
		if sub[i] = re.FindStringSubmatch(lines[i]); sub[i] == nil {
			t.Fatalf("README deploy command %q does not match %s", lines[i], re)
		}
	}
	if _, err := os.Stat("../../" + sub[0][1]); err != nil || sub[0][1] != "cmd/tether/deploy/Dockerfile" {
		t.Errorf("docker build -f %s: %v", sub[0][1], err)
	}
	if img := "tether:latest"; sub[0][2] != img {
		t.Errorf("the image built is %s, the StatefulSet runs %s", sub[0][2], img)
	}
	created := map[string]bool{}
	for _, kv := range regexp.MustCompile(`--from-literal=([a-z-]+)=`).FindAllStringSubmatch(sub[1][2], -1) {
		created[sub[1][1]+"/"+kv[1]] = true
	}
	for k := range secrets {
		if !created[k] {
			t.Errorf("the pods read secret %s, the README does not create it (creates %v)", k, created)
		}
	}
	if st, err := os.Stat("../../" + sub[2][1]); err != nil || !st.IsDir() || filepath.Clean(sub[2][1]) != "cmd/tether/deploy" {
		t.Errorf("kubectl apply -f %s: %v", sub[2][1], err)
	}
	if sub[3][1] != stsName || sub[4][1] != svcName {
		t.Errorf("README names statefulset/%s and service/%s; the manifests %s and %s", sub[3][1], sub[4][1], stsName, svcName)
	}
}

// checkDockerfile: a static binary, a distroless image, a non-root user.
func checkDockerfile(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^RUN CGO_ENABLED=0 go build .* ./cmd/tether$`,
		`(?m)^FROM gcr\.io/distroless/static\S*:nonroot$`,
		`(?m)^USER nonroot`,
		`(?m)^ENTRYPOINT \["/usr/local/bin/tether"\]$`,
	} {
		if !regexp.MustCompile(re).Match(b) {
			t.Errorf("Dockerfile: no line matching %s", re)
		}
	}
	if bytes.Contains(b, []byte("USER root")) {
		t.Error("Dockerfile switches to root")
	}
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}
