//! The analysis machine (docs/rollouts.md#canary-analysis): which measurements are due, how a
//! measurement is judged, and what the measurements so far say. Pure: the controller asks
//! [`due`](super::due), takes those measurements from the provider, and hands them to the canary step
//! machine, which records them here ([`record`]) and acts on the [`AnalysisStatus`] phase.
//!
//! All timing lives in the status: a metric's first measurement is due `initialDelay` after
//! the analysis started, each next one `interval` after the last one taken. A restarted
//! operator reads the same status, so it neither repeats a measurement nor skips one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::analysis::{
    Analysis, AnalysisMetric, AnalysisPhase, AnalysisStatus, MEASUREMENTS_KEPT, Measurement,
    MeasurementPhase, MetricStatus,
};
use crate::api::bounded_status::{MEASUREMENT_MESSAGE_BYTES, STATUS_MESSAGE_CHARS, bounded_text};
use crate::api::condition::Condition;

/// Which analysis a measurement belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    /// The analysis of the canary step with this index.
    Step(usize),
    /// The background analysis of the whole canary.
    Background,
}

/// A measurement due now: the metric with this index in its analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Due {
    /// Whose metric.
    pub subject: Subject,
    /// Index in the analysis's `metrics`.
    pub metric: usize,
}

/// A measurement the controller took: the number the provider gave, or why there is none
/// (no data, the provider unreachable), which is inconclusive.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The measurement that was due.
    pub due: Due,
    /// The number, or why there is none.
    pub value: Result<f64, String>,
}

