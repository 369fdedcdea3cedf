//! Running the helm binary `hack/build-tools.sh` built against `charts/squall`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::shared::workspace_root;

/// The chart in the repository.
pub fn chart_dir() -> PathBuf {
    workspace_root().join("charts/squall")
}

/// The helm binary: `SQUALL_HELM`, else the one `hack/build-tools.sh` built, else `helm` on
/// `PATH` (kind runs).
pub fn helm_path() -> PathBuf {
    if let Some(path) = std::env::var_os("SQUALL_HELM") {
        return path.into();
    }
    Command::new(workspace_root().join("hack/build-tools.sh"))
        .arg("--print-bin")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("helm"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "helm".into())
}

/// Output of a helm run.
#[derive(Debug)]
pub struct HelmOutput {
    /// Whether helm exited 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs helm with `args`.
pub fn helm(args: &[&str]) -> HelmOutput {
    let out = Command::new(helm_path())
        .args(args)
        .output()
        .expect("helm runs (hack/build-tools.sh builds it)");
    HelmOutput {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `--set` flags for helm from `key=value` pairs.
fn set_flags<'a>(values: &[&'a str]) -> Vec<&'a str> {
    values.iter().flat_map(|v| ["--set", *v]).collect()
}

/// `helm template` of `chart` as release `squall` in `squall-system` with `values`, as
/// documents; `Err` with helm's message when rendering fails.
pub fn template_chart(chart: &Path, values: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart.to_str().expect("utf-8 path");
    let mut args = vec!["template", "squall", chart, "--namespace", "squall-system"];
    args.extend(set_flags(values));
    let out = helm(&args);
    if !out.success {
        return Err(out.stderr);
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(&out.stdout)
        .map_err(|e| format!("helm template output is not YAML: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `helm template` of the repository's chart.
pub fn template(values: &[&str]) -> Result<Vec<Value>, String> {
    template_chart(&chart_dir(), values)
}

/// `helm lint --strict` of the repository's chart with `values`.
pub fn lint(values: &[&str]) -> HelmOutput {
    let chart = chart_dir();
    let mut args = vec!["lint", "--strict", chart.to_str().expect("utf-8 path")];
    args.extend(set_flags(values));
    helm(&args)
}
