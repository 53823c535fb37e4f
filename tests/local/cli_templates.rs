//! Templates that would build gigabytes fail at once with exit 2, naming the resource and the
//! path, and deployster's memory stays near what a plan of a small manifest takes.

use crate::support::Workspace;

/// What a plan of one small resource peaks at, in KiB.
fn baseline() -> u64 {
    let ws = Workspace::new();
    ws.manifest("resources:\n  f: {type: builtin/file, config: {path: /tmp/deployster-baseline, content: \"{{ 'x' * 10 }}\"}}\n");
    let (run, peak) = ws.run_measured(&["plan", "-f", "manifest.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    peak
}

#[test]
fn a_template_too_large_to_build_fails_at_once_and_memory_stays_near_its_baseline() {
    let baseline = baseline();
    let quote = |t: &str| serde_json::to_string(t).unwrap();
    let attacks = [
        "{% for i in range(1000) %}{{ 'a' * 1000000 }}{% endfor %}",
        "{% set s = 'a' * 10000000 %}{% set s = s ~ s %}{% set s = s ~ s %}{% set s = s ~ s %}{% set s = s ~ s %}{{ s }}",
        "{% set l = range(100000)|list %}{% set l = l + l %}{% set l = l + l %}{% set l = l + l %}{{ l|join(',') }}",
        "{{ ('a' * 60000000) ~ ('b' * 60000000) }}",
    ];
    for attack in attacks {
        let ws = Workspace::new();
        ws.manifest(&format!(
            "resources:\n  big_file: {{type: builtin/file, config: {{path: /tmp/deployster-never, content: {}}}}}\n",
            quote(attack)
        ));
        let started = std::time::Instant::now();
        let (run, peak) = ws.run_measured(&["plan", "-f", "manifest.yaml"]);
        assert_eq!(run.code, 2, "{attack}: {}", run.all());
        assert!(run.stderr.contains("big_file"), "{attack}: names the resource: {}", run.stderr);
        assert!(run.stderr.contains("config.content"), "{attack}: names the path: {}", run.stderr);
        assert!(run.stderr.contains("more than 16 MiB"), "{attack}: says why: {}", run.stderr);
        eprintln!("{attack:.50}: {:?}, peak {} MiB (baseline {} MiB)", started.elapsed(), peak >> 10, baseline >> 10);
        assert!(peak < baseline + 64 * 1024, "{attack}: peak {peak} KiB against a baseline of {baseline} KiB");
    }
}

#[test]
fn a_var_file_value_too_large_to_build_fails_naming_the_file_and_key() {
    let baseline = baseline();
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  f: {type: builtin/file, config: {path: /tmp/deployster-never, content: \"{{ big }}\"}}\n",
    );
    ws.write(
        "vars.yaml",
        "big: \"{% set s = 'a' * 10000000 %}{% for i in range(100) %}{% set s = s ~ s %}{% endfor %}{{ s }}\"\n",
    );
    let (run, peak) = ws.run_measured(&["plan", "-f", "manifest.yaml", "--var-file", "vars.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("vars.yaml") && run.stderr.contains("big"), "{}", run.stderr);
    assert!(run.stderr.contains("more than 16 MiB"), "{}", run.stderr);
    assert!(peak < baseline + 64 * 1024, "peak {peak} KiB against a baseline of {baseline} KiB");
}
