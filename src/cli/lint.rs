//! `squall lint -f FILE [--analysis-config FILE]`: the validating webhook's rules, offline.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use crate::admission::validation::{OwnedKind, Report, View, validate_object};
use crate::api::tenancy::ConfiguredEndpoint;
use crate::controller::analysis::AnalysisConfig;

/// Outcome of linting one document.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not a kind squall owns.
    Skipped,
    /// Validated.
    Checked(Report),
}

/// One document of a manifest stream, with what lint found.
#[derive(Debug)]
pub struct Linted {
    /// `Kind namespace/name` of the document.
    pub object: String,
    /// What lint found.
    pub outcome: Outcome,
}

/// Lints every document of a multi-document YAML stream; with the operator's analysis
/// `endpoints`, analysis metrics must name one of them.
pub fn lint_yaml(
    yaml: &str,
    endpoints: Option<&[ConfiguredEndpoint]>,
) -> Result<Vec<Linted>, String> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).map_err(|e| e.to_string())?;
    Ok(documents
        .iter()
        .filter(|doc| !doc.is_null())
        .map(|doc| Linted {
            object: describe(doc),
            outcome: validate_object(doc, None).map_or(Outcome::Skipped, |mut report| {
                if let Some(endpoints) = endpoints.filter(|_| report.is_valid())
                    && let Some(kind) = OwnedKind::of(doc)
                    && let Ok(json) = serde_json::to_string(doc)
                    && let Some(view) = View::parse(kind, &json)
                {
                    report.errors.extend(view.endpoint_errors(endpoints));
                }
                Outcome::Checked(report)
            }),
        })
        .collect())
}

pub(super) fn run(files: &[PathBuf], analysis_config: Option<&Path>) -> ExitCode {
    let endpoints: Option<Vec<ConfiguredEndpoint>> = match analysis_config.map(|path| {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        AnalysisConfig::parse(&text).map_err(|e| e.to_string())
    }) {
        None => None,
        Some(Ok(config)) => Some(config.endpoints()),
        Some(Err(e)) => {
            eprintln!("--analysis-config: {e}");
            return ExitCode::from(2);
        }
    };
    let mut any_error = false;
    for file in files {
        let linted = match read(file).and_then(|yaml| lint_yaml(&yaml, endpoints.as_deref())) {
            Ok(linted) => linted,
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        for Linted { object, outcome } in linted {
            match outcome {
                Outcome::Skipped => {
                    println!("{}: {object}: skipped (not a squall kind)", file.display())
                }
                Outcome::Checked(report) => {
                    let verdict = if report.is_valid() {
                        "valid"
                    } else {
                        "invalid"
                    };
                    println!("{}: {object}: {verdict}", file.display());
                    for error in &report.errors {
                        println!("  error: {error}");
                    }
                    for warning in &report.warnings {
                        println!("  warning: {warning}");
                    }
                    any_error |= !report.is_valid();
                }
            }
        }
    }
    if any_error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn read(file: &Path) -> Result<String, String> {
    if file == Path::new("-") {
        let mut yaml = String::new();
        std::io::stdin()
            .read_to_string(&mut yaml)
            .map_err(|e| e.to_string())?;
        Ok(yaml)
    } else {
        std::fs::read_to_string(file).map_err(|e| e.to_string())
    }
}

fn describe(doc: &Value) -> String {
    let field = |pointer: &str| doc.pointer(pointer).and_then(Value::as_str);
    let kind = field("/kind").unwrap_or("<no kind>");
    let name = field("/metadata/name")
        .or(field("/metadata/generateName"))
        .unwrap_or("<no name>");
    match field("/metadata/namespace") {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}
