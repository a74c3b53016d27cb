//! The SONATA circuit config (`circuit_config.json`, versions 1 and 2): manifest variables and
//! the nodes/edges file lists, with every path resolved against the config's directory.
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::error::{BalancerError, Result};

/// A population named in a `networks.nodes[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PopulationType {
    /// Its name (`populations.<name>`).
    pub name: String,
    /// Its `populations.<name>.type` (`biophysical`, `point_neuron`, `virtual`, ...);
    /// `None` without one.
    pub model_type: Option<String>,
}

/// One `networks.nodes[]` entry.
#[derive(Debug, Clone)]
pub(crate) struct NodesEntry {
    /// JSON path of the entry, for messages (`networks.nodes[1]`).
    pub field: String,
    pub nodes_file: PathBuf,
    pub node_types_file: Option<PathBuf>,
    /// The populations named in the entry, with their `type`.
    pub populations: Vec<PopulationType>,
}

/// One `networks.edges[]` entry.
#[derive(Debug, Clone)]
pub(crate) struct EdgesEntry {
    pub field: String,
    pub edges_file: PathBuf,
    /// Populations named in the entry (all populations of the file are read regardless).
    pub populations: Vec<String>,
}

/// The parts of a circuit config the balancer needs.
#[derive(Debug, Clone)]
pub(crate) struct CircuitConfig {
    /// The file that was parsed (the circuit config, or the one a simulation config's
    /// `network` field named).
    pub path: PathBuf,
    pub nodes: Vec<NodesEntry>,
    pub edges: Vec<EdgesEntry>,
}

fn config_err(path: &Path, field: impl Into<String>, message: impl Into<String>) -> BalancerError {
    BalancerError::Sonata {
        path: path.to_path_buf(),
        population: String::new(),
        field: field.into(),
        message: message.into(),
    }
}

/// Reads a circuit config. A simulation config (no `networks`, a string `network` naming the
/// circuit config) is followed once.
pub(crate) fn load(path: &Path) -> Result<CircuitConfig> {
    let json = read_json(path)?;
    if json.get("networks").is_none() {
        if let Some(network) = json.get("network").and_then(Value::as_str) {
            let vars = Manifest::new(path, &json)?;
            let circuit = vars.path(network, "network")?;
            let inner = read_json(&circuit)?;
            return parse(&circuit, &inner);
        }
    }
    parse(path, &json)
}

/// The JSON of the regular file `path` ([`crate::read_file`]: a FIFO or device is refused,
/// not waited on or read without end).
fn read_json(path: &Path) -> Result<Value> {
    let text = crate::read_file::read_regular(path, u64::MAX).map_err(|e| e.at(path))?;
    serde_json::from_slice(&text).map_err(|source| BalancerError::Json {
        path: path.to_path_buf(),
        error: source,
    })
}

fn parse(path: &Path, json: &Value) -> Result<CircuitConfig> {
    if !json.is_object() {
        return Err(config_err(
            path,
            "(top level)",
            "a circuit config must be a JSON object",
        ));
    }
    let vars = Manifest::new(path, json)?;
    let networks = json.get("networks").ok_or_else(|| {
        config_err(
            path,
            "networks",
            "missing (a circuit config lists its nodes and edges files there)",
        )
    })?;
    if !networks.is_object() {
        return Err(config_err(
            path,
            "networks",
            "must be an object with `nodes` and `edges` lists",
        ));
    }
    let mut nodes = Vec::new();
    for (i, entry) in list(path, networks, "nodes")?.iter().enumerate() {
        let field = format!("networks.nodes[{i}]");
        let nodes_file = vars.required_path(entry, &field, "nodes_file")?;
        let node_types_file = vars.optional_path(entry, &field, "node_types_file")?;
        let populations = populations(path, entry, &field)?
            .into_iter()
            .map(|(name, props)| PopulationType {
                name,
                model_type: props.get("type").and_then(Value::as_str).map(str::to_owned),
            })
            .collect();
        nodes.push(NodesEntry {
            field,
            nodes_file,
            node_types_file,
            populations,
        });
    }
    let mut edges = Vec::new();
    for (i, entry) in list(path, networks, "edges")?.iter().enumerate() {
        let field = format!("networks.edges[{i}]");
        let edges_file = vars.required_path(entry, &field, "edges_file")?;
        let populations = populations(path, entry, &field)?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        edges.push(EdgesEntry {
            field,
            edges_file,
            populations,
        });
    }
    Ok(CircuitConfig {
        path: path.to_path_buf(),
        nodes,
        edges,
    })
}

fn list<'a>(path: &Path, networks: &'a Value, key: &str) -> Result<&'a [Value]> {
    match networks.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(config_err(path, format!("networks.{key}"), "must be a list")),
    }
}

fn populations<'a>(path: &Path, entry: &'a Value, field: &str) -> Result<Vec<(String, &'a Value)>> {
    match entry.get("populations") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => Ok(map.iter().map(|(k, v)| (k.clone(), v)).collect()),
        Some(_) => Err(config_err(
            path,
            format!("{field}.populations"),
            "must be an object",
        )),
    }
}

/// Manifest variables, fully expanded, and the directory relative paths start from.
struct Manifest {
    path: PathBuf,
    dir: PathBuf,
    vars: HashMap<String, String>,
}

