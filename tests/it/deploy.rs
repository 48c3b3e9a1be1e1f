//! The manifests in `deploy/`: read-only RBAC that matches what the collector watches, one
//! replica on the store volume, probes and config wired to what `gpuledger collect` serves and
//! reads, and a kustomization that installs all of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gpuledger_collector::live::resources::WATCHED;
use serde_yaml::Value;

const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every `deploy/*.yaml` file name, sorted.
fn yaml_files() -> Vec<String> {
    let dir = deploy_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "{} holds no YAML files", dir.display());
    names
}

/// Every document of every `deploy/*.yaml` file, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in yaml_files() {
        let path = deploy_dir().join(&name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        // Documents are separated by `---` lines (the test crate has no serde to stream them).
        let mut doc = String::new();
        for line in text.lines().chain(std::iter::once("---")) {
            if line.trim_end() == "---" {
                let v: Value = serde_yaml::from_str(&doc).unwrap_or_else(|e| panic!("deploy/{name} is not valid YAML: {e}"));
                if !v.is_null() {
                    out.push((name.clone(), v));
                }
                doc.clear();
            } else {
                doc.push_str(line);
                doc.push('\n');
            }
        }
    }
    out
}

/// The one object of `kind`; panics naming what is missing or doubled.
fn object(docs: &[(String, Value)], kind: &str) -> Value {
    let found: Vec<&(String, Value)> = docs.iter().filter(|(_, v)| v["kind"].as_str() == Some(kind)).collect();
    assert_eq!(found.len(), 1, "deploy/ should hold exactly one {kind}, found {} ({:?})", found.len(), found.iter().map(|(f, _)| f).collect::<Vec<_>>());
    found[0].1.clone()
}

fn strings(v: &Value, what: &str) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} should be a list, is {v:?}"))
        .iter()
        .map(|s| s.as_str().unwrap_or_else(|| panic!("{what} should hold strings, holds {s:?}")).to_owned())
        .collect()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("<no name>")
}

#[test]
fn every_yaml_file_parses_and_is_a_kubernetes_object() {
    for (file, v) in documents() {
        assert!(v["apiVersion"].as_str().is_some(), "deploy/{file}: a document without apiVersion");
        assert!(v["kind"].as_str().is_some(), "deploy/{file}: a document without kind");
    }
}

#[test]
fn clusterrole_is_read_only_and_matches_watched_resources() {
    let docs = documents();
    let role = object(&docs, "ClusterRole");
    assert_eq!(name(&role), "gpuledger-collector-read", "the ClusterRole has the wrong name");
    let rules = role["rules"].as_sequence().expect("the ClusterRole has no rules list");
    let mut granted = BTreeSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let verbs: BTreeSet<String> = strings(&rule["verbs"], &format!("rule {i} verbs")).into_iter().collect();
        let want: BTreeSet<String> = READ_VERBS.iter().map(|s| s.to_string()).collect();
        assert_eq!(verbs, want, "ClusterRole rule {i} should grant exactly get, list, watch, grants {verbs:?}");
        assert!(rule["resourceNames"].is_null() && rule["nonResourceURLs"].is_null(), "ClusterRole rule {i} should name resources only, not resourceNames or nonResourceURLs");
        for group in strings(&rule["apiGroups"], &format!("rule {i} apiGroups")) {
            for resource in strings(&rule["resources"], &format!("rule {i} resources")) {
                assert!(granted.insert((group.clone(), resource.clone())), "ClusterRole grants ({group:?}, {resource:?}) twice");
            }
        }
    }
    let watched: BTreeSet<(String, String)> = WATCHED.iter().map(|r| (r.group.to_owned(), r.plural.to_owned())).collect();
    let missing: Vec<_> = watched.difference(&granted).collect();
    assert!(missing.is_empty(), "the collector watches (group, resource) {missing:?} but deploy/clusterrole.yaml does not grant it: add a rule");
    let extra: Vec<_> = granted.difference(&watched).collect();
    assert!(extra.is_empty(), "deploy/clusterrole.yaml grants (group, resource) {extra:?} that the collector does not watch (WATCHED): remove it");
}

#[test]
fn no_role_anywhere_writes_or_reads_secrets() {
    for (file, v) in documents() {
        let kind = v["kind"].as_str().unwrap_or_default();
        if kind != "Role" && kind != "ClusterRole" {
            continue;
        }
        let role = name(&v);
        assert!(v["aggregationRule"].is_null(), "deploy/{file}: {kind} {role} aggregates other roles; grant explicitly");
        for (i, rule) in v["rules"].as_sequence().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
            for verb in strings(&rule["verbs"], &format!("{role} rule {i} verbs")) {
                assert!(READ_VERBS.contains(&verb.as_str()), "deploy/{file}: {kind} {role} rule {i} grants verb {verb:?}; only get, list, watch are allowed");
            }
            for resource in strings(&rule["resources"], &format!("{role} rule {i} resources")) {
                assert!(resource != "secrets" && resource != "*", "deploy/{file}: {kind} {role} rule {i} grants resource {resource:?}; secrets must stay unreadable");
            }
        }
    }
}

