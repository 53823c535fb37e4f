//! The book's reference of the custom resources (docs/crd-reference.md), written from the CRDs
//! the Rust types generate, as crds/*.yaml holds them: every field of spec and status.

use std::fmt::Write;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

/// Each custom resource: what it is, its short names, and the fields of its spec and status,
/// three levels deep (a preview's proposed spec is the Manifest's own, listed there).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Custom resources\n\n<!-- Written by `DEPLOYSTER_BLESS=1 cargo test --test local book::` from the CRDs \
         (crds/*.yaml): do not edit. -->\n\nThe controller's custom resources, group `deployster.io`. Install them \
         with the chart, or `deployster crd [manifest|pipeline|preview] | kubectl apply -f -`.\n",
    );
    for crd in [super::Manifest::crd(), super::pipeline::Pipeline::crd(), super::preview::ManifestPreview::crd()] {
        resource(&mut out, &crd);
    }
    out
}

fn resource(out: &mut String, crd: &CustomResourceDefinition) {
    let spec = &crd.spec;
    let version = &spec.versions[0];
    let schema: Value = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(|s| serde_json::to_value(s).expect("a schema serializes"))
        .unwrap_or_default();
    let short_names: Vec<String> = spec.names.short_names.iter().flatten().map(|s| format!("`{s}`")).collect();
    let _ = write!(
        out,
        "\n## {} (`{}/{}`)\n\n{}\n\nShort names: {}.\n",
        spec.names.kind,
        spec.group,
        version.name,
        schema["description"].as_str().unwrap_or_default(),
        short_names.join(", ")
    );
    for part in ["spec", "status"] {
        if schema["properties"][part].is_object() {
            let _ = write!(out, "\n### `{part}`\n\n| field | type | required | what |\n|---|---|---|---|\n");
            crate::builtins::reference::schema_rows(out, &schema["properties"][part], &format!("{part}."), 2);
        }
    }
}