impl Manifest {
    /// Expands the `manifest` object: values may use other variables (`$A`, `${A}`),
    /// recursively; `$BASE_DIR` defaults to the config's directory.
    fn new(path: &Path, json: &Value) -> Result<Manifest> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut raw: HashMap<String, String> = HashMap::new();
        match json.get("manifest") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    let name = k.strip_prefix('$').unwrap_or(k);
                    let name = name
                        .strip_prefix('{')
                        .and_then(|n| n.strip_suffix('}'))
                        .unwrap_or(name);
                    let value = v
                        .as_str()
                        .ok_or_else(|| config_err(path, format!("manifest.{k}"), "must be a string"))?;
                    raw.insert(name.to_owned(), value.to_owned());
                }
            }
            Some(_) => return Err(config_err(path, "manifest", "must be an object")),
        }
        raw.entry("BASE_DIR".to_owned())
            .or_insert_with(|| dir.to_string_lossy().into_owned());
        let mut vars = HashMap::new();
        let names: Vec<String> = raw.keys().cloned().collect();
        for name in names {
            resolve(&name, &raw, &mut vars, &mut Vec::new())
                .map_err(|m| config_err(path, format!("manifest.${name}"), m))?;
        }
        Ok(Manifest {
            path: path.to_path_buf(),
            dir,
            vars,
        })
    }

    fn path(&self, value: &str, field: &str) -> Result<PathBuf> {
        let vars = &self.vars;
        let expanded = expand(value, &mut |name| {
            vars.get(name)
                .cloned()
                .ok_or_else(|| format!("unknown manifest variable `${name}`"))
        })
        .map_err(|m| config_err(&self.path, field, m))?;
        if expanded.is_empty() {
            return Err(config_err(&self.path, field, "is empty"));
        }
        let p = PathBuf::from(expanded);
        let p = if p.is_absolute() { p } else { self.dir.join(p) };
        // Drop `.` components (`$BASE_DIR` is often "./"), keeping `..` as written.
        Ok(p.components().filter(|c| *c != Component::CurDir).collect())
    }

    fn optional_path(&self, entry: &Value, field: &str, key: &str) -> Result<Option<PathBuf>> {
        let field = format!("{field}.{key}");
        match entry.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => self.path(s, &field).map(Some),
            Some(_) => Err(config_err(&self.path, field, "must be a string (a file path)")),
        }
    }

    fn required_path(&self, entry: &Value, field: &str, key: &str) -> Result<PathBuf> {
        self.optional_path(entry, field, key)?
            .ok_or_else(|| config_err(&self.path, format!("{field}.{key}"), "missing"))
    }
}

/// Expands manifest variable `name`, memoized in `done`; `stack` detects cycles.
fn resolve(
    name: &str,
    raw: &HashMap<String, String>,
    done: &mut HashMap<String, String>,
    stack: &mut Vec<String>,
) -> std::result::Result<String, String> {
    if let Some(v) = done.get(name) {
        return Ok(v.clone());
    }
    if stack.iter().any(|s| s == name) {
        stack.push(name.to_owned());
        return Err(format!(
            "variables refer to each other in a cycle: ${}",
            stack.join(" -> $")
        ));
    }
    let Some(value) = raw.get(name) else {
        return Err(format!("unknown manifest variable `${name}`"));
    };
    stack.push(name.to_owned());
    let expanded = expand(value, &mut |inner| resolve(inner, raw, done, stack));
    stack.pop();
    let expanded = expanded?;
    done.insert(name.to_owned(), expanded.clone());
    Ok(expanded)
}

/// Replaces `$NAME` and `${NAME}` (NAME: letters, digits, `_`) using `lookup`; an unknown
/// name is an error.
fn expand(
    value: &str,
    lookup: &mut dyn FnMut(&str) -> std::result::Result<String, String>,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("unterminated `${{` in {value:?}"))?;
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            return Err(format!("`$` without a variable name in {value:?}"));
        }
        let v = lookup(name).map_err(|m| format!("{m} (in {value:?})"))?;
        out.push_str(&v);
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(json: &str) -> Result<Manifest> {
        Manifest::new(
            Path::new("/circuits/a/circuit_config.json"),
            &serde_json::from_str(json).unwrap(),
        )
    }

    #[test]
    fn variables_expand_recursively_and_paths_are_relative_to_the_config() {
        let m = manifest(
            r#"{"manifest": {"$NETWORK_DIR": "${BASE_DIR}/net", "$COMPONENTS": "$NETWORK_DIR/comp"}}"#,
        )
        .unwrap();
        assert_eq!(
            m.path("$COMPONENTS/x.h5", "f").unwrap(),
            PathBuf::from("/circuits/a/net/comp/x.h5")
        );
        assert_eq!(
            m.path("nodes.h5", "f").unwrap(),
            PathBuf::from("/circuits/a/nodes.h5")
        );
        assert_eq!(
            m.path("/abs/nodes.h5", "f").unwrap(),
            PathBuf::from("/abs/nodes.h5")
        );
        let m = manifest(r#"{"manifest": {"$BASE_DIR": "./", "$NET": "$BASE_DIR/n"}}"#).unwrap();
        assert_eq!(
            m.path("$NET/e.h5", "f").unwrap(),
            PathBuf::from("/circuits/a/n/e.h5")
        );
    }

    #[test]
    fn unknown_and_cyclic_variables_are_refused() {
        let m = manifest(r#"{"manifest": {"$A": "x"}}"#).unwrap();
        let e = m
            .path("$B/x.h5", "networks.nodes[0].nodes_file")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("networks.nodes[0].nodes_file") && e.contains("$B"),
            "{e}"
        );
        let e = manifest(r#"{"manifest": {"$A": "$B", "$B": "${A}"}}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cycle"), "{e}");
    }
}
