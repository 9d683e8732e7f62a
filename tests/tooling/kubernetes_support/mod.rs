//! The manifests under `deploy/kubernetes` as tests/tooling/kubernetes.rs sees
//! them: each kustomization's resources, rendered the way `kustomize build`
//! would for the one field they use (`resources`: no patches, generators or
//! name prefixes, which [`render`] refuses, so that the tests never judge
//! something other than what a cluster gets), and a pod's volumes laid out
//! in a directory the way the kubelet lays them out.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_norway::Value;

/// `deploy/kubernetes` in this checkout.
pub fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    root.canonicalize().unwrap()
}

/// Every directory under `deploy/kubernetes` holding a kustomization.yaml.
pub fn kustomizations() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root()];
    while let Some(dir) = dirs.pop() {
        if dir.join("kustomization.yaml").is_file() {
            found.push(dir.clone());
        }
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

/// The YAML files directly in `dir` (not in its subdirectories).
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && matches!(ext(p), "yaml" | "yml"))
        .collect();
    files.sort();
    files
}

fn ext(path: &Path) -> &str {
    path.extension().and_then(|e| e.to_str()).unwrap_or("")
}

/// Every YAML document of `file` (empty ones skipped, as kubectl does).
pub fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", file.display()))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Whether `api_version` is the Prometheus Operator's (custom resources,
/// which no Kubernetes schema covers).
pub fn is_operators(api_version: &Value) -> bool {
    let version = api_version.as_str().unwrap_or_default();
    version.starts_with("monitoring.coreos.com/")
}

/// The `resources:` entries of the kustomization in `dir`, as paths.
pub fn listed(dir: &Path) -> Vec<PathBuf> {
    let file = dir.join("kustomization.yaml");
    let doc = documents(&file).remove(0);
    let keys: Vec<&str> = doc
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    for key in &keys {
        assert!(
            ["apiVersion", "kind", "resources"].contains(key),
            "{}: `{key}` changes what kustomize renders, and tests/kubernetes_support \
             renders only `resources`: teach render() the new field before using it",
            file.display()
        );
    }
    doc["resources"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{}: no resources", file.display()))
        .iter()
        .map(|r| dir.join(r.as_str().unwrap()))
        // `../../base` as the same path as the base's own files.
        .map(|p| p.canonicalize().unwrap_or(p))
        .collect()
}

/// What `kustomize build dir` outputs: each listed file's documents, and a
/// listed directory's rendering, in order. Each comes with its file.
pub fn render(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for path in listed(dir) {
        if path.is_dir() {
            out.extend(render(&path));
        } else {
            assert!(path.is_file(), "{}: listed but missing", path.display());
            out.extend(documents(&path).into_iter().map(|doc| (path.clone(), doc)));
        }
    }
    out
}

/// The one resource of `kind` named `name`.
pub fn find<'a>(resources: &'a [(PathBuf, Value)], kind: &str, name: &str) -> &'a Value {
    let mut matches = resources.iter().map(|(_, r)| r).filter(|r| {
        r["kind"].as_str() == Some(kind) && r["metadata"]["name"].as_str() == Some(name)
    });
    let found = matches
        .next()
        .unwrap_or_else(|| panic!("no {kind} named {name} in the rendering"));
    assert!(matches.next().is_none(), "two {kind}s named {name}");
    found
}

/// Every resource of `kind`.
pub fn all<'a>(resources: &'a [(PathBuf, Value)], kind: &str) -> Vec<&'a Value> {
    let all = resources.iter().map(|(_, r)| r);
    all.filter(|r| r["kind"].as_str() == Some(kind)).collect()
}

/// A string-to-string map (labels, a ConfigMap's data).
pub fn strings(map: &Value) -> BTreeMap<String, String> {
    map.as_mapping()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str().unwrap().into(), v.as_str().unwrap().into()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `selector` (a `matchLabels` map) selects a pod with `labels`.
pub fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let wanted = strings(selector);
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A file mode as Kubernetes reads it: YAML 1.1, where `0440` is octal.
/// (serde_norway reads YAML 1.2 and keeps `0440` a string.)
pub fn mode(value: &Value) -> u32 {
    match value {
        Value::Number(n) => n.as_u64().unwrap() as u32,
        Value::String(s) if s.starts_with('0') => u32::from_str_radix(s, 8).unwrap(),
        other => panic!("not a file mode: {other:?}"),
    }
}

/// The `value`s of a container's `env`, in order (a `valueFrom` would come
/// from the cluster, which no test has: refused).
pub fn env(container: &Value) -> Vec<(String, String)> {
    let entries = container["env"].as_sequence().unwrap();
    entries
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = e["value"].as_str();
            let value = value.unwrap_or_else(|| panic!("{name}: only literal values are tested"));
            (name, value.to_string())
        })
        .collect()
}

