//! The generated CRD: committed, current, and structural (what a real API server demands).

use serde_json::Value;

use super::*;

#[test]
fn the_committed_crds_are_current() {
    for (file, yaml, command) in [
        ("manifest", crd_yaml(), "crd"),
        ("pipeline", super::pipeline::crd_yaml(), "crd pipeline"),
        ("preview", super::preview::crd_yaml(), "crd preview"),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("crds/{file}.yaml"));
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == yaml,
            "crds/{file}.yaml differs from the Rust types; regenerate it: cargo run -- {command} > crds/{file}.yaml"
        );
    }
}

/// The structural-schema rules an API server enforces, over one node and its children.
fn structural_problems(node: &Value, path: &str, out: &mut Vec<String>) {
    let Some(object) = node.as_object() else { return };
    let has = |key: &str| object.contains_key(key);
    if has("$ref") {
        out.push(format!("{path}: $ref"));
    }
    if has("uniqueItems") {
        out.push(format!("{path}: uniqueItems"));
    }
    if object.get("additionalProperties").is_some_and(Value::is_boolean) {
        out.push(format!("{path}: additionalProperties is a boolean"));
    }
    if has("properties") && has("additionalProperties") {
        out.push(format!("{path}: both properties and additionalProperties"));
    }
    if !(has("type") || has("x-kubernetes-preserve-unknown-fields") || has("x-kubernetes-int-or-string")) {
        out.push(format!("{path}: no type"));
    }
    for (name, child) in object.get("properties").and_then(Value::as_object).into_iter().flatten() {
        structural_problems(child, &format!("{path}.{name}"), out);
    }
    for key in ["additionalProperties", "items"] {
        if let Some(child) = object.get(key).filter(|c| c.is_object()) {
            structural_problems(child, &format!("{path}.{key}"), out);
        }
    }
}

#[test]
fn the_schemas_are_structural() {
    use kube::CustomResourceExt;
    for crd in [Manifest::crd(), super::pipeline::Pipeline::crd(), super::preview::ManifestPreview::crd()] {
        let crd = serde_json::to_value(crd).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        structural_problems(schema, "openAPIV3Schema", &mut problems);
        assert!(problems.is_empty(), "{}: {problems:#?}", crd["metadata"]["name"]);
        let metadata = &schema["properties"]["metadata"];
        assert!(metadata.is_null() || metadata == &serde_json::json!({"type": "object"}), "{metadata}");
        assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object(), "status is a subresource");
    }
}

#[test]
fn the_structural_check_catches_what_it_should() {
    let bad = serde_json::json!({"type": "object", "properties": {"a": {"description": "untyped"}},
                                 "additionalProperties": true});
    let mut problems = Vec::new();
    structural_problems(&bad, "x", &mut problems);
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[test]
fn names_and_printer_columns() {
    use kube::CustomResourceExt;
    let crd = Manifest::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["dm".to_string()]));
    assert_eq!(crd.spec.names.categories, Some(vec!["deployster".to_string()]));
    let columns = &crd.spec.versions[0].additional_printer_columns.clone().unwrap_or_default();
    let shown = |wide: bool| -> Vec<String> {
        let priority = |c: &&k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition| {
            c.priority.unwrap_or(0) == 0 || wide
        };
        columns.iter().filter(priority).map(|c| c.name.to_uppercase()).collect()
    };
    assert_eq!(shown(false), ["READY", "STATUS", "RESOURCES", "LAST APPLIED", "PROGRESS", "AGE"]);
    // `-o wide` adds the replica that reconciles each (under leader election or sharding).
    assert_eq!(shown(true), ["READY", "STATUS", "RESOURCES", "LAST APPLIED", "PROGRESS", "REPLICA", "AGE"]);
}

#[test]
fn the_k8s_example_matches_the_crd_schema() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(Manifest::crd()).unwrap();
    let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let validator = jsonschema::draft4::new(&schema).expect("the CRD schema compiles");
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/k8s");
    let mut manifests = 0;
    for file in ["manifest.yaml", "builtins.yaml"] {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        for document in serde_norway::Deserializer::from_str(&text) {
            let object = Value::deserialize(document).unwrap();
            if object["kind"] != "Manifest" {
                continue;
            }
            manifests += 1;
            let errors: Vec<String> =
                validator.iter_errors(&object).map(|e| format!("{file}{}: {e}", e.instance_path())).collect();
            assert!(errors.is_empty(), "{errors:#?}");
        }
    }
    assert_eq!(manifests, 2, "a Manifest in each example");
    let wrong = serde_json::json!({"spec": {"resources": {}, "deletionPolicy": "Destroy", "suspend": "yes"}});
    assert_eq!(validator.iter_errors(&wrong).count(), 2, "the schema does reject what a server would");
}

/// The example's Pipeline, read into the Rust type and written back (as a client of the
/// library creates one), is what the CRD's schema accepts: no `null` for a field not set.
#[test]
fn a_pipeline_written_from_the_rust_type_matches_the_crd_schema() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(super::pipeline::Pipeline::crd()).unwrap();
    let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let validator = jsonschema::draft4::new(&schema).expect("the CRD schema compiles");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pipeline/k8s.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let document = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|o| o["kind"] == "Pipeline")
        .expect("the example has a Pipeline");
    let typed: super::pipeline::Pipeline = serde_json::from_value(document).unwrap();
    let written = serde_json::to_value(&typed).unwrap();
    let errors: Vec<String> = validator.iter_errors(&written).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{written:#}");
    let stages = written["spec"]["stages"].as_array().unwrap();
    assert!(stages.iter().all(|s| s.get("after").is_none()), "a stage's `after` not given is left out: {written:#}");
}
