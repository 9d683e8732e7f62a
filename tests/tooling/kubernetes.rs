//! The Kubernetes manifests (`deploy/kubernetes`): every file validated
//! against the schemas of pinned Kubernetes releases (kubernetes-validate
//! from PyPI, strict), and agreeing with the binary they run: the
//! Deployment's `RATEKEEPER_*` variables accepted by the config loader,
//! its probes on the port it listens on and answered, its ConfigMaps the
//! shipped examples and loaded, its tokens Secret refused until filled in.
//! No cluster runs here: the pod is the real binary with the pod's
//! environment and its volumes laid out as the kubelet lays them out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::Value;

use crate::kubernetes_support;
use crate::support;

use kubernetes_support as k8s;
use support::venv;

/// The validator, and the Kubernetes releases whose schemas the manifests
/// must meet: 1.34, the first with the preStop `sleep` action GA (on by
/// default since 1.30), and the newest this validator bundles.
const VALIDATOR: &str = "kubernetes-validate==1.37.0";
const KUBERNETES: [&str; 2] = ["1.34.0", "1.37.0"];

fn base() -> PathBuf {
    k8s::root().join("base")
}

fn with_redis() -> PathBuf {
    k8s::root().join("overlays/with-redis")
}

fn monitoring() -> PathBuf {
    k8s::root().join("monitoring")
}

/// The ratekeeper Deployment's pod spec and container in `resources`.
fn pod(resources: &[(PathBuf, Value)]) -> (&Value, &Value) {
    let spec = &k8s::find(resources, "Deployment", "ratekeeper")["spec"]["template"]["spec"];
    let containers = spec["containers"].as_sequence().unwrap();
    let container = containers
        .iter()
        .find(|c| c["name"].as_str() == Some("ratekeeper"))
        .expect("a container named ratekeeper");
    (spec, container)
}

/// Every manifest file, each kustomization's own (not its kustomization.yaml),
/// but the Prometheus Operator's resources: the validator has no schema of
/// custom resources (the monitoring test below checks those).
fn manifest_files() -> Vec<PathBuf> {
    let dirs = k8s::kustomizations();
    let files = dirs.iter().flat_map(|dir| k8s::yaml_files(dir));
    files
        .filter(|f| !f.ends_with("kustomization.yaml"))
        .filter(|f| {
            let docs = k8s::documents(f);
            !docs.iter().any(|d| k8s::is_operators(&d["apiVersion"]))
        })
        .collect()
}

#[test]
fn every_manifest_is_listed_by_its_kustomization_and_every_listed_one_exists() {
    assert_eq!(
        k8s::kustomizations(),
        vec![base(), monitoring(), with_redis()]
    );
    let mut dirs = vec![k8s::root()];
    while let Some(dir) = dirs.pop() {
        let files = k8s::yaml_files(&dir);
        if dir.join("kustomization.yaml").is_file() {
            let listed = k8s::listed(&dir);
            for path in &listed {
                let bases_ok = path.is_dir() && path.join("kustomization.yaml").is_file();
                assert!(
                    path.is_file() || bases_ok,
                    "{}: listed, missing",
                    path.display()
                );
            }
            for file in files.iter().filter(|f| !f.ends_with("kustomization.yaml")) {
                assert!(listed.contains(file), "{}: not listed", file.display());
            }
        } else {
            assert!(
                files.is_empty(),
                "{}: YAML outside a kustomization",
                dir.display()
            );
        }
        let entries = std::fs::read_dir(&dir).unwrap().flatten();
        dirs.extend(entries.map(|e| e.path()).filter(|p| p.is_dir()));
    }
    // The overlay is the base plus its own files, nothing of the base lost.
    let base_files: Vec<PathBuf> = k8s::render(&base()).into_iter().map(|(f, _)| f).collect();
    let overlay: Vec<PathBuf> = k8s::render(&with_redis())
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(overlay[..base_files.len()], base_files[..]);
}

