//! Validation of StormService, RoleSet and PodSet (docs/admission.md#rules): one set of pure
//! functions for the validating webhook, the controllers (`InvalidSpec`) and `squall lint`.
//!
//! Errors name the field in Kubernetes' path form (`spec.template.spec.roles[1].name`);
//! warnings are advice that never blocks an apply.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::view::{
    MetaView, ObjectView, PairingView, RoleSetSpecView, RoleSetView, RoleView, SchedulingView,
    SelectorView, StatusView, StepView, StormServiceSpecView, StormServiceView,
};
use crate::api::analysis::{
    Analysis, AnalysisMetric, MAX_ANALYSIS_COUNT, MAX_ANALYSIS_METRICS, MAX_ANALYSIS_WAIT,
    MAX_METRIC_NAME_BYTES, MAX_QUERY_BYTES, MIN_ANALYSIS_INTERVAL, QueryValues, render_query,
};
use crate::api::borrowed::{IntOrStr, Str};
use crate::api::budget::{Budget, resolve_fenceposts};
use crate::api::condition::Condition;
use crate::api::drain::{
    Drain, DrainQuery, DrainValues, MAX_DRAIN_INTERVAL, MAX_DRAIN_TIMEOUT, render_drain_query,
};
use crate::api::duration::pause_seconds;
use crate::api::limits::{
    MAX_ABORT_SCALE_DOWN_DELAY_SECONDS, MAX_CANARY_STEPS, MAX_CONTAINERS, MAX_LABEL_VALUE_LEN,
    MAX_MIN_READY_SECONDS, MAX_PAIRING_GROUPS, MAX_REPLICAS, MAX_ROLE_NAME_LEN, MAX_ROLES,
};
use crate::api::podgroup::Scheduler;
use crate::api::tenancy::ConfiguredEndpoint;
use crate::api::{
    CanaryPhase, GROUP, PodSet, RoleSet, RoleSetUpdateStrategy, RoleUpdateStrategyType,
    StormService, StormServiceUpdateStrategyType, VERSION,
};

/// One violation, for one field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldError {
    /// Kubernetes field path, e.g. `spec.template.spec.roles[1].name`.
    pub path: String,
    /// What is wrong, in Kubernetes' `field.Error` wording.
    pub kind: ErrorKind,
}

/// The kinds of violation, worded as Kubernetes' `field.Error` types.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `Invalid value: <value>: <detail>`.
    Invalid { value: String, detail: String },
    /// `Required value: <detail>`.
    Required(String),
    /// `Duplicate value: <value>`.
    Duplicate(String),
    /// `Forbidden: <detail>`.
    Forbidden(String),
    /// `Too many: <actual>: must have at most <max> items`.
    TooMany { actual: usize, max: usize },
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Invalid { value, detail } => {
                write!(f, "{}: Invalid value: {value}: {detail}", self.path)
            }
            ErrorKind::Required(detail) => write!(f, "{}: Required value: {detail}", self.path),
            ErrorKind::Duplicate(value) => write!(f, "{}: Duplicate value: {value}", self.path),
            ErrorKind::Forbidden(detail) => write!(f, "{}: Forbidden: {detail}", self.path),
            ErrorKind::TooMany { actual, max } => write!(
                f,
                "{}: Too many: {actual}: must have at most {max} items",
                self.path
            ),
        }
    }
}

/// The outcome of validating one object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Violations; any one denies the object.
    pub errors: Vec<FieldError>,
    /// Advice returned as admission warnings.
    pub warnings: Vec<String>,
}

impl Report {
    /// A report of one error.
    fn from_error(error: FieldError) -> Self {
        Self {
            errors: vec![error],
            warnings: Vec::new(),
        }
    }

    /// True when the object is admitted.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }

    /// All errors on one line, for a denial or a condition message.
    pub fn error_message(&self) -> String {
        self.errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn invalid(&mut self, path: impl fmt::Display, value: impl fmt::Display, detail: &str) {
        self.errors.push(FieldError {
            path: path.to_string(),
            kind: ErrorKind::Invalid {
                value: value.to_string(),
                detail: detail.to_string(),
            },
        });
    }

    fn required(&mut self, path: impl fmt::Display, detail: &str) {
        self.errors.push(FieldError {
            path: path.to_string(),
            kind: ErrorKind::Required(detail.to_string()),
        });
    }

    fn forbidden(&mut self, path: impl fmt::Display, detail: &str) {
        self.errors.push(FieldError {
            path: path.to_string(),
            kind: ErrorKind::Forbidden(detail.to_string()),
        });
    }

    /// Adds a warning once. The list stays short (a few per role, and roles are bounded), so
    /// the linear look-up is cheap.
    fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }
}

/// The kinds squall serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnedKind {
    /// `StormService`
    StormService,
    /// `RoleSet`
    RoleSet,
    /// `PodSet`
    PodSet,
}

impl OwnedKind {
    /// The owned kind of a raw object, from its `apiVersion` and `kind`; `None` for any
    /// other kind.
    pub fn of(object: &Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        if api_version != format!("{GROUP}/{VERSION}") {
            return None;
        }
        match object.get("kind")?.as_str()? {
            "StormService" => Some(Self::StormService),
            "RoleSet" => Some(Self::RoleSet),
            "PodSet" => Some(Self::PodSet),
            _ => None,
        }
    }
}

/// Parses a raw object into a typed one; the error names the offending field (and, for an
/// unknown enum value, lists the valid ones).
pub fn parse<T: DeserializeOwned>(object: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(object).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            path: if path == "." { "<object>".into() } else { path },
            kind: ErrorKind::Invalid {
                value: "(as written)".into(),
                detail: e.into_inner().to_string(),
            },
        }
    })
}

/// The list bounds of `crate::api::limits`, checked on the raw object before it is parsed
/// into squall's types: a typed role takes over 2 KB however little JSON it came from, so
/// parsing an oversized list first costs hundreds of MB (a 1.3 MB review of 72,000 roles
/// took 660 MB). Other kinds pass.
pub fn raw_bounds(object: &Value) -> Result<(), FieldError> {
    OwnedKind::of(object).map_or(Ok(()), |kind| raw_bounds_as(kind, object))
}

/// [`raw_bounds`] of `object` read as `kind` (a review names the kind; a hand-made one may
/// leave it out of the object).
fn raw_bounds_as(kind: OwnedKind, object: &Value) -> Result<(), FieldError> {
    let count = |list: Option<&Value>| list.and_then(Value::as_array).map_or(0, Vec::len);
    let (spec_path, steps, roles) = match kind {
        OwnedKind::StormService => (
            "spec.template.spec",
            count(object.pointer("/spec/updateStrategy/canary/steps")),
            object.pointer("/spec/template/spec/roles"),
        ),
        OwnedKind::RoleSet => ("spec", 0, object.pointer("/spec/roles")),
        OwnedKind::PodSet => return Ok(()),
    };
    let roles = roles
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    check_bounds(
        spec_path,
        steps,
        roles.len(),
        roles.iter().map(|role| {
            (
                count(role.pointer("/template/spec/containers")),
                count(role.pointer("/template/spec/initContainers")),
            )
        }),
    )
}

