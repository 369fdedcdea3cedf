//! The canary step machine (docs/rollouts.md#state--event-table): given the steps, the two
//! revisions, the stored `canaryStatus` and what the controller observed this pass, the next
//! `canaryStatus`, the weight the rollout works toward, and the transitions (with their trigger) to
//! report.
//!
//! Pure: time comes in as `now`; the controller reads, calls [`step`], and writes.

pub mod analysis;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::analysis::{Analysis, AnalysisPhase};
use crate::api::bounded_status::{STATUS_MESSAGE_CHARS, bounded_text};
use crate::api::{
    CanaryMode, CanaryPhase, CanaryStatus, CanaryStep, PauseCondition, PauseReason, StepState,
};
use analysis::{Measured, Subject};

/// The steps the machine runs: read from the spec by
/// [`crate::api::StormServiceSpec::effective_steps`].
pub use crate::api::Step;

/// What woke a transition (docs/rollouts.md#state--event-table: recorded per transition, asserted
/// by tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The observed children reached the step's target (a watch event).
    Watch,
    /// A timed pause ran out.
    Timer,
    /// A user's promote, abort, retry or template change.
    User,
    /// A measurement decided an analysis.
    Analysis,
}

impl Trigger {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Watch => "watch",
            Self::Timer => "timer",
            Self::User => "user",
            Self::Analysis => "analysis",
        }
    }
}

/// What a transition was, as its event's reason (docs/rollouts.md#state--event-table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransitionReason {
    /// A canary of a new revision began at step 0.
    CanaryStarted,
    /// A weight step began moving replicas to the canary revision.
    CanaryStepStarted,
    /// A pause step began (timed, or waiting for promote).
    CanaryPaused,
    /// A pause ended: its time ran out or it was promoted.
    CanaryResumed,
    /// The canary was aborted (by the user, or rolled back to the stable template).
    CanaryAborted,
    /// An aborted canary starts again from step 0.
    CanaryRetried,
    /// The steps were edited: the canary starts again from step 0.
    CanaryRestarted,
    /// Promoted to 100 %: the remaining steps are skipped.
    CanaryPromotedFull,
    /// The last weight is reached and Ready: the canary is done.
    CanaryCompleted,
    /// An analysis step began measuring.
    CanaryAnalysisStarted,
    /// An analysis step succeeded or was promoted past.
    CanaryAnalysisPassed,
    /// An analysis was inconclusive: the canary waits for promote or abort.
    CanaryAnalysisInconclusive,
    /// An analysis failed: the canary aborts.
    CanaryAnalysisFailed,
}

impl TransitionReason {
    /// The event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CanaryStarted => "CanaryStarted",
            Self::CanaryStepStarted => "CanaryStepStarted",
            Self::CanaryPaused => "CanaryPaused",
            Self::CanaryResumed => "CanaryResumed",
            Self::CanaryAborted => "CanaryAborted",
            Self::CanaryRetried => "CanaryRetried",
            Self::CanaryRestarted => "CanaryRestarted",
            Self::CanaryPromotedFull => "CanaryPromotedFull",
            Self::CanaryCompleted => "CanaryCompleted",
            Self::CanaryAnalysisStarted => "CanaryAnalysisStarted",
            Self::CanaryAnalysisPassed => "CanaryAnalysisPassed",
            Self::CanaryAnalysisInconclusive => "CanaryAnalysisInconclusive",
            Self::CanaryAnalysisFailed => "CanaryAnalysisFailed",
        }
    }
}

/// A transition to report as an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// What it was.
    pub reason: TransitionReason,
    /// Event note.
    pub message: String,
    /// What caused it.
    pub trigger: Trigger,
    /// The step it happened at (events of different steps stay apart).
    pub step: usize,
}

/// A duration a transition ends, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ended {
    /// A rollout, counted from its revision's creation: completed, or aborted.
    Rollout {
        /// Completed rather than aborted.
        completed: bool,
        /// How long it took.
        seconds: f64,
    },
    /// A pause a user promoted, counted from when its step began.
    ManualPause {
        /// How long it waited.
        seconds: f64,
    },
}

impl Transition {
    /// What this transition ends and how long it lasted (times in Unix seconds): a rollout
    /// ends completed, or aborted (an analysis failure aborts it), counted from
    /// `rollout_started`, its revision's creation; a pause a user promoted, from
    /// `step_started`.
    pub fn ends(
        &self,
        rollout_started: Option<i64>,
        step_started: Option<i64>,
        now: i64,
    ) -> Option<Ended> {
        let since = |t: i64| now.saturating_sub(t).max(0) as f64;
        let rollout = |completed| {
            rollout_started.map(|t| Ended::Rollout {
                completed,
                seconds: since(t),
            })
        };
        match (self.reason, self.trigger) {
            (TransitionReason::CanaryCompleted, _) => rollout(true),
            (TransitionReason::CanaryAborted | TransitionReason::CanaryAnalysisFailed, _) => {
                rollout(false)
            }
            (TransitionReason::CanaryResumed, Trigger::User) => {
                step_started.map(|t| Ended::ManualPause { seconds: since(t) })
            }
            _ => None,
        }
    }
}

/// What the controller observed and knows this pass.
#[derive(Clone, Debug)]
pub struct CanaryInput<'a> {
    /// The steps, a final `Weight(100)` included.
    pub steps: &'a [Step],
    /// The steps as written: an analysis step's metrics are read from the step of the same
    /// index.
    pub spec_steps: &'a [CanaryStep],
    /// The background analysis (`canary.analysis`), when there is one.
    pub background: Option<&'a Analysis>,
    /// Measurements the controller took this pass (those [`due`] said were due).
    pub measured: &'a [Measured],
    /// Hash of the steps as written (an edit restarts the canary).
    pub steps_hash: &'a str,
    /// The stable revision (`currentRevision`).
    pub stable_revision: &'a str,
    /// The revision being rolled out (`updateRevision`).
    pub canary_revision: &'a str,
    /// `spec.replicas` (decides the mode when a canary starts).
    pub replicas: u32,
    /// `spec.paused`.
    pub paused: bool,
    /// Since when (Unix seconds) the stored `Paused` condition has been True, if it is.
    pub paused_since: Option<i64>,
    /// Now, Unix seconds.
    pub now: i64,
    /// The stored `canaryStatus`.
    pub previous: Option<&'a CanaryStatus>,
    /// The weight of the current step is reached and Ready (children observed this pass).
    pub target_ready: bool,
}

/// The outcome of a pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CanaryDecision {
    /// The `canaryStatus` to store (None: no canary, the field is left as it is).
    pub status: Option<CanaryStatus>,
    /// Weight (percent) of replicas the rollout moves to the canary revision.
    pub weight: u32,
    /// Aborted: every replica returns to the stable revision.
    pub aborting: bool,
    /// Transitions to report.
    pub transitions: Vec<Transition>,
    /// Look again after this many seconds (a timed pause).
    pub requeue_after: Option<u64>,
}