/// Runs the validator (strict: unknown fields are errors) on `files`;
/// returns whether it passed and its output.
fn validate(files: &[PathBuf]) -> (bool, String) {
    let tool = venv::pip_tool("kubernetes-validate", VALIDATOR, "bin/kubernetes-validate");
    let mut command = Command::new(venv::python_of(&tool));
    command.arg(&tool).arg("--strict");
    for version in KUBERNETES {
        command.args(["--kubernetes-version", version]);
    }
    let out = command
        .args(files)
        .output()
        .expect("kubernetes-validate runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn every_manifest_validates_strictly_against_the_pinned_kubernetes_schemas() {
    let files = manifest_files();
    let (passed, output) = validate(&files);
    assert!(passed, "kubernetes-validate failed:\n{output}");
    // An unknown kind or apiVersion is only a WARN with exit 0: count the
    // passes instead, one per resource and release.
    let resources: usize = files.iter().map(|f| k8s::documents(f).len()).sum();
    let passes = output
        .lines()
        .filter(|l| l.starts_with("INFO") && l.contains(" passed for "))
        .count();
    assert_eq!(
        passes,
        resources * KUBERNETES.len(),
        "not every resource passed:\n{output}"
    );
    assert!(resources >= 11, "{resources} resources:\n{output}");
    for line in output.lines() {
        assert!(line.starts_with("INFO"), "{line}\n{output}");
    }

    // And it does judge them: a misspelt field, or the sleep action on a
    // release that has none, fails.
    let dir = support::fresh_dir("k8s-validate");
    let deployment = std::fs::read_to_string(base().join("deployment.yaml")).unwrap();
    let misspelt = dir.join("misspelt.yaml");
    std::fs::write(
        &misspelt,
        deployment.replacen("periodSeconds:", "periodSecond:", 1),
    )
    .unwrap();
    let (passed, output) = validate(&[misspelt]);
    assert!(
        !passed && output.contains("'periodSecond' was unexpected"),
        "{output}"
    );
}

#[test]
fn the_configmaps_hold_the_shipped_examples_byte_for_byte() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let resources = k8s::render(&base());
    for (configmap, key, example) in [
        (
            "ratekeeper-policies",
            "policies.toml",
            "config/policies.example.toml",
        ),
        ("ratekeeper-rls", "rls.yaml", "config/rls.example.yaml"),
    ] {
        let data = k8s::strings(&k8s::find(&resources, "ConfigMap", configmap)["data"]);
        let shipped = std::fs::read_to_string(repo.join(example)).unwrap();
        assert_eq!(
            data.get(key),
            Some(&shipped),
            "{configmap} {key} differs from {example}"
        );
    }
}

/// The listen address `variable` names, and that the container port
/// `port_name` is its port; a wildcard address, so the kubelet and the
/// Service reach it from outside the pod.
fn listens_on_its_port(container: &Value, variable: &str, port_name: &str) -> SocketAddr {
    let env: BTreeMap<String, String> = k8s::env(container).into_iter().collect();
    let addr: SocketAddr = env[variable].parse().unwrap();
    assert!(
        addr.ip().is_unspecified(),
        "{variable}={addr}: unreachable from outside the pod"
    );
    assert_eq!(
        container_port(container, port_name),
        addr.port(),
        "{port_name} vs {variable}"
    );
    addr
}

/// The number of a container port given by name or number.
fn container_port(container: &Value, port: &str) -> u16 {
    if let Ok(number) = port.parse() {
        return number;
    }
    let ports = container["ports"].as_sequence().unwrap();
    let found = ports.iter().find(|p| p["name"].as_str() == Some(port));
    let found = found.unwrap_or_else(|| panic!("no container port named {port}"));
    found["containerPort"].as_u64().unwrap() as u16
}

fn port_text(port: &Value) -> String {
    match port {
        Value::Number(n) => n.to_string(),
        other => other.as_str().unwrap().to_string(),
    }
}