/// The files of the volume `name` of `pod_spec`: a ConfigMap's `data`, a
/// Secret's `stringData`, each from `resources`; and its file mode.
pub fn volume_files(
    resources: &[(PathBuf, Value)],
    pod_spec: &Value,
    name: &str,
) -> (BTreeMap<String, String>, u32) {
    let volumes = pod_spec["volumes"].as_sequence().unwrap();
    let volume = volumes
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no volume {name}"));
    let (source, kind, field, key) = if volume["configMap"].is_mapping() {
        (&volume["configMap"], "ConfigMap", "data", "name")
    } else if volume["secret"].is_mapping() {
        (&volume["secret"], "Secret", "stringData", "secretName")
    } else {
        panic!("volume {name}: only ConfigMaps and Secrets are laid out");
    };
    let resource = find(resources, kind, source[key].as_str().unwrap());
    let default_mode = match &source["defaultMode"] {
        Value::Null => 0o644,
        mode_value => mode(mode_value),
    };
    (strings(&resource[field]), default_mode)
}

/// A volume directory as the kubelet's atomic writer keeps it: the files in
/// a timestamped directory, `..data` a symlink to it, and each file a
/// symlink through `..data`. Each call publishes a new version by swapping
/// `..data` with one rename, as an update of the ConfigMap or Secret does.
pub fn publish(dir: &Path, files: &BTreeMap<String, String>, mode: u32) {
    use std::os::unix::fs::{PermissionsExt, symlink};
    std::fs::create_dir_all(dir).unwrap();
    let version = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    std::fs::create_dir(dir.join(&version)).unwrap();
    for (key, text) in files {
        let file = dir.join(&version).join(key);
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    symlink(&version, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for key in files.keys() {
        let link = dir.join(key);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(key), &link).unwrap();
        }
    }
}

/// `"10s"` as seconds: the manifests give durations in whole seconds.
pub fn seconds(duration: &str) -> u64 {
    let digits = duration.strip_suffix('s');
    let digits = digits.unwrap_or_else(|| panic!("{duration}: expected whole seconds"));
    digits.parse().unwrap()
}

/// The ratekeeper pod as a process sees it: its environment, with each
/// path into a volume moved to where [`Pod::lay_out`] laid that volume out.
pub struct Pod {
    pub env: Vec<(String, String)>,
    /// (volume name, its directory here, its files, their mode).
    volumes: Vec<(String, PathBuf, BTreeMap<String, String>, u32)>,
}

impl Pod {
    /// Lays out every volume the ratekeeper container mounts under `root`
    /// (a mount path `/etc/x` becomes `root/etc/x`), and checks that every
    /// path in its environment is a file of a mounted volume.
    pub fn lay_out(resources: &[(PathBuf, Value)], root: &Path) -> Pod {
        let deployment = find(resources, "Deployment", "ratekeeper");
        let spec = &deployment["spec"]["template"]["spec"];
        let container = &spec["containers"][0];
        assert_eq!(container["name"].as_str(), Some("ratekeeper"));
        let mut volumes = Vec::new();
        let mut moved = Vec::new();
        for mount in container["volumeMounts"].as_sequence().unwrap() {
            let name = mount["name"].as_str().unwrap();
            let path = mount["mountPath"].as_str().unwrap();
            // A subPath mount is a copy that updates never reach.
            assert!(mount["subPath"].is_null(), "{name}: subPath");
            let dir = root.join(path.trim_start_matches('/'));
            let (files, mode) = volume_files(resources, spec, name);
            publish(&dir, &files, mode);
            moved.push((format!("{path}/"), dir.clone(), files.clone()));
            volumes.push((name.to_string(), dir, files, mode));
        }
        let env = env(container)
            .into_iter()
            .map(|(name, value)| {
                if !value.starts_with('/') {
                    return (name, value);
                }
                let (prefix, dir, files) = moved
                    .iter()
                    .find(|(prefix, _, _)| value.starts_with(prefix.as_str()))
                    .unwrap_or_else(|| panic!("{name}={value}: not in a mounted volume"));
                let key = &value[prefix.len()..];
                assert!(
                    files.contains_key(key),
                    "{name}={value}: the volume has no {key}"
                );
                (name, dir.join(key).to_str().unwrap().to_string())
            })
            .collect();
        Pod { env, volumes }
    }

    /// The value of one variable.
    pub fn var(&self, name: &str) -> &str {
        let found = self.env.iter().find(|(n, _)| n == name);
        &found.unwrap_or_else(|| panic!("no {name}")).1
    }

    /// Sets (or adds) one variable.
    pub fn set(&mut self, name: &str, value: &str) {
        self.env.retain(|(n, _)| n != name);
        self.env.push((name.into(), value.into()));
    }

    /// The files of the volume `name`, as shipped.
    pub fn files(&self, name: &str) -> &BTreeMap<String, String> {
        &self.volume(name).2
    }

    /// A new version of the volume `name`: the kubelet's `..data` swap.
    pub fn update(&self, name: &str, files: &BTreeMap<String, String>) {
        let (_, dir, _, mode) = self.volume(name);
        publish(dir, files, *mode);
    }

    fn volume(&self, name: &str) -> &(String, PathBuf, BTreeMap<String, String>, u32) {
        let found = self.volumes.iter().find(|v| v.0 == name);
        found.unwrap_or_else(|| panic!("no volume {name}"))
    }
}