fn time(unix: i64) -> Time {
    Time(Timestamp::from_second(unix).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

/// The weight in force at step `index`: the last `setWeight` at or before it.
pub fn weight_at(steps: &[Step], index: usize) -> u32 {
    steps[..=index.min(steps.len().saturating_sub(1))]
        .iter()
        .rev()
        .find_map(|s| match s {
            Step::Weight(w) => Some(*w),
            Step::Pause(_) | Step::Analysis => None,
        })
        .unwrap_or(0)
}

/// Replicas (or pods) a weight targets: `ceil(n × w / 100)`.
pub fn target(n: u32, weight: u32) -> u32 {
    (u64::from(n) * u64::from(weight)).div_ceil(100) as u32
}

fn has_gate(status: &CanaryStatus, reason: PauseReason) -> bool {
    status
        .pause_conditions
        .iter()
        .flatten()
        .any(|c| c.reason == reason)
}

/// Opens a gate for `reason` (once).
fn open_gate(status: &mut CanaryStatus, reason: PauseReason, now: i64) {
    if !has_gate(status, reason) {
        status
            .pause_conditions
            .get_or_insert_with(Vec::new)
            .push(PauseCondition {
                reason,
                start_time: time(now),
            });
    }
}

/// The analysis of step `index`, as written.
fn step_analysis<'a>(input: &CanaryInput<'a>, index: usize) -> Option<&'a Analysis> {
    input
        .spec_steps
        .get(index)
        .and_then(|s| s.analysis.as_ref())
}

/// The measurements due now: the running metrics of the current step's analysis and of the
/// background analysis whose time has come (docs/rollouts.md#canary-analysis). Nothing is
/// measured while the service is paused, or once the canary completed or aborted.
pub fn due(
    spec_steps: &[CanaryStep],
    background: Option<&Analysis>,
    status: Option<&CanaryStatus>,
    paused: bool,
    now: i64,
) -> Vec<analysis::Due> {
    let Some(status) = status.filter(|s| {
        !paused && !matches!(s.phase, Some(CanaryPhase::Completed | CanaryPhase::Aborted))
    }) else {
        return Vec::new();
    };
    let mut due = Vec::new();
    if let Some(state) = &status.analysis
        && state.step == Some(status.current_step)
        && let Some(spec) = usize::try_from(status.current_step)
            .ok()
            .and_then(|i| spec_steps.get(i))
            .and_then(|s| s.analysis.as_ref())
    {
        let subject = Subject::Step(status.current_step as usize);
        due.extend(
            analysis::due_metrics(spec, state, now)
                .into_iter()
                .map(|metric| analysis::Due { subject, metric }),
        );
    }
    if let (Some(spec), Some(state)) = (background, &status.background_analysis) {
        due.extend(
            analysis::due_metrics(spec, state, now)
                .into_iter()
                .map(|metric| analysis::Due {
                    subject: Subject::Background,
                    metric,
                }),
        );
    }
    due
}

/// The earlier of two requeues.
fn sooner(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => a.or(b),
    }
}

/// A new canary at step 0.
fn start(input: &CanaryInput<'_>, mode: Option<CanaryMode>) -> CanaryStatus {
    CanaryStatus {
        current_step: 0,
        phase: Some(CanaryPhase::Progressing),
        mode: Some(mode.unwrap_or(if input.replicas > 1 {
            CanaryMode::Replica
        } else {
            CanaryMode::Pooled
        })),
        stable_revision: Some(input.stable_revision.to_string()),
        canary_revision: Some(input.canary_revision.to_string()),
        steps_hash: Some(input.steps_hash.to_string()),
        step_state: Some(StepState::Upgrading),
        step_start_time: Some(time(input.now)),
        paused_seconds: Some(0),
        ..CanaryStatus::default()
    }
}

/// Whether a canary needs its stable revision to go on. While it runs, the stable share is
/// rendered from that revision, and an abort returns to it; without it, the only safe way on
/// is forward, and only when a user asks for it (`promoteFull`). Otherwise the canary waits.
pub fn needs_stable_revision(status: &CanaryStatus) -> bool {
    status.promote_full != Some(true)
        && matches!(
            status.phase,
            Some(
                CanaryPhase::Initializing
                    | CanaryPhase::Progressing
                    | CanaryPhase::Paused
                    | CanaryPhase::Aborted
            )
        )
}

/// One pass of the step machine: its phases in the order docs/rollouts.md#state--event-table
/// reads them — the revisions (one revision, a completed canary, edited steps or a new
/// canary), the **Aborted** row (stays, or `abort: false` retries), the user's `abort` and
/// `promoteFull` columns, the time under `spec.paused`, the background analysis, then the
/// walk through the steps (a weight step's target Ready, a pause's timer or gate, an analysis
/// step's measurements), as far as this pass allows.
pub fn step(input: &CanaryInput<'_>) -> CanaryDecision {
    if input.stable_revision == input.canary_revision {
        return one_revision(input);
    }
    let mut pass = match Pass::open(input) {
        Opened::Completed(status) => {
            return CanaryDecision {
                status: Some(status),
                weight: 100,
                ..CanaryDecision::default()
            };
        }
        Opened::Running(pass) => pass,
    };
    if pass.status.phase == Some(CanaryPhase::Aborted) && !pass.retry() {
        return pass.stay_aborted();
    }
    if pass.status.abort == Some(true) {
        let message = format!("aborted at step {}", pass.index);
        return pass.abort(Abort {
            message,
            reason: TransitionReason::CanaryAborted,
            trigger: Trigger::User,
        });
    }
    pass.promote_full();
    pass.count_paused_time();
    let held = match pass.background_analysis() {
        Ok(held) => held,
        Err(abort) => return pass.abort(abort),
    };
    // `spec.paused` freezes every transition.
    if !input.paused
        && !held
        && let Err(abort) = pass.walk()
    {
        return pass.abort(abort);
    }
    pass.decision()
}

/// Nothing to roll: the template is the stable revision. A canary in flight whose template
/// went back to stable ends as rolled back; anything else stays as it is.
fn one_revision(input: &CanaryInput<'_>) -> CanaryDecision {
    let Some(mut status) = input.previous.cloned() else {
        return CanaryDecision::default();
    };
    let mut transitions = Vec::new();
    let in_flight = !matches!(
        status.phase,
        Some(CanaryPhase::Completed | CanaryPhase::Aborted)
    ) && status.canary_revision.as_deref() != Some(input.canary_revision);
    if in_flight {
        status.phase = Some(CanaryPhase::Aborted);
        status.aborted_at = Some(time(input.now));
        status.message = Some("rolled back: the template is the stable revision again".into());
        status.pause_conditions = None;
        transitions.push(Transition {
            reason: TransitionReason::CanaryAborted,
            message: "rolled back to the stable revision; trigger=user".into(),
            trigger: Trigger::User,
            step: status.current_step.max(0) as usize,
        });
    }
    CanaryDecision {
        status: Some(status),
        weight: 100,
        transitions,
        ..CanaryDecision::default()
    }
}

/// Why a pass aborts the canary, and what woke the abort.
struct Abort {
    message: String,
    reason: TransitionReason,
    trigger: Trigger,
}

/// What [`Pass::open`] found stored for the two revisions.
enum Opened<'i, 'a> {
    /// A completed canary of this revision stays so until the revisions are promoted.
    Completed(CanaryStatus),
    /// The canary this pass steps.
    Running(Pass<'i, 'a>),
}