#[test]
fn the_deployment_probes_and_service_agree_with_the_configuration() {
    for dir in [base(), with_redis()] {
        let resources = k8s::render(&dir);
        let deployment = k8s::find(&resources, "Deployment", "ratekeeper");
        let (spec, container) = pod(&resources);
        let http = listens_on_its_port(container, "RATEKEEPER_SERVER__LISTEN", "http");
        listens_on_its_port(container, "RATEKEEPER_GRPC__LISTEN", "grpc");
        for (probe, path) in [
            ("startupProbe", "/healthz"),
            ("livenessProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
        ] {
            let get = &container[probe]["httpGet"];
            assert_eq!(get["path"].as_str(), Some(path), "{probe}");
            let port = container_port(container, &port_text(&get["port"]));
            assert_eq!(
                port,
                http.port(),
                "{probe} probes another port than server.listen"
            );
        }
        // The preStop pause, then the drain: both inside the grace period.
        let env: BTreeMap<String, String> = k8s::env(container).into_iter().collect();
        let drain = k8s::seconds(&env["RATEKEEPER_SERVER__SHUTDOWN_TIMEOUT"]);
        let pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap();
        let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(
            pause >= 1 && grace > pause + drain,
            "grace {grace} <= {pause} + {drain}"
        );
        assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(2));
        hardened(spec, container);
        selected_and_exposed(&resources, container);
    }
}

/// The security context the issue asks for, pod and container together,
/// and requests and limits for both resources.
fn hardened(spec: &Value, container: &Value) {
    let (pod, own) = (&spec["securityContext"], &container["securityContext"]);
    let effective = |key: &str| {
        if own[key].is_null() {
            &pod[key]
        } else {
            &own[key]
        }
    };
    assert_eq!(effective("runAsNonRoot").as_bool(), Some(true));
    assert_eq!(
        effective("runAsUser").as_u64(),
        Some(65532),
        "the image's nonroot user"
    );
    assert_eq!(
        effective("seccompProfile")["type"].as_str(),
        Some("RuntimeDefault")
    );
    assert_eq!(own["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(own["allowPrivilegeEscalation"].as_bool(), Some(false));
    let dropped = own["capabilities"]["drop"].as_sequence().unwrap();
    assert_eq!(dropped, &[Value::from("ALL")]);
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            let value = &container["resources"][kind][resource];
            assert!(!value.is_null(), "no {kind}.{resource}");
        }
    }
}

/// Everything that selects the pods selects them, by ports they have.
fn selected_and_exposed(resources: &[(PathBuf, Value)], container: &Value) {
    let deployment = k8s::find(resources, "Deployment", "ratekeeper");
    let labels = k8s::strings(&deployment["spec"]["template"]["metadata"]["labels"]);
    assert!(k8s::selects(
        &deployment["spec"]["selector"]["matchLabels"],
        &labels
    ));
    let (spec, _) = pod(resources);
    let spread = spec["topologySpreadConstraints"].as_sequence().unwrap();
    assert!(
        spread
            .iter()
            .any(|c| c["topologyKey"] == "kubernetes.io/hostname"
                && k8s::selects(&c["labelSelector"]["matchLabels"], &labels))
    );
    let service = k8s::find(resources, "Service", "ratekeeper");
    assert!(k8s::selects(&service["spec"]["selector"], &labels));
    let ports = service["spec"]["ports"].as_sequence().unwrap();
    let mut served = Vec::new();
    for port in ports {
        let target = container_port(container, &port_text(&port["targetPort"]));
        assert_eq!(
            port["port"].as_u64(),
            Some(target.into()),
            "Service port = container port"
        );
        assert!(port["appProtocol"].is_string(), "{port:?}: no appProtocol");
        served.push(target);
    }
    assert_eq!(served, [8080, 8081]);
    scaled_and_fenced(resources, &labels);
}