/// The list bounds of a StormService's `steps` (none for a RoleSet) and of the roles of the
/// RoleSet spec at `spec_path` with their (containers, initContainers) counts: the first
/// one exceeded. A final `setWeight: 100` may come on top of the steps a user wrote.
fn check_bounds(
    spec_path: &str,
    steps: usize,
    roles: usize,
    containers: impl Iterator<Item = (usize, usize)>,
) -> Result<(), FieldError> {
    let too_many = |path: String, actual: usize, max: usize| {
        Err(FieldError {
            path,
            kind: ErrorKind::TooMany { actual, max },
        })
    };
    if steps > MAX_CANARY_STEPS + 1 {
        return too_many(
            "spec.updateStrategy.canary.steps".into(),
            steps,
            MAX_CANARY_STEPS + 1,
        );
    }
    if roles > MAX_ROLES {
        return too_many(format!("{spec_path}.roles"), roles, MAX_ROLES);
    }
    for (i, (containers, init_containers)) in containers.enumerate() {
        for (list, count) in [
            ("containers", containers),
            ("initContainers", init_containers),
        ] {
            if count > MAX_CONTAINERS {
                return too_many(
                    format!("{spec_path}.roles[{i}].template.spec.{list}"),
                    count,
                    MAX_CONTAINERS,
                );
            }
        }
    }
    Ok(())
}

/// [`check_bounds`] of a parsed view.
fn view_bounds(
    spec_path: &str,
    steps: usize,
    spec: Option<&RoleSetSpecView<'_>>,
) -> Result<(), FieldError> {
    let roles = spec.and_then(|s| s.roles.as_deref()).unwrap_or_default();
    check_bounds(
        spec_path,
        steps,
        roles.len(),
        roles.iter().map(|role| {
            let pod = role.template.as_ref().and_then(|t| t.spec.as_ref());
            (
                pod.map_or(0, |p| p.containers.0),
                pod.and_then(|p| p.init_containers).map_or(0, |c| c.0),
            )
        }),
    )
}

/// Validates a raw object of an owned kind (`old` on UPDATE); `None` for other kinds.
pub fn validate_object(new: &Value, old: Option<&Value>) -> Option<Report> {
    let kind = OwnedKind::of(new)?;
    if kind == OwnedKind::PodSet {
        return Some(match parse::<PodSet>(new) {
            Ok(podset) => validate_podset(&podset, None),
            Err(error) => Report::from_error(error),
        });
    }
    let new = new.to_string();
    let old = old.map(Value::to_string);
    Some(validate_json(kind, &new, old.as_deref()))
}

/// Validates the JSON of a StormService or a RoleSet (`old`: the stored object on UPDATE) —
/// the validating webhook's entry, and through [`validate_object`] and the typed entries,
/// `squall lint`'s and the controllers'.
///
/// The object is read as a view ([`crate::admission::view`]): nothing is copied, and nothing is
/// formatted unless a rule reports. An object that does not parse is reported as one error
/// naming the field (found by parsing it again into squall's types); one over the list
/// bounds as that error alone (an update that keeps the stored object's excess is
/// ratcheted through).
pub fn validate_json(kind: OwnedKind, new: &str, old: Option<&str>) -> Report {
    let view = if old.is_some() {
        View::parse(kind, new)
    } else {
        View::parse_once(kind, new)
    };
    match view {
        Some(view) => validate_view(kind, &view, old),
        None => unreadable(kind, new, old),
    }
}

/// [`validate_json`] of an object already read as a view ([`View::parse`] when `old`, the
/// stored object's JSON, is given; [`View::parse_once`] or [`View::parse`] when not).
pub fn validate_view(kind: OwnedKind, view: &View<'_>, old: Option<&str>) -> Report {
    let old_view = old.and_then(|old| View::parse(kind, old));
    if let Err(error) = view.bounds() {
        let mut report = Report::from_error(error);
        let old_error = match (&old_view, old) {
            (Some(old_view), _) => old_view.bounds().err(),
            (None, Some(old)) => bounds_of_raw(kind, old).err(),
            (None, None) => None,
        };
        if let Some(old_error) = old_error {
            ratchet(&mut report, &Report::from_error(old_error));
        }
        return report;
    }
    let old_view = old_view.filter(|o| o.bounds().is_ok());
    match &view.spec {
        Spec::StormService(spec) => {
            let old = old_view.as_ref().and_then(|o| match &o.spec {
                Spec::StormService(old_spec) => Some((o, old_spec)),
                Spec::RoleSet(_) => None,
            });
            validate_stormservice_view(view, spec, old)
        }
        Spec::RoleSet(spec) => {
            let old = old_view.as_ref().and_then(|o| match &o.spec {
                Spec::RoleSet(old_spec) => Some((o, old_spec)),
                Spec::StormService(_) => None,
            });
            validate_roleset_view(view, spec, old)
        }
    }
}

/// An object whose view does not parse: the bounds (ratcheted against the stored object's),
/// then the field that breaks parsing it into squall's types.
fn unreadable(kind: OwnedKind, new: &str, old: Option<&str>) -> Report {
    let error = read_error(kind, new);
    let mut report = Report::from_error(error);
    if matches!(report.errors[0].kind, ErrorKind::TooMany { .. })
        && let Some(Err(old_error)) = old.map(|old| bounds_of_raw(kind, old))
    {
        ratchet(&mut report, &Report::from_error(old_error));
    }
    report
}

/// Why `json` has no view as `kind`: the first list bound it exceeds, or the field that
/// breaks parsing it into squall's types — found on the slow path, which only bad objects
/// take.
pub fn read_error(kind: OwnedKind, json: &str) -> FieldError {
    let invalid = |path: &str, detail: String| FieldError {
        path: path.into(),
        kind: ErrorKind::Invalid {
            value: "(as written)".into(),
            detail,
        },
    };
    let value: Value = match serde_json::from_str(json) {
        Ok(value) => value,
        Err(error) => return invalid("<object>", error.to_string()),
    };
    if let Err(error) = raw_bounds_as(kind, &value) {
        return error;
    }
    let parsed = match kind {
        OwnedKind::StormService => parse::<StormService>(&value).map(drop),
        OwnedKind::RoleSet => parse::<RoleSet>(&value).map(drop),
        OwnedKind::PodSet => parse::<PodSet>(&value).map(drop),
    };
    // The typed object parsing where its view did not is not expected (a view reads no
    // field more strictly than its type does); reported rather than assumed away.
    parsed
        .err()
        .unwrap_or_else(|| invalid("<object>", "could not be read".into()))
}

/// [`raw_bounds`] of an object's JSON text (`Ok` for text that is not JSON: its parse
/// error is reported instead).
fn bounds_of_raw(kind: OwnedKind, json: &str) -> Result<(), FieldError> {
    serde_json::from_str::<Value>(json).map_or(Ok(()), |value| raw_bounds_as(kind, &value))
}