/// What one step of the walk leaves for the next.
enum Walked {
    /// This pass goes no further.
    Stop,
    /// The step changed (or was entered): look at it again.
    Again,
}

/// One pass over a running canary: its status as it is being stepped, the step it is at and
/// what it reports.
struct Pass<'i, 'a> {
    input: &'i CanaryInput<'a>,
    status: CanaryStatus,
    index: usize,
    last: usize,
    transitions: Vec<Transition>,
    requeue_after: Option<u64>,
}

impl<'i, 'a> Pass<'i, 'a> {
    /// The **new revision or edited steps** column: the stored canary of this revision and
    /// these steps goes on; edited steps restart it at step 0; anything else starts a new
    /// one.
    fn open(input: &'i CanaryInput<'a>) -> Opened<'i, 'a> {
        let mut transitions = Vec::new();
        let previous = input.previous.cloned();
        let same_epoch = previous.as_ref().is_some_and(|p| {
            p.canary_revision.as_deref() == Some(input.canary_revision)
                && p.phase != Some(CanaryPhase::Completed)
        });
        let status = match previous {
            Some(p)
                if p.phase == Some(CanaryPhase::Completed)
                    && p.canary_revision.as_deref() == Some(input.canary_revision) =>
            {
                return Opened::Completed(p);
            }
            Some(p) if same_epoch && p.steps_hash.as_deref() == Some(input.steps_hash) => p,
            Some(p) if same_epoch => {
                transitions.push(Transition {
                    reason: TransitionReason::CanaryRestarted,
                    message: "the steps were edited: restarting at step 0; trigger=user".into(),
                    trigger: Trigger::User,
                    step: 0,
                });
                start(input, p.mode)
            }
            _ => {
                transitions.push(Transition {
                    reason: TransitionReason::CanaryStarted,
                    message: format!(
                        "canary of revision {} over {}; trigger=user",
                        input.canary_revision, input.stable_revision
                    ),
                    trigger: Trigger::User,
                    step: 0,
                });
                start(input, None)
            }
        };
        let last = input.steps.len().saturating_sub(1);
        let index = usize::try_from(status.current_step).unwrap_or(0).min(last);
        Opened::Running(Pass {
            input,
            status,
            index,
            last,
            transitions,
            requeue_after: None,
        })
    }

    /// The **Aborted** row's `abort: false` (`squall retry`): a new canary from step 0.
    /// False while the abort stands.
    fn retry(&mut self) -> bool {
        if self.status.abort != Some(false) {
            return false;
        }
        self.status = start(self.input, self.status.mode);
        self.index = 0;
        self.transitions.push(Transition {
            reason: TransitionReason::CanaryRetried,
            message: "retrying from step 0; trigger=user".into(),
            trigger: Trigger::User,
            step: 0,
        });
        true
    }

    /// An aborted canary stays aborted: back to stable until `abort` is cleared.
    fn stay_aborted(self) -> CanaryDecision {
        CanaryDecision {
            status: Some(self.status),
            weight: 0,
            aborting: true,
            transitions: self.transitions,
            requeue_after: None,
        }
    }

    /// Aborts the canary: every replica returns to the stable revision.
    fn abort(mut self, abort: Abort) -> CanaryDecision {
        let Abort {
            message,
            reason,
            trigger,
        } = abort;
        self.status.phase = Some(CanaryPhase::Aborted);
        self.status.aborted_at = Some(time(self.input.now));
        self.status.pause_conditions = None;
        self.transitions.push(Transition {
            reason,
            message: format!(
                "{message}: returning to the stable revision; trigger={}",
                trigger.as_str()
            ),
            trigger,
            step: self.index,
        });
        self.status.message = Some(bounded_text(message, STATUS_MESSAGE_CHARS));
        CanaryDecision {
            status: Some(self.status),
            weight: 0,
            aborting: true,
            transitions: self.transitions,
            requeue_after: None,
        }
    }

    /// The **`promoteFull`** column: to the last step (weight 100), the rest skipped.
    fn promote_full(&mut self) {
        if self.status.promote_full != Some(true) || self.index == self.last {
            return;
        }
        self.index = self.last;
        self.status.current_step = self.last as i32;
        self.status.step_state = Some(StepState::Upgrading);
        self.status.step_start_time = Some(time(self.input.now));
        self.status.pause_conditions = None;
        self.status.phase = Some(CanaryPhase::Progressing);
        self.transitions.push(Transition {
            reason: TransitionReason::CanaryPromotedFull,
            message: "promoted to 100%: remaining steps skipped; trigger=user".into(),
            trigger: Trigger::User,
            step: self.index,
        });
    }

    /// The **`spec.paused` off** cell of a timed pause: the time paused inside it is added
    /// to `pausedSeconds` when the service resumes, so the clock stopped while paused.
    fn count_paused_time(&mut self) {
        let input = self.input;
        let status = &mut self.status;
        if input.paused || status.step_state != Some(StepState::StepPaused) {
            return;
        }
        let Some(since) = input.paused_since else {
            return;
        };
        let entered = status.step_start_time.as_ref().map_or(since, seconds);
        // Both ends are whole seconds: one more is counted so the pause never comes up short
        // of its duration plus the time actually paused.
        // Stored times and counts are the tenant's to write: the arithmetic saturates.
        let paused_for = input
            .now
            .saturating_sub(since.max(entered))
            .saturating_add(1);
        status.paused_seconds = Some(
            status
                .paused_seconds
                .unwrap_or(0)
                .saturating_add(paused_for.max(0)),
        );
    }

    /// The background analysis runs from the first step until the canary completes: a
    /// failure aborts wherever the canary is; an inconclusive result holds it behind a gate
    /// until promoted (`Ok(true)`: held). `spec.paused` freezes it with everything else.
    fn background_analysis(&mut self) -> Result<bool, Abort> {
        let input = self.input;
        let index = self.index;
        let Some(spec) = input.background.filter(|_| !input.paused) else {
            return Ok(false);
        };
        let gated = has_gate(&self.status, PauseReason::CanaryAnalysisInconclusive);
        let state = self
            .status
            .background_analysis
            .get_or_insert_with(|| analysis::start(spec, Subject::Background, input.now));
        let before = state.phase;
        analysis::record_all(spec, Subject::Background, state, input.measured, input.now);
        let mut held = false;
        match state.phase {
            AnalysisPhase::Failed => {
                return Err(Abort {
                    message: format!(
                        "background analysis failed at step {index}: {}",
                        state.message.as_deref().unwrap_or_default()
                    ),
                    reason: TransitionReason::CanaryAnalysisFailed,
                    trigger: Trigger::Analysis,
                });
            }
            AnalysisPhase::Inconclusive if before != AnalysisPhase::Inconclusive => {
                let message = format!(
                    "background analysis inconclusive at step {index}: {}; trigger=analysis",
                    state.message.as_deref().unwrap_or_default()
                );
                open_gate(
                    &mut self.status,
                    PauseReason::CanaryAnalysisInconclusive,
                    input.now,
                );
                self.status.phase = Some(CanaryPhase::Paused);
                self.transitions.push(Transition {
                    reason: TransitionReason::CanaryAnalysisInconclusive,
                    message,
                    trigger: Trigger::Analysis,
                    step: index,
                });
                held = true;
            }
            AnalysisPhase::Inconclusive if gated => held = true,
            AnalysisPhase::Inconclusive => {
                // Promoted past the inconclusive result: the analysis runs on.
                analysis::resume(state);
                self.transitions.push(Transition {
                    reason: TransitionReason::CanaryResumed,
                    message: format!(
                        "background analysis resumed at step {index} (promoted); trigger=user"
                    ),
                    trigger: Trigger::User,
                    step: index,
                });
            }
            AnalysisPhase::Running | AnalysisPhase::Successful => {}
        }
        let state = self.status.background_analysis.as_ref().expect("set above");
        self.requeue_after = analysis::next_due_in(spec, state, input.now);
        Ok(held)
    }