/// The disruption budget, the autoscaler and the network policy apply to
/// the pods with `labels`; only the gateway may reach their two ports.
fn scaled_and_fenced(resources: &[(PathBuf, Value)], labels: &BTreeMap<String, String>) {
    let pdb = k8s::find(resources, "PodDisruptionBudget", "ratekeeper");
    assert!(k8s::selects(
        &pdb["spec"]["selector"]["matchLabels"],
        labels
    ));
    let hpa = &k8s::find(resources, "HorizontalPodAutoscaler", "ratekeeper")["spec"];
    assert_eq!(hpa["scaleTargetRef"]["kind"].as_str(), Some("Deployment"));
    assert_eq!(hpa["scaleTargetRef"]["name"].as_str(), Some("ratekeeper"));
    assert_eq!(hpa["metrics"][0]["resource"]["name"].as_str(), Some("cpu"));
    assert!(
        hpa["minReplicas"].as_u64() >= Some(2),
        "the HPA would scale below 2"
    );
    let policy = &k8s::find(resources, "NetworkPolicy", "ratekeeper")["spec"];
    assert!(k8s::selects(&policy["podSelector"]["matchLabels"], labels));
    let rules = policy["ingress"].as_sequence().unwrap();
    assert_eq!(rules.len(), 1, "one rule: the gateway's");
    let from = rules[0]["from"].as_sequence().unwrap();
    assert!(
        from.iter()
            .all(|peer| peer["podSelector"]["matchLabels"]["ratekeeper-gateway"] == "true")
    );
    let allowed: Vec<u64> = rules[0]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_u64().unwrap())
        .collect();
    assert_eq!(allowed, [8080, 8081]);
}

/// The monitoring kustomization scrapes the base's pods: the PodMonitor
/// selects them by their labels and names a port their container has, and
/// the NetworkPolicy that lets Prometheus in opens that port on them. (Its
/// PrometheusRule is tests/tooling/prometheus_rules.rs's.)
#[test]
fn the_pod_monitor_scrapes_the_deployments_pods_on_their_http_port() {
    let pods = k8s::render(&base());
    let labels = k8s::strings(
        &k8s::find(&pods, "Deployment", "ratekeeper")["spec"]["template"]["metadata"]["labels"],
    );
    let (_, container) = pod(&pods);
    let resources = k8s::render(&monitoring());
    let monitor = k8s::find(&resources, "PodMonitor", "ratekeeper");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let monitor = &monitor["spec"];
    assert!(k8s::selects(&monitor["selector"]["matchLabels"], &labels));
    let endpoints = monitor["podMetricsEndpoints"].as_sequence().unwrap();
    assert_eq!(
        endpoints.len(),
        1,
        "one endpoint: /metrics on the HTTP port"
    );
    let endpoint = &endpoints[0];
    assert_eq!(endpoint["path"].as_str(), Some("/metrics"));
    let port_name = endpoint["port"].as_str().expect("a named port");
    let port = container_port(container, port_name);
    let env: BTreeMap<String, String> = k8s::env(container).into_iter().collect();
    let http: SocketAddr = env["RATEKEEPER_SERVER__LISTEN"].parse().unwrap();
    assert_eq!(port, http.port(), "/metrics is served on server.listen");

    let policy = &k8s::find(&resources, "NetworkPolicy", "ratekeeper-metrics")["spec"];
    assert!(k8s::selects(&policy["podSelector"]["matchLabels"], &labels));
    let rules = policy["ingress"].as_sequence().unwrap();
    let opened: Vec<u64> = rules
        .iter()
        .flat_map(|r| r["ports"].as_sequence().unwrap())
        .map(|p| p["port"].as_u64().unwrap())
        .collect();
    assert_eq!(opened, [u64::from(port)], "only the scraped port");
    let prometheus = &rules[0]["from"][0]["podSelector"]["matchLabels"];
    assert_eq!(prometheus["app.kubernetes.io/name"], "prometheus");
}
