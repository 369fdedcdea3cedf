//! `squall lint -f FILE`: the validating webhook's rules, offline.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use crate::api::validation::{Report, validate_object};

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

/// Lints every document of a multi-document YAML stream.
pub fn lint_yaml(yaml: &str) -> Result<Vec<Linted>, String> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).map_err(|e| e.to_string())?;
    Ok(documents
        .iter()
        .filter(|doc| !doc.is_null())
        .map(|doc| Linted {
            object: describe(doc),
            outcome: validate_object(doc, None).map_or(Outcome::Skipped, Outcome::Checked),
        })
        .collect())
}

pub(super) fn run(files: &[PathBuf]) -> ExitCode {
    let mut any_error = false;
    for file in files {
        let linted = match read(file).and_then(|yaml| lint_yaml(&yaml)) {
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