fn time(unix: i64) -> Time {
    Time(Timestamp::from_second(unix).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Measurements a metric takes: `count`, or, for the background analysis without one, as
/// many as the canary lasts.
fn count_limit(metric: &AnalysisMetric, subject: Subject) -> Option<i32> {
    match (subject, metric.count) {
        (Subject::Background, None) => None,
        _ => Some(metric.count_or_default()),
    }
}

/// A new analysis, started at `now`, every metric running.
pub fn start(analysis: &Analysis, subject: Subject, now: i64) -> AnalysisStatus {
    AnalysisStatus {
        step: match subject {
            Subject::Step(i) => Some(i as i32),
            Subject::Background => None,
        },
        phase: AnalysisPhase::Running,
        start_time: time(now),
        metrics: analysis
            .metrics
            .iter()
            .map(|m| MetricStatus {
                name: m.name.clone(),
                phase: AnalysisPhase::Running,
                measured: 0,
                successful: 0,
                failed: 0,
                inconclusive: 0,
                measurements: Vec::new(),
            })
            .collect(),
        message: None,
    }
}

/// When (Unix seconds) the next measurement of a running metric is due.
fn due_at(metric: &AnalysisMetric, status: &MetricStatus, started: i64) -> i64 {
    match status.measurements.last() {
        None => started + metric.initial_delay_seconds() as i64,
        Some(last) => last.time.0.as_second() + metric.interval_seconds() as i64,
    }
}

/// The metrics of `analysis` due at `now`, by index.
pub fn due_metrics(analysis: &Analysis, status: &AnalysisStatus, now: i64) -> Vec<usize> {
    if status.phase != AnalysisPhase::Running {
        return Vec::new();
    }
    let started = status.start_time.0.as_second();
    analysis
        .metrics
        .iter()
        .zip(&status.metrics)
        .enumerate()
        .filter(|(_, (m, s))| s.phase == AnalysisPhase::Running && due_at(m, s, started) <= now)
        .map(|(i, _)| i)
        .collect()
}

/// Seconds until the next measurement is due (at least 1), while the analysis runs.
pub fn next_due_in(analysis: &Analysis, status: &AnalysisStatus, now: i64) -> Option<u64> {
    if status.phase != AnalysisPhase::Running {
        return None;
    }
    let started = status.start_time.0.as_second();
    analysis
        .metrics
        .iter()
        .zip(&status.metrics)
        .filter(|(_, s)| s.phase == AnalysisPhase::Running)
        .map(|(m, s)| (due_at(m, s, started) - now).max(1) as u64)
        .min()
}

/// How one number is judged: the failure condition wins; with both conditions set, a number
/// neither holds for is inconclusive; with one, its negation decides the other way. A
/// condition that does not parse (validation denies it) judges nothing: inconclusive.
pub fn judge(metric: &AnalysisMetric, value: f64) -> Result<MeasurementPhase, String> {
    let parse = |c: &Option<String>, field: &str| {
        c.as_deref()
            .map(Condition::parse)
            .transpose()
            .map_err(|e| format!("{field} {e}"))
    };
    let success = parse(&metric.success_condition, "successCondition")?;
    let failure = parse(&metric.failure_condition, "failureCondition")?;
    Ok(match (success, failure) {
        (_, Some(f)) if f.holds(value) => MeasurementPhase::Failed,
        (Some(s), _) if s.holds(value) => MeasurementPhase::Successful,
        (Some(_), Some(_)) => MeasurementPhase::Inconclusive,
        (Some(_), None) => MeasurementPhase::Failed,
        // No comparison holds for NaN: without a success condition it would pass.
        (None, Some(_)) if value.is_nan() => MeasurementPhase::Inconclusive,
        (None, Some(_)) => MeasurementPhase::Successful,
        (None, None) => return Err("the metric has no condition".into()),
    })
}

/// A metric as named in messages: `error-rate`, or `ttft (role prefill)`.
fn metric_label(metric: &AnalysisMetric) -> String {
    match &metric.role {
        Some(role) => format!("{} (role {role})", metric.name),
        None => metric.name.clone(),
    }
}

/// Records a measurement of metric `index` taken at `now`, and updates the metric's and the
/// analysis's phases. A measurement for a metric that is no longer running (or that is not
/// in the status) is dropped: it was due in a pass whose status was superseded.
pub fn record(
    analysis: &Analysis,
    subject: Subject,
    status: &mut AnalysisStatus,
    index: usize,
    value: &Result<f64, String>,
    now: i64,
) {
    let (Some(metric), Some(state)) = (analysis.metrics.get(index), status.metrics.get_mut(index))
    else {
        return;
    };
    if state.phase != AnalysisPhase::Running || state.name != metric.name {
        return;
    }
    let (phase, message) = match value {
        Ok(v) => match judge(metric, *v) {
            Ok(phase) => (phase, None),
            Err(why) => (MeasurementPhase::Inconclusive, Some(why)),
        },
        Err(why) => (MeasurementPhase::Inconclusive, Some(why.clone())),
    };
    let message = message.map(|why| bounded_text(why, MEASUREMENT_MESSAGE_BYTES));
    // The counts come from stored status, which a tenant may have set to the bound.
    state.measured = state.measured.saturating_add(1);
    let count = match phase {
        MeasurementPhase::Successful => &mut state.successful,
        MeasurementPhase::Failed => &mut state.failed,
        MeasurementPhase::Inconclusive => &mut state.inconclusive,
    };
    *count = count.saturating_add(1);
    if state.measurements.len() >= MEASUREMENTS_KEPT {
        state.measurements.remove(0);
    }
    state.measurements.push(Measurement {
        number: state.measured,
        phase,
        value: value.as_ref().ok().map(|v| v.to_string()),
        time: time(now),
        message,
    });
    state.phase = if state.failed > metric.failure_limit_or_default() {
        AnalysisPhase::Failed
    } else if state.inconclusive > metric.inconclusive_limit_or_default() {
        AnalysisPhase::Inconclusive
    } else if count_limit(metric, subject).is_some_and(|count| state.measured >= count) {
        AnalysisPhase::Successful
    } else {
        AnalysisPhase::Running
    };
    if state.phase == AnalysisPhase::Running {
        return;
    }
    let last = state.measurements.last().expect("just pushed");
    let what = match (&last.value, &last.message) {
        (Some(v), _) => format!("measured {v}"),
        (None, Some(why)) => why.clone(),
        (None, None) => "no value".into(),
    };
    // The worst metric decides: any failed fails the analysis, else any inconclusive.
    let message = match state.phase {
        AnalysisPhase::Failed => Some(format!(
            "metric {} failed: {what} (failureCondition {:?}, successCondition {:?}; {} of {} measurements failed, failureLimit {})",
            metric_label(metric),
            metric.failure_condition.as_deref().unwrap_or("-"),
            metric.success_condition.as_deref().unwrap_or("-"),
            state.failed,
            state.measured,
            metric.failure_limit_or_default()
        )),
        AnalysisPhase::Inconclusive => Some(format!(
            "metric {} inconclusive: {what} ({} of {} measurements inconclusive, inconclusiveLimit {})",
            metric_label(metric),
            state.inconclusive,
            state.measured,
            metric.inconclusive_limit_or_default()
        )),
        _ => None,
    };
    let phases = status.metrics.iter().map(|m| m.phase);
    let overall = if phases.clone().any(|p| p == AnalysisPhase::Failed) {
        AnalysisPhase::Failed
    } else if phases.clone().any(|p| p == AnalysisPhase::Inconclusive) {
        AnalysisPhase::Inconclusive
    } else if phases.clone().all(|p| p == AnalysisPhase::Successful) {
        AnalysisPhase::Successful
    } else {
        AnalysisPhase::Running
    };
    if overall != status.phase {
        status.phase = overall;
        status.message = match overall {
            AnalysisPhase::Successful => Some("every metric succeeded".into()),
            _ => message.map(|m| bounded_text(m, STATUS_MESSAGE_CHARS)),
        };
    }
}

/// Applies this pass's measurements of `subject` to its analysis.
pub fn record_all(
    analysis: &Analysis,
    subject: Subject,
    status: &mut AnalysisStatus,
    measured: &[Measured],
    now: i64,
) {
    for m in measured.iter().filter(|m| m.due.subject == subject) {
        record(analysis, subject, status, m.due.metric, &m.value, now);
    }
}

/// A background analysis the user promoted past an inconclusive result runs on: its
/// inconclusive metrics start counting afresh.
pub fn resume(status: &mut AnalysisStatus) {
    for metric in &mut status.metrics {
        if metric.phase == AnalysisPhase::Inconclusive {
            metric.phase = AnalysisPhase::Running;
            metric.inconclusive = 0;
        }
    }
    status.phase = AnalysisPhase::Running;
    status.message = Some("resumed by promote after an inconclusive result".into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use proptest::prelude::*;

    fn metric(
        count: i32,
        interval: i64,
        failure_limit: i32,
        inconclusive_limit: i32,
    ) -> AnalysisMetric {
        AnalysisMetric {
            name: "error-rate".into(),
            success_condition: Some("result < 0.05".into()),
            failure_condition: Some("result >= 0.1".into()),
            interval: Some(IntOrString::Int(interval as i32)),
            count: Some(count),
            failure_limit: Some(failure_limit),
            inconclusive_limit: Some(inconclusive_limit),
            initial_delay: Some(IntOrString::String("5s".into())),
            ..AnalysisMetric::default()
        }
    }

    fn one(metric: AnalysisMetric) -> Analysis {
        Analysis {
            metrics: vec![metric],
        }
    }

    #[test]
    fn judging_follows_the_conditions() {
        let both = metric(1, 1, 0, 0);
        assert_eq!(judge(&both, 0.01), Ok(MeasurementPhase::Successful));
        assert_eq!(judge(&both, 0.2), Ok(MeasurementPhase::Failed));
        assert_eq!(judge(&both, 0.07), Ok(MeasurementPhase::Inconclusive));
        let success_only = AnalysisMetric {
            failure_condition: None,
            ..both.clone()
        };
        assert_eq!(judge(&success_only, 0.07), Ok(MeasurementPhase::Failed));
        let failure_only = AnalysisMetric {
            success_condition: None,
            ..both.clone()
        };
        assert_eq!(judge(&failure_only, 0.07), Ok(MeasurementPhase::Successful));
        assert_eq!(
            judge(&failure_only, f64::NAN),
            Ok(MeasurementPhase::Inconclusive),
            "NaN never passes a failure-only metric"
        );
        assert_eq!(judge(&success_only, f64::NAN), Ok(MeasurementPhase::Failed));
        let nan_fails = AnalysisMetric {
            failure_condition: Some("isNaN(result)".into()),
            ..failure_only.clone()
        };
        assert_eq!(judge(&nan_fails, f64::NAN), Ok(MeasurementPhase::Failed));
        let unparsable = AnalysisMetric {
            failure_condition: Some("result >>".into()),
            ..both
        };
        assert!(
            judge(&unparsable, 0.0)
                .unwrap_err()
                .starts_with("failureCondition at offset")
        );
    }

    #[test]
    fn the_first_measurement_waits_for_the_initial_delay_then_each_the_interval() {
        let analysis = one(metric(3, 10, 0, 0));
        let mut status = start(&analysis, Subject::Step(2), 100);
        assert_eq!(status.step, Some(2));
        assert!(due_metrics(&analysis, &status, 104).is_empty());
        assert_eq!(next_due_in(&analysis, &status, 104), Some(1));
        assert_eq!(due_metrics(&analysis, &status, 105), [0]);
        record(&analysis, Subject::Step(2), &mut status, 0, &Ok(0.01), 107);
        assert!(
            due_metrics(&analysis, &status, 116).is_empty(),
            "10 s after 107"
        );
        assert_eq!(next_due_in(&analysis, &status, 110), Some(7));
        assert_eq!(due_metrics(&analysis, &status, 117), [0]);
    }

    #[test]
    fn a_failure_names_the_metric_and_its_value() {
        let analysis = one(AnalysisMetric {
            role: Some("decode".into()),
            ..metric(3, 10, 0, 0)
        });
        let mut status = start(&analysis, Subject::Step(1), 0);
        record(&analysis, Subject::Step(1), &mut status, 0, &Ok(0.25), 5);
        assert_eq!(status.phase, AnalysisPhase::Failed);
        let message = status.message.unwrap();
        assert!(
            message.starts_with("metric error-rate (role decode) failed: measured 0.25"),
            "{message}"
        );
        assert!(message.contains("result >= 0.1"), "{message}");
    }

    #[test]
    fn an_unanswered_query_is_inconclusive_and_says_why() {
        let analysis = one(metric(3, 10, 0, 0));
        let mut status = start(&analysis, Subject::Step(1), 0);
        record(
            &analysis,
            Subject::Step(1),
            &mut status,
            0,
            &Err("connection refused".into()),
            5,
        );
        assert_eq!(status.phase, AnalysisPhase::Inconclusive);
        assert!(status.message.unwrap().contains("connection refused"));
        let taken = &status.metrics[0].measurements[0];
        assert_eq!(
            (taken.number, taken.phase, taken.value.as_deref()),
            (1, MeasurementPhase::Inconclusive, None)
        );
    }

    #[test]
    fn counts_set_to_their_bound_in_status_saturate_and_a_long_error_is_cut() {
        let analysis = one(metric(3, 10, 5, 5));
        let mut status = start(&analysis, Subject::Step(1), 0);
        let state = &mut status.metrics[0];
        (state.measured, state.inconclusive) = (i32::MAX, 0);
        let error = "series {namespace=\"b\"} ".repeat(100);
        record(&analysis, Subject::Step(1), &mut status, 0, &Err(error), 5);
        let state = &status.metrics[0];
        assert_eq!((state.measured, state.inconclusive), (i32::MAX, 1));
        let why = state.measurements[0].message.as_deref().unwrap();
        assert!(
            why.len() <= MEASUREMENT_MESSAGE_BYTES as usize,
            "{}",
            why.len()
        );
    }

    #[test]
    fn a_background_analysis_without_count_runs_until_stopped() {
        let analysis = one(AnalysisMetric {
            count: None,
            ..metric(1, 10, 0, 0)
        });
        let mut status = start(&analysis, Subject::Background, 0);
        for i in 0..25 {
            record(
                &analysis,
                Subject::Background,
                &mut status,
                0,
                &Ok(0.01),
                5 + 10 * i,
            );
        }
        assert_eq!(status.phase, AnalysisPhase::Running);
        let kept = &status.metrics[0].measurements;
        assert_eq!(kept.len(), MEASUREMENTS_KEPT);
        assert_eq!(
            (kept[0].number, kept[MEASUREMENTS_KEPT - 1].number),
            (16, 25)
        );
        assert_eq!(status.metrics[0].measured, 25);
    }

    #[test]
    fn a_measurement_for_a_finished_metric_is_dropped() {
        let analysis = one(metric(1, 10, 0, 0));
        let mut status = start(&analysis, Subject::Step(0), 0);
        record(&analysis, Subject::Step(0), &mut status, 0, &Ok(0.01), 5);
        assert_eq!(status.phase, AnalysisPhase::Successful);
        let before = status.clone();
        record(&analysis, Subject::Step(0), &mut status, 0, &Ok(0.5), 6);
        record(&analysis, Subject::Step(0), &mut status, 7, &Ok(0.5), 6);
        assert_eq!(status, before);
    }

    /// What one measurement gives: a success, a failure, an inconclusive number, or no
    /// answer at all.
    fn value() -> impl Strategy<Value = Result<f64, String>> {
        prop_oneof![
            Just(Ok(0.01)),
            Just(Ok(0.5)),
            Just(Ok(0.07)),
            Just(Err("timeout".to_string())),
        ]
    }

    proptest! {
        /// Whatever the measurements, the machine follows Argo's limits: a metric fails on
        /// its `failureLimit + 1`-th failure, is inconclusive on its
        /// `inconclusiveLimit + 1`-th inconclusive one, succeeds after `count` otherwise;
        /// nothing is measured after that, measurements are numbered 1, 2, ... with none
        /// skipped, each taken no sooner than the interval after the one before, and the
        /// status keeps at most the last ten.
        #[test]
        fn the_analysis_machine_keeps_its_limits(
            count in 1i32..30,
            interval in 1i64..120,
            failure_limit in 0i32..4,
            inconclusive_limit in 0i32..4,
            values in proptest::collection::vec(value(), 1..60),
            lateness in proptest::collection::vec(0i64..30, 60),
        ) {
            let analysis = one(metric(count, interval, failure_limit, inconclusive_limit));
            let subject = Subject::Step(3);
            let mut status = start(&analysis, subject, 1000);
            let mut now = 1000;
            let (mut failed, mut inconclusive, mut taken) = (0, 0, 0);
            let mut expected = AnalysisPhase::Running;
            let mut last_time = None;
            for (value, late) in values.iter().zip(&lateness) {
                // The controller comes back when told, or later (a slow pass, a restart).
                now += next_due_in(&analysis, &status, now).map_or(interval, |d| d as i64) + late;
                let due = due_metrics(&analysis, &status, now);
                if expected != AnalysisPhase::Running {
                    prop_assert!(due.is_empty(), "nothing is due once the metric is decided");
                    break;
                }
                prop_assert_eq!(&due, &[0]);
                record(&analysis, subject, &mut status, 0, value, now);
                taken += 1;
                match value.as_ref().map(|v| judge(&analysis.metrics[0], *v).unwrap()) {
                    Ok(MeasurementPhase::Failed) => failed += 1,
                    Ok(MeasurementPhase::Successful) => {}
                    _ => inconclusive += 1,
                }
                expected = if failed > failure_limit {
                    AnalysisPhase::Failed
                } else if inconclusive > inconclusive_limit {
                    AnalysisPhase::Inconclusive
                } else if taken >= count {
                    AnalysisPhase::Successful
                } else {
                    AnalysisPhase::Running
                };
                prop_assert_eq!(status.phase, expected);
                let state = &status.metrics[0];
                prop_assert_eq!((state.measured, state.failed, state.inconclusive), (taken, failed, inconclusive));
                prop_assert!(state.measurements.len() <= MEASUREMENTS_KEPT);
                let newest = state.measurements.last().unwrap();
                prop_assert_eq!(newest.number, taken);
                let at = newest.time.0.as_second();
                if let Some(before) = last_time {
                    prop_assert!(at - before >= interval, "taken {} s after the one before", at - before);
                }
                last_time = Some(at);
                let numbers: Vec<i32> = state.measurements.iter().map(|m| m.number).collect();
                prop_assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", numbers);
            }
        }
    }
}