#[test]
fn clusterrolebinding_binds_the_role_to_the_collector_account() {
    let docs = documents();
    let binding = object(&docs, "ClusterRoleBinding");
    let role = object(&docs, "ClusterRole");
    let account = object(&docs, "ServiceAccount");
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("ClusterRole"), "the ClusterRoleBinding should refer to a ClusterRole");
    assert_eq!(binding["roleRef"]["name"].as_str(), Some(name(&role)), "the ClusterRoleBinding refers to another role than deploy/clusterrole.yaml's");
    let subjects = binding["subjects"].as_sequence().expect("the ClusterRoleBinding has no subjects");
    assert!(
        subjects.iter().any(|s| s["kind"].as_str() == Some("ServiceAccount")
            && s["name"].as_str() == Some(name(&account))
            && s["namespace"] == account["metadata"]["namespace"]),
        "the ClusterRoleBinding does not name ServiceAccount {} in its namespace",
        name(&account)
    );
    let deployment = object(&docs, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some(name(&account)),
        "the Deployment should run as ServiceAccount {}",
        name(&account)
    );
}

/// The value of `--flag` in `args` (as `--flag VALUE` or `--flag=VALUE`).
fn flag(args: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| if a == flag { args.get(i + 1).cloned() } else { a.strip_prefix(&eq).map(str::to_owned) })
}

/// The mount path of the volume (in `spec`) that `is_it` picks, mounted in `container`.
fn mount_of(spec: &Value, container: &Value, what: &str, is_it: impl Fn(&Value) -> bool) -> String {
    let volumes = spec["volumes"].as_sequence().expect("the Deployment's pod has no volumes");
    let volume = volumes.iter().find(|v| is_it(v)).unwrap_or_else(|| panic!("the Deployment's pod has no volume from the {what}"));
    let mounts = container["volumeMounts"].as_sequence().expect("the collector container has no volumeMounts");
    let mount = mounts
        .iter()
        .find(|m| m["name"] == volume["name"])
        .unwrap_or_else(|| panic!("the {what} volume {:?} is not mounted in the collector container", volume["name"]));
    mount["mountPath"].as_str().expect("a volumeMount without mountPath").trim_end_matches('/').to_owned()
}

#[test]
fn deployment_runs_one_collector_on_the_store_with_probes() {
    let docs = documents();
    let deployment = object(&docs, "Deployment");
    let configmap = object(&docs, "ConfigMap");
    let pvc = object(&docs, "PersistentVolumeClaim");
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(1), "the Deployment must run exactly 1 replica (the store is locked by one collector)");
    assert_eq!(
        deployment["spec"]["strategy"]["type"].as_str(),
        Some("Recreate"),
        "the Deployment strategy must be Recreate: a RollingUpdate would start a second collector on the locked store"
    );
    let spec = &deployment["spec"]["template"]["spec"];
    let containers = spec["containers"].as_sequence().expect("the Deployment has no containers");
    assert_eq!(containers.len(), 1, "the Deployment's pod should have one container, has {}", containers.len());
    let c = &containers[0];

    // With `command` set, its first item replaces the image's entrypoint; the rest are arguments.
    let mut args = if c["command"].is_null() { Vec::new() } else { strings(&c["command"], "container command").into_iter().skip(1).collect() };
    args.extend(strings(&c["args"], "container args"));
    assert_eq!(args.first().map(String::as_str), Some("collect"), "the container should run `gpuledger collect`, runs {args:?}");

    let config_mount = mount_of(spec, c, "ConfigMap", |v| v["configMap"]["name"].as_str() == Some(name(&configmap)));
    let config = flag(&args, "--config").unwrap_or_else(|| panic!("the container args {args:?} lack --config"));
    let key = config
        .strip_prefix(&format!("{config_mount}/"))
        .unwrap_or_else(|| panic!("--config {config} is not inside the ConfigMap mount {config_mount}"));
    assert!(configmap["data"][key].is_string(), "--config {config} names key {key:?}, which the ConfigMap {} does not hold", name(&configmap));

    let store_mount = mount_of(spec, c, "PersistentVolumeClaim", |v| v["persistentVolumeClaim"]["claimName"].as_str() == Some(name(&pvc)));
    let store = flag(&args, "--store").unwrap_or_else(|| panic!("the container args {args:?} lack --store"));
    assert!(
        store == store_mount || store.starts_with(&format!("{store_mount}/")),
        "--store {store} is not inside the PVC mount {store_mount}: the store would be lost on restart"
    );

    let ports = c["ports"].as_sequence().expect("the collector container declares no ports");
    let metrics = ports.iter().find(|p| p["name"].as_str() == Some("metrics")).expect("the collector container has no port named metrics");
    let metrics_port = metrics["containerPort"].as_u64().expect("the metrics port has no containerPort");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "the {probe} should GET {path}, is {:?}", c[probe]);
        let on_metrics = get["port"].as_str() == Some("metrics") || get["port"].as_u64() == Some(metrics_port);
        assert!(on_metrics, "the {probe} should use the container port named metrics, uses {:?}", get["port"]);
    }

    // The config's listen address must be the port the probes and the Service use.
    let text = configmap["data"][key].as_str().expect("ConfigMap entry is text");
    let listen = gpuledger_collector::live::CollectorConfig::parse(text, Path::new("deploy/configmap.yaml")).unwrap_or_else(|e| panic!("{e}")).listen;
    assert_eq!(u64::from(listen.port()), metrics_port, "[collector] listen {listen} and the container port named metrics ({metrics_port}) differ");

    let service = object(&docs, "Service");
    let sports = service["spec"]["ports"].as_sequence().expect("the Service has no ports");
    assert!(
        sports.iter().any(|p| p["name"].as_str() == Some("metrics")
            && (p["targetPort"].as_str() == Some("metrics") || p["targetPort"].as_u64() == Some(metrics_port))),
        "the Service should expose a port named metrics that targets the container's metrics port"
    );
}