/// An object parsed as a view: its metadata, raw spec and status, and the spec's view.
pub struct View<'a> {
    /// The object's metadata, raw spec and status.
    pub object: ObjectView<'a>,
    /// The spec, read.
    pub spec: Spec<'a>,
}

/// The spec of a [`View`]. Unboxed although a StormService's is the larger: one lives per
/// review, on the stack, and a box would cost every `kubectl apply` an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Spec<'a> {
    /// A StormService's.
    StormService(StormServiceSpecView<'a>),
    /// A RoleSet's.
    RoleSet(RoleSetSpecView<'a>),
}

impl<'a> View<'a> {
    /// The view of `json` as `kind` (a StormService or a RoleSet), read in one pass, without
    /// the spec's JSON (what a create needs); `None` when it does not parse (or is a PodSet).
    pub fn parse_once(kind: OwnedKind, json: &'a str) -> Option<Self> {
        match kind {
            OwnedKind::StormService => Self::of_stormservice(serde_json::from_str(json).ok()?),
            OwnedKind::RoleSet => Self::of_roleset(serde_json::from_str(json).ok()?),
            OwnedKind::PodSet => None,
        }
    }

    /// The view of a StormService read in one pass; `None` without a spec.
    pub fn of_stormservice(object: StormServiceView<'a>) -> Option<Self> {
        Some(Self::without_json(
            object.metadata,
            Spec::StormService(object.spec?),
        ))
    }

    /// The view of a RoleSet read in one pass; `None` without a spec.
    pub fn of_roleset(object: RoleSetView<'a>) -> Option<Self> {
        Some(Self::without_json(
            object.metadata,
            Spec::RoleSet(object.spec?),
        ))
    }

    fn without_json(metadata: MetaView<'a>, spec: Spec<'a>) -> Self {
        let object = ObjectView {
            metadata,
            spec: None,
            status: None,
        };
        Self { object, spec }
    }

    /// The view of `json` as `kind` with the spec's and status's JSON kept, for comparing
    /// specs on an update (two passes over the spec); `None` when it does not parse.
    pub fn parse(kind: OwnedKind, json: &'a str) -> Option<Self> {
        Self::of_object(kind, serde_json::from_str(json).ok()?)
    }

    /// The view of an object whose spec is still JSON, as `kind` ([`View::parse`]).
    pub fn of_object(kind: OwnedKind, object: ObjectView<'a>) -> Option<Self> {
        let spec = object.spec?.get();
        let spec = match kind {
            OwnedKind::StormService => Spec::StormService(serde_json::from_str(spec).ok()?),
            OwnedKind::RoleSet => Spec::RoleSet(serde_json::from_str(spec).ok()?),
            OwnedKind::PodSet => return None,
        };
        Some(Self { object, spec })
    }

    /// The first list bound the object exceeds.
    pub fn bounds(&self) -> Result<(), FieldError> {
        match &self.spec {
            Spec::StormService(spec) => view_bounds(
                "spec.template.spec",
                spec.update_strategy
                    .as_ref()
                    .and_then(|s| s.canary.as_ref())
                    .and_then(|c| c.steps.as_ref())
                    .map_or(0, Vec::len),
                spec.template.spec.as_ref(),
            ),
            Spec::RoleSet(spec) => view_bounds("spec", 0, Some(spec)),
        }
    }

    /// The gang scheduler each `schedulingStrategy` of the object names, with the path of
    /// its field (`….schedulingStrategy.volcanoSchedulingStrategy`).
    pub fn gang_schedulers(&self) -> Vec<(String, Scheduler)> {
        let (path, spec) = match &self.spec {
            Spec::StormService(spec) => ("spec.template.spec", spec.template.spec.as_ref()),
            Spec::RoleSet(spec) => ("spec", Some(spec)),
        };
        let Some(spec) = spec else {
            return Vec::new();
        };
        // Paths are formatted only for a strategy that names a scheduler: an ordinary object
        // costs no allocation here.
        let roles = spec.roles.as_deref().unwrap_or_default();
        let at_roleset = spec
            .scheduling_strategy
            .as_ref()
            .and_then(SchedulingView::scheduler)
            .map(|s| {
                (
                    format!("{path}.schedulingStrategy.{}", s.strategy_field()),
                    s,
                )
            });
        let at_roles = roles.iter().enumerate().filter_map(|(i, role)| {
            let s = role.scheduling_strategy.as_ref()?.scheduler()?;
            let field = s.strategy_field();
            Some((format!("{path}.roles[{i}].schedulingStrategy.{field}"), s))
        });
        at_roleset.into_iter().chain(at_roles).collect()
    }

    /// Each analysis metric with its field path (none for a StormService without analysis,
    /// and for a RoleSet).
    fn analysis_metrics(&self) -> Vec<(String, &AnalysisMetric)> {
        let Spec::StormService(spec) = &self.spec else {
            return Vec::new();
        };
        let Some(canary) = spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.canary.as_ref())
        else {
            return Vec::new();
        };
        let root = "spec.updateStrategy.canary";
        let steps = canary.steps.iter().flatten().enumerate();
        // Paths are formatted only for an analysis: an ordinary canary allocates nothing.
        let analyses = steps
            .filter_map(|(i, step)| {
                let analysis = step.analysis.as_deref()?;
                Some((format!("{root}.steps[{i}].analysis"), analysis))
            })
            .chain(
                canary
                    .analysis
                    .as_deref()
                    .map(|a| (format!("{root}.analysis"), a)),
            );
        analyses
            .flat_map(|(path, analysis)| {
                analysis
                    .metrics
                    .iter()
                    .enumerate()
                    .map(move |(i, metric)| (format!("{path}.metrics[{i}]"), metric))
            })
            .collect()
    }

    /// Each role's drain query with its field path and role name.
    fn drain_queries(&self) -> Vec<(String, &str, &DrainQuery)> {
        let (path, spec) = match &self.spec {
            Spec::StormService(spec) => ("spec.template.spec", spec.template.spec.as_ref()),
            Spec::RoleSet(spec) => ("spec", Some(spec)),
        };
        let roles = spec.and_then(|s| s.roles.as_deref()).unwrap_or_default();
        roles
            .iter()
            .enumerate()
            .filter_map(|(i, role)| {
                let query = role.drain.as_ref()?.query.as_ref()?;
                Some((format!("{path}.roles[{i}].drain.query"), &*role.name, query))
            })
            .collect()
    }

    /// Rule 12, where the operator's configuration is known (the webhook, `squall lint
    /// --analysis-config`): each metric and drain query must name a configured endpoint, and
    /// its query must be one that endpoint's tenancy can scope to the object's namespace.
    pub fn endpoint_errors(&self, endpoints: &[ConfiguredEndpoint]) -> Vec<FieldError> {
        // Listed only in an error: a valid object allocates nothing here.
        let configured = || {
            if endpoints.is_empty() {
                "none".to_string()
            } else {
                let names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
                names.join(", ")
            }
        };
        let missing = |path: String, named: &str| FieldError {
            path,
            kind: ErrorKind::Invalid {
                value: format!("{named:?}"),
                detail: format!(
                    "no such Prometheus endpoint is configured (configured: {}; \
                     the operator's --analysis-config names them)",
                    configured()
                ),
            },
        };
        let metadata = &self.object.metadata;
        let namespace = metadata.namespace.as_deref().unwrap_or("namespace");
        let name = metadata.name.as_deref().unwrap_or("name");
        let mut errors = Vec::new();
        for (path, metric) in self.analysis_metrics() {
            let named = metric.endpoint();
            let Some(endpoint) = endpoints.iter().find(|e| e.name == named) else {
                errors.push(missing(
                    format!("{path}.provider.prometheus.endpoint"),
                    named,
                ));
                continue;
            };
            let Some(prometheus) = &metric.provider.prometheus else {
                continue;
            };
            // Revision names are the controller's; any name checks the query's shape.
            let values = QueryValues {
                canary_revision: "revision",
                stable_revision: "revision",
                role: metric.role.as_deref(),
                namespace,
                name,
            };
            // A query whose placeholders are wrong is reported by its own rule.
            let Ok(query) = render_query(&prometheus.query, Some(&values), metric.role.is_some())
            else {
                continue;
            };
            if let Err(detail) = endpoint.tenancy.apply(&query, namespace) {
                errors.push(FieldError {
                    path: format!("{path}.provider.prometheus.query"),
                    kind: ErrorKind::Invalid {
                        value: "(as written)".into(),
                        detail: format!("endpoint {named:?} (tenancy: namespace): {detail}"),
                    },
                });
            }
        }
        for (path, role, drain) in self.drain_queries() {
            let named = drain.endpoint();
            let Some(endpoint) = endpoints.iter().find(|e| e.name == named) else {
                errors.push(missing(format!("{path}.endpoint"), named));
                continue;
            };
            let values = DrainValues {
                pod: "pod",
                namespace,
                role,
            };
            let Ok(query) = render_drain_query(&drain.query, Some(&values)) else {
                continue;
            };
            if let Err(detail) = endpoint.tenancy.apply(&query, namespace) {
                errors.push(FieldError {
                    path: format!("{path}.query"),
                    kind: ErrorKind::Invalid {
                        value: "(as written)".into(),
                        detail: format!("endpoint {named:?} (tenancy: namespace): {detail}"),
                    },
                });
            }
        }
        errors
    }

    /// Whether the spec is the same as `other`'s: byte for byte, or as JSON values.
    fn same_spec(&self, other: &View<'_>) -> bool {
        let (Some(a), Some(b)) = (self.object.spec, other.object.spec) else {
            return false;
        };
        a.get() == b.get()
            || serde_json::from_str::<Value>(a.get()).ok()
                == serde_json::from_str::<Value>(b.get()).ok()
    }
}