    /// Walks as far as this pass allows: a Ready target can open the next step at once.
    fn walk(&mut self) -> Result<(), Abort> {
        loop {
            let walked = match self.input.steps[self.index] {
                Step::Weight(weight) => self.weight_step(weight),
                Step::Pause(duration) => self.pause_step(duration),
                Step::Analysis => self.analysis_step()?,
            };
            if let Walked::Stop = walked {
                return Ok(());
            }
        }
    }

    /// The **Upgrading** row: the step is done once its target is updated and Ready; the
    /// last one completes the canary.
    fn weight_step(&mut self, weight: u32) -> Walked {
        let status = &mut self.status;
        // No gate is open during a weight step.
        status.pause_conditions = None;
        if status.step_state != Some(StepState::Upgrading) {
            status.step_state = Some(StepState::Upgrading);
            status.step_start_time = Some(time(self.input.now));
        }
        status.phase = Some(CanaryPhase::Progressing);
        if !self.input.target_ready {
            return Walked::Stop;
        }
        if self.index == self.last {
            // The background analysis ends with the canary.
            self.requeue_after = None;
            status.step_state = Some(StepState::StepReady);
            status.phase = Some(CanaryPhase::Completed);
            self.transitions.push(Transition {
                reason: TransitionReason::CanaryCompleted,
                message: format!(
                    "weight {weight}% reached: every replica runs {}; trigger=watch",
                    self.input.canary_revision
                ),
                trigger: Trigger::Watch,
                step: self.index,
            });
            return Walked::Stop;
        }
        self.next_step(Trigger::Watch)
    }

    /// The **StepPaused** rows: a timed pause ends when its time is over (once the previous
    /// weight is Ready), either kind when its gate is opened (`squall promote`).
    fn pause_step(&mut self, duration: Option<u64>) -> Walked {
        if self.status.step_state != Some(StepState::StepPaused) {
            self.enter(Trigger::Watch);
            return Walked::Again;
        }
        let input = self.input;
        let promoted = !has_gate(&self.status, PauseReason::CanaryPauseStep);
        let (expired, wait) = match duration {
            Some(d) => pause_over(&self.status, d, input.now),
            None => (false, None),
        };
        if !(promoted || expired && input.target_ready) {
            self.requeue_after = sooner(self.requeue_after, wait);
            return Walked::Stop;
        }
        let trigger = if promoted {
            Trigger::User
        } else {
            Trigger::Timer
        };
        self.status.pause_conditions = None;
        self.transitions.push(Transition {
            reason: TransitionReason::CanaryResumed,
            message: format!(
                "pause at step {} ended ({}); trigger={}",
                self.index,
                if promoted {
                    "promoted"
                } else {
                    "duration elapsed"
                },
                trigger.as_str()
            ),
            trigger,
            step: self.index,
        });
        self.next_step(trigger)
    }

    /// An analysis step (docs/rollouts.md#outcomes): measures while running, aborts on a
    /// failure, waits behind a gate while inconclusive, and goes on when it succeeds or is
    /// promoted past an inconclusive result.
    fn analysis_step(&mut self) -> Result<Walked, Abort> {
        let input = self.input;
        let index = self.index;
        let Some(spec) = step_analysis(input, index) else {
            return Ok(Walked::Stop); // the steps and the spec disagree: never built so
        };
        let entered = self
            .status
            .analysis
            .as_ref()
            .is_some_and(|a| a.step == Some(index as i32))
            && self.status.step_state == Some(StepState::Analyzing);
        if !entered {
            self.enter(Trigger::Watch);
            return Ok(Walked::Again);
        }
        let gated = has_gate(&self.status, PauseReason::CanaryAnalysisInconclusive);
        let state = self.status.analysis.as_mut().expect("entered");
        let before = state.phase;
        analysis::record_all(spec, Subject::Step(index), state, input.measured, input.now);
        let message = state.message.clone().unwrap_or_default();
        let trigger = match state.phase {
            AnalysisPhase::Running => {
                self.requeue_after = sooner(
                    self.requeue_after,
                    analysis::next_due_in(spec, state, input.now),
                );
                return Ok(Walked::Stop);
            }
            AnalysisPhase::Failed => {
                return Err(Abort {
                    message: format!("analysis failed at step {index}: {message}"),
                    reason: TransitionReason::CanaryAnalysisFailed,
                    trigger: Trigger::Analysis,
                });
            }
            AnalysisPhase::Inconclusive if before != AnalysisPhase::Inconclusive => {
                open_gate(
                    &mut self.status,
                    PauseReason::CanaryAnalysisInconclusive,
                    input.now,
                );
                self.status.phase = Some(CanaryPhase::Paused);
                self.transitions.push(Transition {
                    reason: TransitionReason::CanaryAnalysisInconclusive,
                    message: format!(
                        "analysis inconclusive at step {index}: {message}; waiting for promote or abort; trigger=analysis"
                    ),
                    trigger: Trigger::Analysis,
                    step: index,
                });
                return Ok(Walked::Stop);
            }
            AnalysisPhase::Inconclusive if gated => return Ok(Walked::Stop),
            AnalysisPhase::Successful => Trigger::Analysis,
            // Promoted past the inconclusive result.
            AnalysisPhase::Inconclusive => Trigger::User,
        };
        self.status.pause_conditions = None;
        self.transitions.push(Transition {
            reason: TransitionReason::CanaryAnalysisPassed,
            message: format!(
                "analysis at step {index} {}; trigger={}",
                if trigger == Trigger::User {
                    "promoted past an inconclusive result"
                } else {
                    "succeeded"
                },
                trigger.as_str()
            ),
            trigger,
            step: index,
        });
        Ok(self.next_step(trigger))
    }

    /// On to the next step, entered by `trigger`. A weight step stops the walk: what was
    /// observed is the previous weight's target.
    fn next_step(&mut self, trigger: Trigger) -> Walked {
        if self.index == self.last {
            return Walked::Stop;
        }
        self.index += 1;
        self.enter(trigger);
        if matches!(self.input.steps[self.index], Step::Weight(_)) {
            Walked::Stop
        } else {
            Walked::Again
        }
    }