#[test]
fn configmap_holds_a_valid_config_listening_on_all_interfaces() {
    let docs = documents();
    let configmap = object(&docs, "ConfigMap");
    let text = configmap["data"]["gpuledger.toml"].as_str().expect("the ConfigMap has no gpuledger.toml entry");
    gpuledger_ledger::config::Config::parse(text, Path::new("deploy/configmap.yaml"))
        .unwrap_or_else(|e| panic!("the ConfigMap's gpuledger.toml is not a valid config: {e}"));
    assert!(text.contains("[collector]"), "the ConfigMap's gpuledger.toml has no [collector] section");
    let collector = gpuledger_collector::live::CollectorConfig::parse(text, Path::new("deploy/configmap.yaml"))
        .unwrap_or_else(|e| panic!("the ConfigMap's gpuledger.toml has a bad [collector] section: {e}"));
    assert_eq!(
        collector.listen.to_string(),
        "0.0.0.0:9464",
        "[collector] listen should be \"0.0.0.0:9464\" so that Prometheus and the probes reach the pod"
    );
}

#[test]
fn kustomization_lists_every_manifest_once() {
    let path = deploy_dir().join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let k: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("deploy/kustomization.yaml is not valid YAML: {e}"));
    let listed = strings(&k["resources"], "kustomization resources");
    let mut seen = BTreeSet::new();
    for r in &listed {
        assert!(seen.insert(r.as_str()), "deploy/kustomization.yaml lists {r} more than once");
    }
    let files: BTreeSet<String> = yaml_files().into_iter().filter(|f| f != "kustomization.yaml").collect();
    let listed: BTreeSet<String> = listed.into_iter().collect();
    let unlisted: Vec<_> = files.difference(&listed).collect();
    assert!(unlisted.is_empty(), "deploy/kustomization.yaml does not list {unlisted:?}: `kubectl apply -k deploy/` would skip them");
    let absent: Vec<_> = listed.difference(&files).collect();
    assert!(absent.is_empty(), "deploy/kustomization.yaml lists {absent:?}, which are not YAML files in deploy/");
}

/// A "1.95" or "1.95.0" version as numbers, for comparing.
fn version(text: &str) -> Vec<u32> {
    text.split('.').map(|p| p.parse().unwrap_or_else(|_| panic!("not a version: {text}"))).collect()
}

/// The image's build stage uses a toolchain at least as new as the workspace's `rust-version`:
/// cargo refuses to build otherwise, so the Dockerfile as written would not build.
#[test]
fn the_image_toolchain_satisfies_rust_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Value = toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let wanted = manifest["workspace"]["package"]["rust-version"].as_str().expect("workspace.package.rust-version");
    let dockerfile = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    let image = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM rust:"))
        .next()
        .expect("a FROM rust:<version> build stage in deploy/Dockerfile");
    let tag = image.split(|c: char| c == '-' || c.is_whitespace()).next().unwrap();
    let (mut have, mut want) = (version(tag), version(wanted));
    let n = have.len().max(want.len());
    have.resize(n, 0);
    want.resize(n, 0);
    assert!(have >= want, "deploy/Dockerfile builds with rust:{tag}, the workspace needs rust-version {wanted}");
}