/// Validates a StormService; `old` is the stored object on UPDATE (ratcheting, immutable
/// selector, canary-edit warning). For the controllers: the object is read through its JSON
/// by [`validate_json`], the one implementation of the rules.
pub fn validate_stormservice(new: &StormService, old: Option<&StormService>) -> Report {
    typed_entry(OwnedKind::StormService, new, old)
}

/// Validates a RoleSet; `old` is the stored object on UPDATE (ratcheting).
pub fn validate_roleset(new: &RoleSet, old: Option<&RoleSet>) -> Report {
    typed_entry(OwnedKind::RoleSet, new, old)
}

fn typed_entry<T: serde::Serialize>(kind: OwnedKind, new: &T, old: Option<&T>) -> Report {
    let json = |object: &T| serde_json::to_string(object).expect("an API object serializes");
    let new = json(new);
    let old = old.map(json);
    validate_json(kind, &new, old.as_deref())
}

fn validate_stormservice_view(
    view: &View<'_>,
    spec: &StormServiceSpecView<'_>,
    old: Option<(&View<'_>, &StormServiceSpecView<'_>)>,
) -> Report {
    let mut report = check_stormservice(&view.object.metadata, spec);
    let Some((old_view, old_spec)) = old else {
        return report;
    };
    if is_exempt_update(&view.object.metadata, view.same_spec(old_view)) {
        return Report::default();
    }
    ratchet(
        &mut report,
        &check_stormservice(&old_view.object.metadata, old_spec),
    );
    if spec.selector != old_spec.selector {
        report.invalid(
            "spec.selector",
            selector_string(&spec.selector),
            "field is immutable",
        );
    }
    let canary_running = old_view
        .object
        .status
        .and_then(|status| serde_json::from_str::<StatusView>(status.get()).ok())
        .and_then(|s| s.canary_status)
        .and_then(|c| c.phase)
        .is_some_and(|p| {
            matches!(
                p,
                CanaryPhase::Initializing | CanaryPhase::Progressing | CanaryPhase::Paused
            )
        });
    if canary_running && spec.canary_steps() != old_spec.canary_steps() {
        report.warn(
            "editing canary steps while a canary is in progress restarts it at step 0".into(),
        );
    }
    report
}

fn validate_roleset_view(
    view: &View<'_>,
    spec: &RoleSetSpecView<'_>,
    old: Option<(&View<'_>, &RoleSetSpecView<'_>)>,
) -> Report {
    let mut report = Report::default();
    check_roleset_spec(spec, FieldPath::Root("spec"), true, &mut report);
    let Some((old_view, old_spec)) = old else {
        return report;
    };
    if is_exempt_update(&view.object.metadata, view.same_spec(old_view)) {
        return Report::default();
    }
    let mut old_report = Report::default();
    check_roleset_spec(old_spec, FieldPath::Root("spec"), true, &mut old_report);
    ratchet(&mut report, &old_report);
    report
}

/// Validates a PodSet (written by the RoleSet controller; checked by `squall lint`).
pub fn validate_podset(new: &PodSet, _old: Option<&PodSet>) -> Report {
    let mut report = Report::default();
    if !(2..=100).contains(&new.spec.pod_group_size) {
        report.invalid(
            "spec.podGroupSize",
            new.spec.pod_group_size,
            "must be between 2 and 100",
        );
    }
    report
}

/// Updates that are always allowed (docs/admission.md#rules), so objects admitted earlier can be
/// finalized and deleted: the object is terminating, or only metadata or status changed.
fn is_exempt_update(new_meta: &MetaView<'_>, spec_unchanged: bool) -> bool {
    new_meta.deletion_timestamp.is_some() || spec_unchanged
}

/// Ratcheting (docs/admission.md#rules): an update may keep violations the stored object already
/// had; only new ones deny it.
fn ratchet(report: &mut Report, old: &Report) {
    let existing: HashSet<&FieldError> = old.errors.iter().collect();
    report.errors.retain(|e| !existing.contains(e));
}