    /// Enters the current step: a pause records its gate; a weight starts upgrading.
    fn enter(&mut self, trigger: Trigger) {
        let (input, index, status) = (self.input, self.index, &mut self.status);
        status.current_step = index as i32;
        status.step_start_time = Some(time(input.now));
        status.paused_seconds = Some(0);
        let message = match input.steps[index] {
            Step::Pause(duration) => {
                status.step_state = Some(StepState::StepPaused);
                status.phase = Some(CanaryPhase::Paused);
                status.pause_conditions = Some(vec![PauseCondition {
                    reason: PauseReason::CanaryPauseStep,
                    start_time: time(input.now),
                }]);
                match duration {
                    Some(d) => format!("step {index}: pausing for {d}s"),
                    None => format!("step {index}: waiting for promote"),
                }
            }
            Step::Analysis => {
                status.step_state = Some(StepState::Analyzing);
                status.phase = Some(CanaryPhase::Progressing);
                if let Some(spec) = step_analysis(input, index) {
                    status.analysis = Some(analysis::start(spec, Subject::Step(index), input.now));
                }
                format!("step {index}: analysing the canary")
            }
            Step::Weight(weight) => {
                status.step_state = Some(StepState::Upgrading);
                status.phase = Some(CanaryPhase::Progressing);
                format!("step {index}: moving {weight}% to the canary revision")
            }
        };
        let reason = match input.steps[index] {
            Step::Pause(_) => TransitionReason::CanaryPaused,
            Step::Analysis => TransitionReason::CanaryAnalysisStarted,
            Step::Weight(_) => TransitionReason::CanaryStepStarted,
        };
        self.transitions.push(Transition {
            reason,
            message: format!("{message}; trigger={}", trigger.as_str()),
            trigger,
            step: index,
        });
    }

    /// The weight in force where the walk stopped, and what the pass reports.
    fn decision(self) -> CanaryDecision {
        CanaryDecision {
            weight: weight_at(self.input.steps, self.index),
            status: Some(self.status),
            aborting: false,
            transitions: self.transitions,
            requeue_after: self.requeue_after,
        }
    }
}

/// Whether a timed pause of `duration` seconds is over at `now` (the time under
/// `spec.paused` not counted), and if not, how long is left.
fn pause_over(status: &CanaryStatus, duration: u64, now: i64) -> (bool, Option<u64>) {
    let started = status.step_start_time.as_ref().map_or(now, seconds);
    let waited = now
        .saturating_sub(started)
        .saturating_sub(status.paused_seconds.unwrap_or(0));
    // `stepStartTime` is stored in whole seconds, so the step began up to a second after
    // it: only a wait past `duration` whole seconds is sure to have lasted it (a zero pause
    // does not wait).
    let needed = if duration == 0 {
        0
    } else {
        i64::try_from(duration)
            .unwrap_or(i64::MAX)
            .saturating_add(1)
    };
    if waited >= needed {
        (true, None)
    } else {
        (false, Some((needed - waited).max(1) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 25% → timed pause 10 s → 50% → manual gate → 100%.
    const STEPS: &[Step] = &[
        Step::Weight(25),
        Step::Pause(Some(10)),
        Step::Weight(50),
        Step::Pause(None),
        Step::Weight(100),
    ];

    fn input<'a>(previous: Option<&'a CanaryStatus>, now: i64, ready: bool) -> CanaryInput<'a> {
        CanaryInput {
            steps: STEPS,
            spec_steps: &[],
            background: None,
            measured: &[],
            steps_hash: "h1",
            stable_revision: "llm-stable",
            canary_revision: "llm-canary",
            replicas: 4,
            paused: false,
            paused_since: None,
            now,
            previous,
            target_ready: ready,
        }
    }

    fn at(decision: &CanaryDecision) -> (i32, Option<StepState>, Option<CanaryPhase>) {
        let s = decision.status.as_ref().unwrap();
        (s.current_step, s.step_state, s.phase)
    }

    fn reasons(decision: &CanaryDecision) -> Vec<(&'static str, &'static str)> {
        decision
            .transitions
            .iter()
            .map(|t| (t.reason.as_str(), t.trigger.as_str()))
            .collect()
    }

    /// Runs passes from a fresh canary: returns the status at the timed pause (entered at 100).
    fn at_timed_pause() -> CanaryStatus {
        let started = step(&input(None, 100, false));
        assert_eq!(reasons(&started), [("CanaryStarted", "user")]);
        assert_eq!(started.weight, 25);
        step(&input(started.status.as_ref(), 100, true))
            .status
            .unwrap()
    }

    fn promote(status: &CanaryStatus) -> CanaryStatus {
        CanaryStatus {
            pause_conditions: None,
            ..status.clone()
        }
    }

    #[test]
    fn a_ready_weight_step_moves_on_by_watch() {
        let first = step(&input(None, 100, false));
        assert_eq!(
            at(&first),
            (
                0,
                Some(StepState::Upgrading),
                Some(CanaryPhase::Progressing)
            )
        );
        assert_eq!(
            first.status.as_ref().unwrap().mode,
            Some(CanaryMode::Replica)
        );
        let waiting = step(&input(first.status.as_ref(), 101, false));
        assert_eq!(at(&waiting).0, 0, "not ready: stays");
        assert!(waiting.transitions.is_empty());
        let next = step(&input(first.status.as_ref(), 102, true));
        assert_eq!(
            at(&next),
            (1, Some(StepState::StepPaused), Some(CanaryPhase::Paused))
        );
        assert_eq!(reasons(&next), [("CanaryPaused", "watch")]);
        assert!(has_gate(
            next.status.as_ref().unwrap(),
            PauseReason::CanaryPauseStep
        ));
        assert_eq!(
            next.requeue_after,
            Some(11),
            "the timer is set on entry, for 10 s past a start stored in whole seconds"
        );
    }

    #[test]
    fn a_timed_pause_ends_by_timer_after_its_duration() {
        let paused = at_timed_pause();
        let early = step(&input(Some(&paused), 105, true));
        assert_eq!(at(&early).0, 1);
        assert_eq!(
            early.requeue_after,
            Some(6),
            "requeued for the remaining time (the start is stored in whole seconds)"
        );
        // Entered at 100 (stored in whole seconds, so really in [100, 101)): at 110 the
        // pause may have lasted only 9 s and still holds; at 111 it surely lasted 10.
        let boundary = step(&input(Some(&paused), 110, true));
        assert_eq!(at(&boundary).0, 1, "not over before its duration");
        assert!(boundary.transitions.is_empty());
        let done = step(&input(Some(&paused), 111, true));
        assert_eq!(
            at(&done),
            (
                2,
                Some(StepState::Upgrading),
                Some(CanaryPhase::Progressing)
            )
        );
        assert_eq!(
            reasons(&done),
            [("CanaryResumed", "timer"), ("CanaryStepStarted", "timer")]
        );
        assert_eq!(done.weight, 50);
    }

    #[test]
    fn a_timed_pause_ends_early_on_promote() {
        let paused = at_timed_pause();
        let promoted = step(&input(Some(&promote(&paused)), 101, true));
        assert_eq!(at(&promoted).0, 2);
        assert_eq!(reasons(&promoted)[0], ("CanaryResumed", "user"));
    }

    #[test]
    fn a_global_pause_freezes_the_timer_and_the_remaining_time_survives() {
        let paused = at_timed_pause(); // entered at 100, 10 s
        // Globally paused from 103 to 120: nothing moves.
        let mut frozen = input(Some(&paused), 115, true);
        frozen.paused = true;
        frozen.paused_since = Some(103);
        let held = step(&frozen);
        assert_eq!(at(&held).0, 1);
        assert!(held.transitions.is_empty());
        // Resumed at 120 (the stored Paused condition still says since 103): 17 s paused.
        let mut resumed = input(held.status.as_ref(), 120, true);
        resumed.paused_since = Some(103);
        let after = step(&resumed);
        assert_eq!(
            after.status.as_ref().unwrap().paused_seconds,
            Some(18),
            "17 s, plus one for the whole-second ends"
        );
        assert_eq!(
            after.requeue_after,
            Some(9),
            "3 s waited before the pause, 7 s left, +1 for each whole-second rounding"
        );
        let status = after.status.unwrap();
        let early = step(&input(Some(&status), 128, true));
        assert_eq!(at(&early).0, 1);
        let done = step(&input(Some(&status), 129, true));
        assert_eq!(at(&done).0, 2);
    }

    #[test]
    fn a_manual_gate_holds_through_pause_and_resume_until_promoted() {
        let paused = at_timed_pause();
        let at_50 = step(&input(Some(&paused), 111, true)).status.unwrap();
        let gate = step(&input(Some(&at_50), 111, true));
        assert_eq!(
            at(&gate),
            (3, Some(StepState::StepPaused), Some(CanaryPhase::Paused))
        );
        let gate = gate.status.unwrap();
        let mut pause = input(Some(&gate), 200, true);
        pause.paused = true;
        let paused_again = step(&pause).status.unwrap();
        let mut resume = input(Some(&paused_again), 300, true);
        resume.paused_since = Some(200);
        let resumed = step(&resume);
        assert_eq!(at(&resumed).0, 3, "the gate is still closed after resume");
        assert!(has_gate(
            resumed.status.as_ref().unwrap(),
            PauseReason::CanaryPauseStep
        ));
        let promoted = step(&input(Some(&promote(&gate)), 301, false));
        assert_eq!(
            at(&promoted),
            (
                4,
                Some(StepState::Upgrading),
                Some(CanaryPhase::Progressing)
            )
        );
        assert_eq!(promoted.weight, 100);
        let complete = step(&input(promoted.status.as_ref(), 302, true));
        assert_eq!(
            at(&complete),
            (4, Some(StepState::StepReady), Some(CanaryPhase::Completed))
        );
        assert_eq!(reasons(&complete), [("CanaryCompleted", "watch")]);
    }

    #[test]
    fn a_weight_step_is_frozen_by_a_global_pause() {
        let first = step(&input(None, 100, false)).status.unwrap();
        let mut paused = input(Some(&first), 101, true);
        paused.paused = true;
        let held = step(&paused);
        assert_eq!(at(&held).0, 0);
        assert!(held.transitions.is_empty());
    }

    #[test]
    fn abort_returns_to_stable_and_retry_restarts_at_step_zero() {
        let paused = at_timed_pause();
        let aborted = step(&input(
            Some(&CanaryStatus {
                abort: Some(true),
                ..paused
            }),
            101,
            true,
        ));
        assert!(aborted.aborting);
        assert_eq!(aborted.weight, 0);
        assert_eq!(at(&aborted).2, Some(CanaryPhase::Aborted));
        assert_eq!(reasons(&aborted), [("CanaryAborted", "user")]);
        let status = aborted.status.unwrap();
        assert!(status.aborted_at.is_some() && status.pause_conditions.is_none());
        let still = step(&input(Some(&status), 200, true));
        assert!(
            still.aborting && still.transitions.is_empty(),
            "stays aborted"
        );
        let retried = step(&input(
            Some(&CanaryStatus {
                abort: Some(false),
                ..status
            }),
            300,
            false,
        ));
        assert_eq!(
            at(&retried),
            (
                0,
                Some(StepState::Upgrading),
                Some(CanaryPhase::Progressing)
            )
        );
        assert_eq!(reasons(&retried), [("CanaryRetried", "user")]);
        assert_eq!(
            retried.status.unwrap().abort,
            None,
            "cleared when the canary restarts"
        );
    }

    #[test]
    fn promote_full_skips_the_remaining_steps() {
        let paused = at_timed_pause();
        let full = step(&input(
            Some(&CanaryStatus {
                promote_full: Some(true),
                ..paused
            }),
            101,
            false,
        ));
        assert_eq!(at(&full).0, 4);
        assert_eq!(full.weight, 100);
        assert_eq!(reasons(&full), [("CanaryPromotedFull", "user")]);
    }

    #[test]
    fn a_new_revision_or_edited_steps_restart_at_step_zero() {
        let paused = at_timed_pause();
        let mut newer = input(Some(&paused), 101, false);
        newer.canary_revision = "llm-newer";
        let restarted = step(&newer);
        assert_eq!(at(&restarted).0, 0);
        assert_eq!(reasons(&restarted), [("CanaryStarted", "user")]);
        let mut edited = input(Some(&paused), 101, false);
        edited.steps_hash = "h2";
        let restarted = step(&edited);
        assert_eq!(at(&restarted).0, 0);
        assert_eq!(reasons(&restarted), [("CanaryRestarted", "user")]);
    }

    #[test]
    fn reverting_the_template_ends_the_canary_as_rolled_back() {
        let paused = at_timed_pause();
        let mut reverted = input(Some(&paused), 101, true);
        reverted.canary_revision = "llm-stable";
        let ended = step(&reverted);
        assert_eq!(at(&ended).2, Some(CanaryPhase::Aborted));
        assert!(
            ended
                .status
                .unwrap()
                .message
                .unwrap()
                .contains("rolled back")
        );
    }

    #[test]
    fn a_completed_canary_stays_until_a_new_revision_starts_one() {
        let done = CanaryStatus {
            phase: Some(CanaryPhase::Completed),
            canary_revision: Some("llm-canary".into()),
            ..CanaryStatus::default()
        };
        let mut settled = input(Some(&done), 100, true);
        settled.stable_revision = "llm-canary";
        assert_eq!(step(&settled).status.as_ref(), Some(&done));
        let mut next = input(Some(&done), 100, false);
        next.stable_revision = "llm-canary";
        next.canary_revision = "llm-next";
        assert_eq!(reasons(&step(&next)), [("CanaryStarted", "user")]);
        let pooled = step(&CanaryInput {
            replicas: 1,
            ..input(None, 100, false)
        });
        assert_eq!(pooled.status.unwrap().mode, Some(CanaryMode::Pooled));
    }

    #[test]
    fn targets_round_up() {
        assert_eq!(target(4, 25), 1);
        assert_eq!(target(3, 50), 2);
        assert_eq!(target(5, 0), 0);
        assert_eq!(target(5, 100), 5);
        assert_eq!(weight_at(STEPS, 1), 25);
        assert_eq!(weight_at(STEPS, 3), 50);
    }

    #[derive(Clone, Debug)]
    enum Event {
        Pass { advance: i64, ready: bool },
        Pause(bool),
        Promote,
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0i64..8, any::<bool>()).prop_map(|(advance, ready)| Event::Pass { advance, ready }),
            any::<bool>().prop_map(Event::Pause),
            Just(Event::Promote),
        ]
    }

    proptest! {
        /// docs/rollouts.md#invariants: within an epoch (same revision and steps, not aborted) the
        /// step and the weight never go back, and a timed pause never ends before its duration
        /// (paused time excluded) unless promoted.
        #[test]
        fn progress_is_monotonic_within_an_epoch(events in proptest::collection::vec(arb_event(), 1..40)) {
            let mut now = 1_000;
            let mut paused = false;
            let mut paused_since = None;
            let mut status = step(&input(None, now, false)).status.unwrap();
            let mut weight = 0;
            for event in events {
                let ready = match event {
                    Event::Pass { advance, ready } => { now += advance; ready }
                    Event::Pause(on) => {
                        if on && !paused { paused_since = Some(now); }
                        paused = on;
                        false
                    }
                    Event::Promote => { status = promote(&status); false }
                };
                let mut pass = input(Some(&status), now, ready);
                pass.paused = paused;
                pass.paused_since = paused_since;
                let decision = step(&pass);
                let next = decision.status.unwrap();
                prop_assert!(next.current_step >= status.current_step);
                prop_assert!(decision.weight >= weight, "weight went back");
                if paused {
                    prop_assert_eq!(next.current_step, status.current_step, "frozen while paused");
                }
                let left_timed_pause = status.current_step == 1 && next.current_step > 1
                    && status.step_state == Some(StepState::StepPaused);
                if left_timed_pause && has_gate(&status, PauseReason::CanaryPauseStep) {
                    let waited = now - seconds(status.step_start_time.as_ref().unwrap())
                        - next.paused_seconds.unwrap_or(0).max(status.paused_seconds.unwrap_or(0));
                    prop_assert!(waited >= 10, "left the 10 s pause after {waited}s");
                }
                if !paused { paused_since = None; }
                weight = decision.weight;
                status = next;
            }
        }
    }

    #[test]
    fn only_a_canary_in_flight_needs_its_stable_revision() {
        let with = |phase, promote_full| CanaryStatus {
            phase,
            promote_full,
            ..CanaryStatus::default()
        };
        for phase in [
            CanaryPhase::Initializing,
            CanaryPhase::Progressing,
            CanaryPhase::Paused,
            CanaryPhase::Aborted,
        ] {
            assert!(needs_stable_revision(&with(Some(phase), None)), "{phase:?}");
            assert!(
                !needs_stable_revision(&with(Some(phase), Some(true))),
                "{phase:?} promoted fully"
            );
        }
        assert!(!needs_stable_revision(&with(
            Some(CanaryPhase::Completed),
            None
        )));
        assert!(!needs_stable_revision(&with(None, None)));
    }

    mod analysis_steps {
        use super::*;
        use crate::api::analysis::{
            AnalysisMetric, MeasurementPhase, MetricProvider, PrometheusMetric,
        };
        use analysis::Due;
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

        /// 50% → analysis (error rate, 2 measurements 10 s apart) → 100%.
        const STEPS: &[Step] = &[Step::Weight(50), Step::Analysis, Step::Weight(100)];

        fn analysis(count: i32) -> Analysis {
            Analysis {
                metrics: vec![AnalysisMetric {
                    name: "error-rate".into(),
                    provider: MetricProvider {
                        prometheus: Some(PrometheusMetric {
                            endpoint: None,
                            query: "errors".into(),
                        }),
                    },
                    success_condition: Some("result < 0.05".into()),
                    failure_condition: Some("result >= 0.1".into()),
                    interval: Some(IntOrString::Int(10)),
                    count: Some(count),
                    ..AnalysisMetric::default()
                }],
            }
        }

        fn spec_steps() -> Vec<CanaryStep> {
            vec![
                CanaryStep {
                    set_weight: Some(50),
                    ..CanaryStep::default()
                },
                CanaryStep {
                    analysis: Some(analysis(2)),
                    ..CanaryStep::default()
                },
            ]
        }

        fn pass<'a>(
            spec: &'a [CanaryStep],
            background: Option<&'a Analysis>,
            previous: Option<&'a CanaryStatus>,
            now: i64,
            measured: &'a [Measured],
        ) -> CanaryDecision {
            step(&CanaryInput {
                steps: if background.is_some() {
                    BACKGROUND_STEPS
                } else {
                    STEPS
                },
                spec_steps: spec,
                background,
                measured,
                // A background analysis is judged while the 50% is still rolling out.
                ..input(previous, now, background.is_none())
            })
        }

        /// 50% → 100%, judged by a background analysis.
        const BACKGROUND_STEPS: &[Step] = &[Step::Weight(50), Step::Weight(100)];

        /// What the controller would measure for `status` at `now`, answered with `value`.
        fn measure(
            spec: &[CanaryStep],
            background: Option<&Analysis>,
            status: &CanaryStatus,
            now: i64,
            value: Result<f64, String>,
        ) -> Vec<Measured> {
            due(spec, background, Some(status), false, now)
                .into_iter()
                .map(|due| Measured {
                    due,
                    value: value.clone(),
                })
                .collect()
        }

        /// A canary whose analysis step was entered at 100.
        fn analysing(spec: &[CanaryStep]) -> CanaryStatus {
            let entered = pass(spec, None, None, 100, &[]);
            assert_eq!(
                reasons(&entered),
                [
                    ("CanaryStarted", "user"),
                    ("CanaryAnalysisStarted", "watch")
                ],
                "the ready 50% opens the analysis step"
            );
            assert_eq!(entered.weight, 50);
            assert_eq!(
                entered.requeue_after,
                Some(1),
                "first measurement due at once"
            );
            entered.status.unwrap()
        }

        #[test]
        fn a_passing_analysis_moves_on_by_analysis_after_its_count() {
            let spec = spec_steps();
            let status = analysing(&spec);
            let first = measure(&spec, None, &status, 101, Ok(0.01));
            assert_eq!(
                first.iter().map(|m| m.due).collect::<Vec<_>>(),
                [Due {
                    subject: Subject::Step(1),
                    metric: 0
                }]
            );
            let once = pass(&spec, None, Some(&status), 101, &first);
            assert!(once.transitions.is_empty());
            assert_eq!(once.requeue_after, Some(10));
            let once = once.status.unwrap();
            assert!(
                measure(&spec, None, &once, 110, Ok(0.01)).is_empty(),
                "the next is due 10 s after the first, not before: a restart repeats nothing"
            );
            let twice = measure(&spec, None, &once, 111, Ok(0.02));
            let done = pass(&spec, None, Some(&once), 111, &twice);
            assert_eq!(
                reasons(&done),
                [
                    ("CanaryAnalysisPassed", "analysis"),
                    ("CanaryStepStarted", "analysis")
                ]
            );
            assert_eq!(done.weight, 100);
            let metric = &done
                .status
                .as_ref()
                .unwrap()
                .analysis
                .as_ref()
                .unwrap()
                .metrics[0];
            let numbers: Vec<(i32, Option<&str>)> = metric
                .measurements
                .iter()
                .map(|m| (m.number, m.value.as_deref()))
                .collect();
            assert_eq!(numbers, [(1, Some("0.01")), (2, Some("0.02"))]);
        }

        #[test]
        fn a_failing_measurement_aborts_naming_the_metric_and_value() {
            let spec = spec_steps();
            let status = analysing(&spec);
            let bad = measure(&spec, None, &status, 101, Ok(0.25));
            let aborted = pass(&spec, None, Some(&status), 101, &bad);
            assert_eq!(reasons(&aborted), [("CanaryAnalysisFailed", "analysis")]);
            assert!(aborted.aborting);
            assert_eq!(aborted.weight, 0);
            let stored = aborted.status.unwrap();
            assert_eq!(stored.phase, Some(CanaryPhase::Aborted));
            let message = stored.message.clone().unwrap();
            assert!(
                message.contains("error-rate") && message.contains("0.25"),
                "{message}"
            );
            assert!(
                due(&spec, None, Some(&stored), false, 200).is_empty(),
                "nothing is measured once aborted"
            );
        }

        #[test]
        fn an_inconclusive_analysis_waits_for_promote_or_abort() {
            let spec = spec_steps();
            let status = analysing(&spec);
            let none = measure(&spec, None, &status, 101, Err("connection refused".into()));
            let held = pass(&spec, None, Some(&status), 101, &none);
            assert_eq!(reasons(&held), [("CanaryAnalysisInconclusive", "analysis")]);
            assert_eq!(held.weight, 50);
            let held = held.status.unwrap();
            assert_eq!(held.phase, Some(CanaryPhase::Paused));
            assert!(has_gate(&held, PauseReason::CanaryAnalysisInconclusive));
            assert_eq!(
                held.analysis.as_ref().unwrap().metrics[0].measurements[0].phase,
                MeasurementPhase::Inconclusive
            );
            let still = pass(&spec, None, Some(&held), 500, &[]);
            assert!(still.transitions.is_empty(), "waits without a deadline");
            assert!(due(&spec, None, Some(&held), false, 500).is_empty());

            let promoted = pass(&spec, None, Some(&promote(&held)), 501, &[]);
            assert_eq!(
                reasons(&promoted),
                [
                    ("CanaryAnalysisPassed", "user"),
                    ("CanaryStepStarted", "user")
                ]
            );
            assert_eq!(promoted.weight, 100);

            let abort = CanaryStatus {
                abort: Some(true),
                ..held
            };
            let aborted = pass(&spec, None, Some(&abort), 501, &[]);
            assert_eq!(reasons(&aborted), [("CanaryAborted", "user")]);
            assert!(aborted.aborting);
        }

        #[test]
        fn a_background_analysis_aborts_wherever_the_canary_is() {
            // No analysis step: the background analysis judges the whole canary.
            let spec = vec![CanaryStep {
                set_weight: Some(50),
                ..CanaryStep::default()
            }];
            let mut background = analysis(2);
            background.metrics[0].count = None; // as long as the canary lasts
            let started = pass(&spec, Some(&background), None, 100, &[]);
            let status = started.status.unwrap();
            assert_eq!(
                status.background_analysis.as_ref().map(|a| a.step),
                Some(None)
            );
            let good = measure(&spec, Some(&background), &status, 100, Ok(0.01));
            assert_eq!(good.len(), 1);
            let on = pass(&spec, Some(&background), Some(&status), 100, &good);
            assert!(!on.aborting);
            let on = on.status.unwrap();
            let bad = measure(&spec, Some(&background), &on, 110, Ok(0.5));
            let aborted = pass(&spec, Some(&background), Some(&on), 110, &bad);
            assert_eq!(reasons(&aborted), [("CanaryAnalysisFailed", "analysis")]);
            assert!(aborted.aborting);
            let message = aborted.status.unwrap().message.unwrap();
            assert!(
                message.starts_with("background analysis failed"),
                "{message}"
            );
        }

        #[test]
        fn an_inconclusive_background_analysis_holds_the_canary_until_promoted() {
            let spec = vec![CanaryStep {
                set_weight: Some(50),
                ..CanaryStep::default()
            }];
            let mut background = analysis(5);
            background.metrics[0].inconclusive_limit = Some(0);
            let started = pass(&spec, Some(&background), None, 100, &[])
                .status
                .unwrap();
            assert_eq!(started.current_step, 0, "the 50% is not Ready yet");
            let none = measure(
                &spec,
                Some(&background),
                &started,
                100,
                Err("timeout".into()),
            );
            let held = step(&CanaryInput {
                steps: BACKGROUND_STEPS,
                spec_steps: &spec,
                background: Some(&background),
                measured: &none,
                ..input(Some(&started), 100, true)
            });
            assert_eq!(reasons(&held), [("CanaryAnalysisInconclusive", "analysis")]);
            assert_eq!(
                held.weight, 50,
                "held at its step although the target is ready"
            );
            let held = held.status.unwrap();
            assert_eq!(held.current_step, 0);
            let resumed = pass(&spec, Some(&background), Some(&promote(&held)), 120, &[]);
            assert_eq!(
                reasons(&resumed)[0],
                ("CanaryResumed", "user"),
                "the background analysis runs on after a promote"
            );
            let resumed = resumed.status.unwrap();
            let state = resumed.background_analysis.as_ref().unwrap();
            assert_eq!(state.phase, AnalysisPhase::Running);
            assert_eq!(state.metrics[0].inconclusive, 0);
            assert_eq!(state.metrics[0].measured, 1, "the history is kept");
        }

        #[test]
        fn nothing_is_measured_while_the_service_is_paused() {
            let spec = spec_steps();
            let status = analysing(&spec);
            assert!(due(&spec, None, Some(&status), true, 500).is_empty());
        }
    }

    #[test]
    fn a_completion_an_abort_and_a_promoted_pause_end_a_duration() {
        let transition = |reason, trigger| Transition {
            reason,
            message: String::new(),
            trigger,
            step: 1,
        };
        let ends = |reason, trigger| transition(reason, trigger).ends(Some(100), Some(160), 200);
        assert_eq!(
            ends(TransitionReason::CanaryCompleted, Trigger::Watch),
            Some(Ended::Rollout {
                completed: true,
                seconds: 100.0
            })
        );
        for reason in [
            TransitionReason::CanaryAborted,
            TransitionReason::CanaryAnalysisFailed,
        ] {
            assert_eq!(
                ends(reason, Trigger::Analysis),
                Some(Ended::Rollout {
                    completed: false,
                    seconds: 100.0
                })
            );
        }
        assert_eq!(
            ends(TransitionReason::CanaryResumed, Trigger::User),
            Some(Ended::ManualPause { seconds: 40.0 })
        );
        assert_eq!(
            ends(TransitionReason::CanaryResumed, Trigger::Timer),
            None,
            "a timed pause"
        );
        assert_eq!(ends(TransitionReason::CanaryPaused, Trigger::Watch), None);
        // A clock behind the stored times never makes a negative duration.
        assert_eq!(
            transition(TransitionReason::CanaryCompleted, Trigger::Watch).ends(
                Some(300),
                None,
                200
            ),
            Some(Ended::Rollout {
                completed: true,
                seconds: 0.0
            })
        );
        assert_eq!(
            transition(TransitionReason::CanaryCompleted, Trigger::Watch).ends(None, None, 200),
            None,
            "no revision time, nothing to say"
        );
    }
}