fn check_stormservice(meta: &MetaView<'_>, spec: &StormServiceSpecView<'_>) -> Report {
    let mut report = Report::default();
    check_stormservice_name(meta, &mut report);

    // Rule 2: a non-empty selector that selects the template's labels.
    let selector = &spec.selector;
    let selector_empty = selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty);
    if selector_empty {
        report.required(
            "spec.selector",
            "must select the RoleSets' labels; an empty selector would match every RoleSet",
        );
    } else {
        let empty = BTreeMap::new();
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or(&empty);
        match selector_matches(selector, labels) {
            Ok(true) => {}
            Ok(false) => report.invalid(
                "spec.template.metadata.labels",
                format!("{labels:?}"),
                &format!(
                    "`selector` does not match template `labels` (selector: {})",
                    selector_string(selector)
                ),
            ),
            Err((path, detail)) => {
                report.invalid(format!("spec.selector.{path}"), "(as written)", &detail)
            }
        }
    }

    // Rule 7: replicas.
    let root = FieldPath::Root("spec");
    check_replicas(spec.replicas, root.field("replicas"), &mut report);
    check_min_ready_seconds(
        spec.min_ready_seconds,
        root.field("minReadySeconds"),
        &mut report,
    );

    // Rule 8: StormService budgets.
    let strategy = spec.update_strategy.as_ref();
    check_budgets(
        strategy.and_then(|s| s.max_surge.as_ref()),
        strategy.and_then(|s| s.max_unavailable.as_ref()),
        spec.replicas_or_default(),
        root.field("updateStrategy"),
        &mut report,
    );

    // Rule 10: canary steps; rule 12: canary analysis.
    let canary_spec = strategy.and_then(|s| s.canary.as_ref());
    // Listed only for a canary with analyses: an ordinary review allocates nothing here.
    let has_analysis = canary_spec.is_some_and(|c| {
        c.analysis.is_some() || c.steps.iter().flatten().any(|s| s.analysis.is_some())
    });
    let role_names: Vec<&str> = spec
        .template
        .spec
        .iter()
        .filter(|_| has_analysis)
        .flat_map(|s| s.roles.iter().flatten())
        .map(|r| &*r.name.0)
        .collect();
    if let Some(steps) = canary_spec.and_then(|c| c.steps.as_ref()) {
        check_canary_steps(steps, &role_names, &mut report);
    }
    if let Some(delay) = canary_spec.and_then(|c| c.abort_scale_down_delay_seconds) {
        let path = root.field("updateStrategy.canary.abortScaleDownDelaySeconds");
        if !(0..=MAX_ABORT_SCALE_DOWN_DELAY_SECONDS).contains(&delay) {
            report.invalid(
                path,
                delay,
                &format!("must be between 0 and {MAX_ABORT_SCALE_DOWN_DELAY_SECONDS}"),
            );
        }
    }
    if let Some(analysis) = canary_spec.and_then(|c| c.analysis.as_ref()) {
        let path = FieldPath::Root("spec.updateStrategy.canary.analysis");
        check_analysis(analysis, path, true, &role_names, &mut report);
    }

    // Rule 3 (and the role rules through the template).
    match &spec.template.spec {
        None => report.required(
            "spec.template.spec",
            "a StormService needs a RoleSet template with at least one role",
        ),
        Some(rs_spec) => {
            let template = root.field("template");
            check_roleset_spec(rs_spec, template.field("spec"), false, &mut report);
        }
    }

    // Rule 11: warnings.
    let canary = spec.canary_steps().is_some();
    // `InPlaceUpdate` updates RoleSets where they are: `maxUnavailable` paces how many at a
    // time, and nothing is ever added for `maxSurge` to bound (a canary aside).
    if spec.update_strategy_type() == StormServiceUpdateStrategyType::InPlaceUpdate
        && !canary
        && strategy.is_some_and(|s| s.max_surge.is_some())
    {
        report.warn(
            "spec.updateStrategy.maxSurge has no effect with InPlaceUpdate unless a canary is \
             configured: RoleSets are updated in place, none is added (maxUnavailable sets how \
             many are updated at a time)"
                .into(),
        );
    }
    if spec.stateful.is_some() {
        report.warn(
            "spec.stateful is accepted for AIBrix compatibility and ignored; set `stateful` on roles"
                .into(),
        );
    }
    if spec.disruption_tolerance.is_some() {
        report.warn(
            "spec.disruptionTolerance is accepted for AIBrix compatibility and ignored".into(),
        );
    }
    report
}

/// Rule 1: the name becomes the headless Service's name, so it is a DNS-1035 label.
fn check_stormservice_name(meta: &MetaView<'_>, report: &mut Report) {
    if let Some(name) = meta.name.as_deref().filter(|n| !n.is_empty()) {
        if let Err(detail) = dns1035_label(name, 63) {
            report.invalid("metadata.name", quoted(name), &detail);
        }
    } else if let Some(prefix) = meta.generate_name.as_deref().filter(|n| !n.is_empty()) {
        // The API server appends 5 characters; the prefix may end in '-'.
        let trimmed = prefix.trim_end_matches('-');
        if prefix.len() > 58 || (!trimmed.is_empty() && dns1035_label(trimmed, 58).is_err()) {
            report.invalid(
                "metadata.generateName",
                quoted(prefix),
                "must be a DNS-1035 label prefix of at most 58 characters",
            );
        }
    }
}

/// Rules 5–9 for a RoleSet spec, at `path` (`spec` or `spec.template.spec`); its list
/// bounds were checked first ([`View::bounds`]).
fn check_roleset_spec(
    spec: &RoleSetSpecView<'_>,
    path: FieldPath<'_>,
    rollout_allowed: bool,
    report: &mut Report,
) {
    let roles = spec.roles.as_deref().unwrap_or_default();
    let roles_path = path.field("roles");
    if !rollout_allowed && roles.is_empty() {
        report.required(roles_path, "at least one role is required");
    }
    if !rollout_allowed && spec.serving_gate.is_some() {
        report.forbidden(
            path.field("servingGate"),
            "the serving gate is written by the StormService controller on RoleSets; set \
             spec.updateStrategy.canary.abortScaleDownDelaySeconds",
        );
    }
    match spec.min_ready_seconds {
        Some(_) if !rollout_allowed => report.forbidden(
            path.field("minReadySeconds"),
            "set spec.minReadySeconds on the StormService: in the template it would be part of \
             every revision, and a change would roll every pod",
        ),
        seconds => check_min_ready_seconds(seconds, path.field("minReadySeconds"), report),
    }
    if let Some(strategy) = &spec.scheduling_strategy {
        check_scheduling_strategy(
            strategy.schedulers(),
            path.field("schedulingStrategy"),
            report,
        );
    }
    // Up to MAX_ROLES names: a linear scan costs less than a set.
    for (i, role) in roles.iter().enumerate() {
        let role_path = roles_path.index(i);
        check_role(role, role_path, report);
        if !role.name.is_empty() && roles[..i].iter().any(|earlier| earlier.name == role.name) {
            report.errors.push(FieldError {
                path: role_path.field("name").to_string(),
                kind: ErrorKind::Duplicate(quoted(&role.name)),
            });
        }
        if !rollout_allowed && role.rollout.is_some() {
            report.forbidden(
                role_path.field("rollout"),
                "the rollout block is written by the StormService controller on RoleSets; use spec.updateStrategy.canary",
            );
        }
        if spec.scheduling_strategy.is_some() && role.scheduling_strategy.is_some() {
            report.forbidden(
                role_path.field("schedulingStrategy"),
                &format!("must not be set when {path}.schedulingStrategy is set"),
            );
        }
    }

    if let Some(groups) = &spec.pairing {
        check_pairing(groups, roles, path.field("pairing"), report);
    }

    let strategy = spec.update_strategy.unwrap_or_default();
    if matches!(
        strategy,
        RoleSetUpdateStrategy::Parallel | RoleSetUpdateStrategy::Interleave
    ) && roles.iter().any(|r| r.upgrade_order_or_default() != 0)
    {
        report.warn(format!(
            "{path}.roles[].upgradeOrder has no effect with {path}.updateStrategy {strategy:?}; only Sequential rollouts follow it"
        ));
    }
    let explicit = roles.iter().filter(|r| r.upgrade_order.is_some()).count();
    if explicit > 0 && explicit < roles.len() {
        report.warn(mixed_upgrade_order_warning(&path.to_string()));
    }
}

/// Rule 13: a pairing group names at least two distinct roles of the RoleSet, a role is in
/// at most one group, and a `protocol` is a label value. Bounded like the roles: at most
/// [`MAX_PAIRING_GROUPS`] groups of at most [`MAX_ROLES`] roles are read.
fn check_pairing(
    groups: &[PairingView<'_>],
    roles: &[RoleView<'_>],
    path: FieldPath<'_>,
    report: &mut Report,
) {
    let too_many = |path: String, actual: usize, max: usize| FieldError {
        path,
        kind: ErrorKind::TooMany { actual, max },
    };
    if groups.len() > MAX_PAIRING_GROUPS {
        report
            .errors
            .push(too_many(path.to_string(), groups.len(), MAX_PAIRING_GROUPS));
        return;
    }
    for (g, group) in groups.iter().enumerate() {
        let group_path = path.index(g);
        let roles_path = group_path.field("roles");
        if group.roles.len() > MAX_ROLES {
            report.errors.push(too_many(
                roles_path.to_string(),
                group.roles.len(),
                MAX_ROLES,
            ));
            continue;
        }
        if group.roles.len() < 2 {
            report.invalid(
                roles_path,
                format!("{:?}", group.roles),
                "a pairing group names at least two roles",
            );
        }
        for (i, name) in group.roles.iter().enumerate() {
            let role_path = roles_path.index(i);
            if !roles.iter().any(|role| role.name == *name) {
                report.invalid(role_path, quoted(name), "no role has this name");
            } else if group.roles[..i].contains(name) {
                report.errors.push(FieldError {
                    path: role_path.to_string(),
                    kind: ErrorKind::Duplicate(quoted(name)),
                });
            } else if groups[..g]
                .iter()
                .any(|earlier| earlier.roles.contains(name))
            {
                report.invalid(
                    role_path,
                    quoted(name),
                    "the role is in an earlier pairing group; a role is in at most one",
                );
            }
        }
        if let Some(protocol) = &group.protocol
            && let Err(detail) = label_value(protocol)
        {
            report.invalid(group_path.field("protocol"), quoted(protocol), &detail);
        }
    }
}

/// Kubernetes' label-value syntax: at most 63 characters, alphanumerics with `-`, `_` and
/// `.` inside; empty allowed.
fn label_value(s: &str) -> Result<(), String> {
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let bytes = s.as_bytes();
    let ok = s.len() <= MAX_LABEL_VALUE_LEN
        && bytes.iter().all(|&b| inner(b))
        && bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a label value: at most {MAX_LABEL_VALUE_LEN} characters, alphanumeric with '-', '_' or '.' inside"
        ))
    }
}

/// The warning for a role list that mixes explicit and absent `upgradeOrder`
/// (docs/admission.md#defaults); the mutating webhook returns it too, since defaulting fills the
/// absent ones.
pub fn mixed_upgrade_order_warning(roleset_spec_path: &str) -> String {
    format!(
        "{roleset_spec_path}.roles: roles without upgradeOrder upgrade first; AIBrix >= v0.5 upgrades them last"
    )
}

/// Rules 6–9 for one role.
fn check_role(role: &RoleView<'_>, path: FieldPath<'_>, report: &mut Report) {
    if role.name.is_empty() {
        report.required(path.field("name"), "every role needs a name");
    } else if let Err(detail) = dns1123_label(&role.name, MAX_ROLE_NAME_LEN) {
        report.invalid(path.field("name"), quoted(&role.name), &detail);
    }
    check_replicas(role.replicas, path.field("replicas"), report);
    if let Some(order) = role.upgrade_order.filter(|o| *o < 0) {
        report.invalid(
            path.field("upgradeOrder"),
            order,
            "must be greater than or equal to 0",
        );
    }
    if let Some(size) = role.pod_group_size.filter(|s| !(1..=100).contains(s)) {
        report.invalid(
            path.field("podGroupSize"),
            size,
            "must be between 1 and 100",
        );
    }
    let strategy = role.update_strategy.as_ref();
    check_budgets(
        strategy.and_then(|s| s.max_surge.as_ref()),
        strategy.and_then(|s| s.max_unavailable.as_ref()),
        role.replicas_or_default(),
        path.field("updateStrategy"),
        report,
    );
    if let Some(strategy) = &role.scheduling_strategy {
        check_scheduling_strategy(
            strategy.schedulers(),
            path.field("schedulingStrategy"),
            report,
        );
    }
    if role.update_strategy_type() == RoleUpdateStrategyType::InPlaceIfPossible
        && role.pod_group_size_or_default() > 1
    {
        report.warn(format!(
            "{path}.updateStrategy.type InPlaceIfPossible with podGroupSize > 1 recreates the role's PodSets"
        ));
    }
    if role.disruption_tolerance.is_some() {
        report.warn(format!(
            "{path}.disruptionTolerance is accepted for AIBrix compatibility and ignored"
        ));
    }
    if let Some(drain) = &role.drain {
        check_drain(drain, path.field("drain"), report);
    }
}

/// Rule 14 (docs/admission.md): a drain's timeout is 1 s to 1 h; its query reads one
/// number through a named endpoint, with the drain placeholders only, at most every 5 m.
fn check_drain(drain: &Drain, path: FieldPath<'_>, report: &mut Report) {
    match &drain.timeout {
        None => report.required(
            path.field("timeout"),
            "a drain needs a timeout: the longest a pod waits out of traffic",
        ),
        Some(timeout) => check_seconds(timeout, MAX_DRAIN_TIMEOUT, path.field("timeout"), report),
    }
    let Some(query) = &drain.query else { return };
    let query_path = path.field("query");
    let text = query_path.field("query");
    if query.query.trim().is_empty() {
        report.required(text, "a drain query needs a query");
    } else if query.query.len() > MAX_QUERY_BYTES {
        report.invalid(
            text,
            format!("{} bytes", query.query.len()),
            &format!("must be at most {MAX_QUERY_BYTES} bytes"),
        );
    } else if let Err(detail) = render_drain_query(&query.query, None) {
        report.invalid(text, "(as written)", &detail);
    }
    if query.endpoint.as_deref() == Some("") {
        report.invalid(
            query_path.field("endpoint"),
            "\"\"",
            "names a configured endpoint; omit it for `default`",
        );
    }
    if let Some(interval) = &query.interval {
        check_seconds(
            interval,
            MAX_DRAIN_INTERVAL,
            query_path.field("interval"),
            report,
        );
    }
}

/// A duration of 1 s to `max` seconds.
fn check_seconds(
    value: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    max: u64,
    path: FieldPath<'_>,
    report: &mut Report,
) {
    match pause_seconds(Some(&IntOrStr::from(value))) {
        Err(detail) => report.invalid(path, int_or_string(&value.into()), &detail),
        Ok(Some(seconds)) if !(1..=max).contains(&seconds) => report.invalid(
            path,
            int_or_string(&value.into()),
            &format!("must be between 1s and {max}s"),
        ),
        Ok(_) => {}
    }
}

/// Rule 7 and the replica bound: `0 ..= MAX_REPLICAS`.
fn check_replicas(replicas: Option<i32>, path: FieldPath<'_>, report: &mut Report) {
    match replicas {
        Some(r) if r < 0 => report.invalid(path, r, "must be greater than or equal to 0"),
        Some(r) if r > MAX_REPLICAS => report.invalid(
            path,
            r,
            &format!("must be less than or equal to {MAX_REPLICAS}"),
        ),
        _ => {}
    }
}

/// `minReadySeconds`: `0 ..= MAX_MIN_READY_SECONDS`.
fn check_min_ready_seconds(seconds: Option<i32>, path: FieldPath<'_>, report: &mut Report) {
    match seconds {
        Some(s) if s < 0 => report.invalid(path, s, "must be greater than or equal to 0"),
        Some(s) if s > MAX_MIN_READY_SECONDS => report.invalid(
            path,
            s,
            &format!("must be less than or equal to {MAX_MIN_READY_SECONDS}"),
        ),
        _ => {}
    }
}

/// Rule 9: one scheduler per strategy.
fn check_scheduling_strategy(schedulers: Vec<&str>, path: FieldPath<'_>, report: &mut Report) {
    if schedulers.len() > 1 {
        report.invalid(
            path,
            schedulers.join(", "),
            "must name exactly one scheduler (godelSchedulingStrategy, coschedulingSchedulingStrategy or volcanoSchedulingStrategy)",
        );
    }
}

/// Rule 8: well-formed budgets, not both literally 0; a warning when percentages resolve to
/// 0 at the current replica count (the fence-post rule then allows 1 unavailable).
fn check_budgets(
    max_surge: Option<&IntOrStr<'_>>,
    max_unavailable: Option<&IntOrStr<'_>>,
    replicas: i32,
    path: FieldPath<'_>,
    report: &mut Report,
) {
    let mut parse =
        |field: &'static str, value: Option<&IntOrStr<'_>>| match value.map(Budget::parse_view) {
            Some(Ok(budget)) => Some(budget),
            Some(Err(detail)) => {
                report.invalid(
                    path.field(field),
                    int_or_string(value.expect("parsed")),
                    &detail,
                );
                None
            }
            None => None,
        };
    let surge = parse("maxSurge", max_surge);
    let unavailable = parse("maxUnavailable", max_unavailable);
    match (surge, unavailable) {
        (Some(s), Some(u)) if s.is_literally_zero() && u.is_literally_zero() => {
            report.invalid(
                path.field("maxUnavailable"),
                int_or_string(max_unavailable.expect("parsed")),
                "may not be 0 when maxSurge is 0",
            );
        }
        (s, u)
            if matches!(s, Some(Budget::Percent(_))) || matches!(u, Some(Budget::Percent(_))) =>
        {
            let resolved = resolve_fenceposts(s, u, u32::try_from(replicas).unwrap_or(0));
            if resolved.raised_to_one {
                report.warn(format!(
                    "{path}: maxSurge and maxUnavailable both resolve to 0 at {replicas} replicas; 1 replica may be unavailable during updates"
                ));
            }
        }
        _ => {}
    }
}

/// Rule 10: canary steps.
fn check_canary_steps(steps: &[StepView<'_>], roles: &[&str], report: &mut Report) {
    let path = "spec.updateStrategy.canary.steps";
    let user_written = match steps.last() {
        Some(last)
            if last.set_weight == Some(100) && last.pause.is_none() && last.analysis.is_none() =>
        {
            steps.len() - 1
        }
        _ => steps.len(),
    };
    if user_written > MAX_CANARY_STEPS {
        report.invalid(
            path,
            format!("{} steps", steps.len()),
            &format!(
                "must have at most {MAX_CANARY_STEPS} steps (not counting a final setWeight: 100)"
            ),
        );
        return;
    }
    let steps_path = FieldPath::Root(path);
    let mut previous_weight: Option<(usize, i32)> = None;
    for (i, step) in steps.iter().enumerate() {
        let step_path = steps_path.index(i);
        let kinds = [
            step.set_weight.map(|_| "setWeight"),
            step.pause.as_ref().map(|_| "pause"),
            step.analysis.as_ref().map(|_| "analysis"),
        ];
        match kinds.iter().flatten().count() {
            1 => {}
            0 => report.required(
                step_path,
                "a step must have exactly one of setWeight, pause and analysis",
            ),
            _ => report.invalid(
                step_path,
                kinds
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" and "),
                "a step must have exactly one of setWeight, pause and analysis",
            ),
        }
        if let Some(analysis) = &step.analysis {
            check_analysis(analysis, step_path.field("analysis"), false, roles, report);
        }
        if let Some(weight) = step.set_weight {
            if !(0..=100).contains(&weight) {
                report.invalid(
                    step_path.field("setWeight"),
                    weight,
                    "must be between 0 and 100",
                );
            } else if let Some((j, before)) = previous_weight.filter(|(_, w)| weight < *w) {
                report.invalid(
                    step_path.field("setWeight"),
                    weight,
                    &format!("weights must not decrease (steps[{j}].setWeight is {before})"),
                );
            } else {
                previous_weight = Some((i, weight));
            }
        }
        if let Some(pause) = &step.pause
            && let Err(detail) = pause.duration_seconds()
        {
            report.invalid(
                step_path.field("pause").field("duration"),
                int_or_string(pause.duration.as_ref().expect("a duration failed to parse")),
                &detail,
            );
        }
    }
}

/// Rule 12: a canary analysis (docs/admission.md#rules). `background`: the
/// analysis of the whole canary, which repeats every `interval` unless `count` stops it.
fn check_analysis(
    analysis: &Analysis,
    path: FieldPath<'_>,
    background: bool,
    roles: &[&str],
    report: &mut Report,
) {
    let metrics_path = path.field("metrics");
    if analysis.metrics.is_empty() {
        report.required(metrics_path, "an analysis needs at least one metric");
        return;
    }
    if analysis.metrics.len() > MAX_ANALYSIS_METRICS {
        report.invalid(
            metrics_path,
            format!("{} metrics", analysis.metrics.len()),
            &format!("must have at most {MAX_ANALYSIS_METRICS} metrics"),
        );
        return;
    }
    for (i, metric) in analysis.metrics.iter().enumerate() {
        let at = metrics_path.index(i);
        if metric.name.is_empty() {
            report.required(at.field("name"), "a metric needs a name");
        } else if metric.name.len() > MAX_METRIC_NAME_BYTES {
            report.invalid(
                at.field("name"),
                &metric.name,
                &format!("must be at most {MAX_METRIC_NAME_BYTES} bytes"),
            );
        } else if let Some(j) = analysis.metrics[..i]
            .iter()
            .position(|m| m.name == metric.name)
        {
            report.invalid(
                at.field("name"),
                &metric.name,
                &format!("metrics[{j}] has the same name; names must be unique"),
            );
        }
        if let Some(role) = &metric.role
            && !roles.contains(&role.as_str())
        {
            report.invalid(
                at.field("role"),
                role,
                &format!("must be one of the template's roles ({})", roles.join(", ")),
            );
        }
        match &metric.provider.prometheus {
            None => report.required(
                at.field("provider").field("prometheus"),
                "a metric needs a provider (prometheus)",
            ),
            Some(prometheus) => {
                let provider = at.field("provider");
                let prometheus_path = provider.field("prometheus");
                let query_path = prometheus_path.field("query");
                if prometheus.query.trim().is_empty() {
                    report.required(query_path, "a Prometheus metric needs a query");
                } else if prometheus.query.len() > MAX_QUERY_BYTES {
                    report.invalid(
                        query_path,
                        format!("{} bytes", prometheus.query.len()),
                        &format!("must be at most {MAX_QUERY_BYTES} bytes"),
                    );
                } else if let Err(detail) =
                    render_query(&prometheus.query, None, metric.role.is_some())
                {
                    report.invalid(query_path, "(as written)", &detail);
                }
                if prometheus.endpoint.as_deref() == Some("") {
                    report.invalid(
                        prometheus_path.field("endpoint"),
                        "\"\"",
                        "names a configured endpoint; omit it for `default`",
                    );
                }
            }
        }
        if metric.success_condition.is_none() && metric.failure_condition.is_none() {
            report.required(
                at,
                "a metric needs successCondition, failureCondition or both",
            );
        }
        for (field, condition) in [
            ("successCondition", &metric.success_condition),
            ("failureCondition", &metric.failure_condition),
        ] {
            if let Some(text) = condition
                && let Err(e) = Condition::parse(text)
            {
                report.invalid(at.field(field), text, &e.to_string());
            }
        }
        let count = metric.count;
        if let Some(count) = count.filter(|c| !(1..=MAX_ANALYSIS_COUNT).contains(c)) {
            report.invalid(
                at.field("count"),
                count,
                &format!("must be between 1 and {MAX_ANALYSIS_COUNT}"),
            );
        }
        for (field, limit) in [
            ("failureLimit", metric.failure_limit),
            ("inconclusiveLimit", metric.inconclusive_limit),
        ] {
            if let Some(limit) = limit.filter(|l| !(0..=MAX_ANALYSIS_COUNT).contains(l)) {
                report.invalid(
                    at.field(field),
                    limit,
                    &format!("must be between 0 and {MAX_ANALYSIS_COUNT}"),
                );
            }
        }
        for (field, value, min) in [
            ("interval", &metric.interval, MIN_ANALYSIS_INTERVAL),
            ("initialDelay", &metric.initial_delay, 0),
        ] {
            let Some(value) = value else { continue };
            match pause_seconds(Some(&IntOrStr::from(value))) {
                Err(detail) => {
                    report.invalid(at.field(field), int_or_string(&value.into()), &detail)
                }
                Ok(Some(seconds)) if !(min..=MAX_ANALYSIS_WAIT).contains(&seconds) => report
                    .invalid(
                        at.field(field),
                        int_or_string(&value.into()),
                        &format!("must be between {min}s and {MAX_ANALYSIS_WAIT}s"),
                    ),
                Ok(_) => {}
            }
        }
        let repeats = if background {
            count != Some(1)
        } else {
            count.is_some_and(|c| c > 1)
        };
        if repeats && metric.interval.is_none() {
            report.required(
                at.field("interval"),
                if background {
                    "a background analysis measures again every interval (unless count is 1)"
                } else {
                    "a metric with count above 1 measures again every interval"
                },
            );
        }
    }
}

/// A field path, written out only when a rule reports: nothing is formatted for a valid
/// object.
#[derive(Clone, Copy)]
enum FieldPath<'a> {
    /// A path given whole.
    Root(&'static str),
    /// A field of a path.
    Field(&'a FieldPath<'a>, &'static str),
    /// An item of a list.
    Index(&'a FieldPath<'a>, usize),
}

impl<'a> FieldPath<'a> {
    fn field(&'a self, name: &'static str) -> FieldPath<'a> {
        FieldPath::Field(self, name)
    }

    fn index(&'a self, i: usize) -> FieldPath<'a> {
        FieldPath::Index(self, i)
    }
}

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldPath::Root(path) => f.write_str(path),
            FieldPath::Field(parent, name) => write!(f, "{parent}.{name}"),
            FieldPath::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Evaluates a label selector; `Err((path, detail))` for a malformed requirement.
fn selector_matches(
    selector: &SelectorView<'_>,
    labels: &BTreeMap<Str<'_>, Str<'_>>,
) -> Result<bool, (String, String)> {
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let mut expressions_match = true;
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let values = req.values.as_deref().unwrap_or_default();
        let value = labels.get(&req.key);
        let matched = match &*req.operator {
            "In" | "NotIn" if values.is_empty() => {
                return Err((
                    format!("matchExpressions[{i}].values"),
                    "must be non-empty for operators In and NotIn".into(),
                ));
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err((
                    format!("matchExpressions[{i}].operator"),
                    format!(
                        "unsupported operator {other:?}: supported values are In, NotIn, Exists, DoesNotExist"
                    ),
                ));
            }
        };
        expressions_match &= matched;
    }
    Ok(labels_match && expressions_match)
}

fn selector_string(selector: &SelectorView<'_>) -> String {
    serde_json::to_string(selector).unwrap_or_else(|_| "?".into())
}

fn int_or_string(value: &IntOrStr<'_>) -> String {
    match value {
        IntOrStr::Int(n) => n.to_string(),
        IntOrStr::Str(s) => quoted(s),
    }
}

fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric.
fn dns1123_label(s: &str, max: usize) -> Result<(), String> {
    let ok = s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    ok.then_some(()).ok_or_else(|| {
        format!(
            "must be a DNS-1123 label of at most {max} characters: lowercase letters, digits and '-', starting and ending with a letter or digit"
        )
    })
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
fn dns1035_label(s: &str, max: usize) -> Result<(), String> {
    let ok = dns1123_label(s, max).is_ok() && s.starts_with(|c: char| c.is_ascii_lowercase());
    ok.then_some(()).ok_or_else(|| {
        format!(
            "must be a DNS-1035 label of at most {max} characters (it names the headless Service): lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
        )
    })
}
