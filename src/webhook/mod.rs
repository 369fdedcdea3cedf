//! Admission: the four webhooks of docs/admission.md, as pure functions from an AdmissionReview
//! body to an AdmissionReview response, built on the shared defaulting and validation of
//! `crate::api`. The HTTPS server in `crate::server` only moves bytes.

pub mod config;
#[cfg(test)]
mod oracle;
pub mod sidecar;

use std::sync::LazyLock;

use kube::core::admission::Operation;
use memchr::memmem;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::admission::defaulting::{PatchWriter, write_defaults, write_view_defaults};
use crate::admission::hook::Hook;
use crate::admission::scan;
use crate::admission::validation::{
    FieldError, OwnedKind, Report, View, validate_json, validate_view,
};
use crate::api::GROUP;
use crate::api::borrowed::Str;
use crate::api::podgroup::PodGroupCrds;
use crate::api::tenancy::ConfiguredEndpoint;
use crate::metrics::AdmissionOutcome;

/// The sidecar annotation's name without its '/', which JSON may write escaped: a mutating
/// review that holds it reads the object whole.
static SIDECAR: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new("sidecar-injection"));

/// A body that cannot be answered with an AdmissionReview (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum BadRequest {
    /// Not JSON, or not shaped like an AdmissionReview.
    #[error("the request body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    NotAdmissionReview(String),
    /// An AdmissionReview without `request`.
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// How a review was decided (for logs and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed unchanged.
    Allowed,
    /// Allowed with a JSON patch.
    Patched,
    /// Denied.
    Denied,
}

impl From<Verdict> for AdmissionOutcome {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Allowed => Self::Allowed,
            Verdict::Patched => Self::Patched,
            Verdict::Denied => Self::Denied,
        }
    }
}

/// One answered review: the AdmissionReview to send back, and how it was decided.
#[derive(Debug)]
pub struct Answer {
    /// The response body (an `admission.k8s.io/v1` AdmissionReview).
    pub json: Vec<u8>,
    /// How it was decided.
    pub verdict: Verdict,
}

/// What a webhook decided about one request, before it is rendered.
#[derive(Debug, Default)]
struct Decision {
    /// Why the request is denied (`None`: allowed).
    denial: Option<Denial>,
    /// The JSON patch to apply (mutating webhooks).
    patch: Option<Vec<u8>>,
    warnings: Vec<String>,
}

/// A denial's `status`.
#[derive(Debug)]
struct Denial {
    message: String,
    /// A broken rule: code 422, reason `Invalid` (otherwise the API server's defaults).
    invalid: bool,
}

impl Decision {
    fn allowed(warnings: Vec<String>) -> Self {
        Self {
            warnings,
            ..Self::default()
        }
    }

    /// What the cluster adds to validation of `view` (an update of the stored `old`):
    /// analysis metrics naming an endpoint that is not configured, or a query their
    /// endpoint cannot scope to the namespace, are denied; gang strategies whose PodGroup CRD
    /// is missing are warned about.
    fn check_cluster(
        &mut self,
        kind: OwnedKind,
        view: &View<'_>,
        old: Option<&str>,
        cluster: Cluster<'_>,
    ) {
        self.deny_endpoint_errors(kind, view, old, cluster.endpoints);
        self.say_missing_crds(view, cluster.crds);
    }

    /// Denies metrics naming an endpoint the operator is not configured with, or a query
    /// it cannot scope — ratcheted like every rule: an update may keep what the stored object
    /// already had (an endpoint the admin has since removed or scoped must not block a
    /// finalizer's removal; the controller refuses to send such a query).
    fn deny_endpoint_errors(
        &mut self,
        kind: OwnedKind,
        view: &View<'_>,
        old: Option<&str>,
        endpoints: Option<&[ConfiguredEndpoint]>,
    ) {
        let Some(endpoints) = endpoints.filter(|_| self.denial.is_none()) else {
            return;
        };
        let mut unknown = view.endpoint_errors(endpoints);
        if !unknown.is_empty()
            && let Some(old) = old.and_then(|json| View::parse(kind, json))
        {
            let before = old.endpoint_errors(endpoints);
            unknown.retain(|e| !before.contains(e));
        }
        let unknown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        if !unknown.is_empty() {
            *self = Decision {
                denial: Some(Denial {
                    message: unknown.join("; "),
                    invalid: true,
                }),
                ..Decision::default()
            };
        }
    }

    /// Warns, when the object is allowed, of each gang strategy whose scheduler's PodGroup
    /// CRD the cluster is known not to serve: its pods will run without the gang guarantee.
    fn say_missing_crds(&mut self, view: &View<'_>, crds: PodGroupCrds) {
        if self.denial.is_some() || !crds.lacks_any() {
            return;
        }
        for (path, scheduler) in view.gang_schedulers() {
            if crds.lacks(scheduler) {
                self.warnings.push(format!(
                    "{path}: the cluster does not serve {} (the PodGroup CRD); the pods are \
                     created without the gang guarantee until it is installed",
                    scheduler.crd_name()
                ));
            }
        }
    }

    fn verdict(&self) -> Verdict {
        match (&self.denial, &self.patch) {
            (Some(_), _) => Verdict::Denied,
            (None, Some(_)) => Verdict::Patched,
            (None, None) => Verdict::Allowed,
        }
    }

    /// The AdmissionReview answering the request `uid`, written straight into bytes: the
    /// patch base64-encoded, as the API server reads `[]byte`.
    fn render(&self, uid: &str) -> Vec<u8> {
        let patch_len = self.patch.as_ref().map_or(0, |p| base64_len(p.len()));
        let mut out = Vec::with_capacity(160 + uid.len() + patch_len);
        out.extend_from_slice(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
        );
        write_json_string(&mut out, uid);
        match &self.denial {
            None => out.extend_from_slice(br#","allowed":true,"status":{}"#),
            Some(denial) => {
                out.extend_from_slice(br#","allowed":false,"status":{"#);
                if denial.invalid {
                    out.extend_from_slice(br#""code":422,"reason":"Invalid","#);
                }
                out.extend_from_slice(br#""message":"#);
                write_json(&mut out, &denial.message);
                out.push(b'}');
            }
        }
        if let Some(patch) = &self.patch {
            out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
            write_base64(&mut out, patch);
            out.push(b'"');
        }
        if !self.warnings.is_empty() {
            out.extend_from_slice(br#","warnings":"#);
            write_json(&mut out, &self.warnings);
        }
        out.extend_from_slice(b"}}");
        out
    }
}

/// Length of `bytes` bytes base64-encoded (padded).
fn base64_len(bytes: usize) -> usize {
    bytes.div_ceil(3) * 4
}

/// Appends `bytes` base64-encoded (standard alphabet, padded), the API server's wire format
/// for `[]byte`: every three bytes are two 12-bit halves, each looked up as two characters.
fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    /// The two characters of every 12-bit value, as a little-endian `u16` (8 KiB).
    static PAIRS: [u16; 4096] = {
        let mut pairs = [0; 4096];
        let mut n = 0;
        while n < 4096 {
            pairs[n] = ALPHABET[n >> 6] as u16 | (ALPHABET[n & 63] as u16) << 8;
            n += 1;
        }
        pairs
    };
    let pair = |n: u64| u64::from(PAIRS[(n & 0xfff) as usize]);
    let start = out.len();
    out.resize(start + base64_len(bytes.len()), b'=');
    let out = &mut out[start..];
    // Six bytes (read as eight, while eight are there) are four 12-bit values, eight
    // characters written at once.
    let words = bytes.len().saturating_sub(2) / 6;
    for (i, chars) in out.chunks_exact_mut(8).take(words).enumerate() {
        let word = u64::from_be_bytes(bytes[i * 6..i * 6 + 8].try_into().expect("eight bytes"));
        let n = word >> 16;
        let packed = pair(n >> 36) | pair(n >> 24) << 16 | pair(n >> 12) << 32 | pair(n) << 48;
        chars.copy_from_slice(&packed.to_le_bytes());
    }
    // The rest three bytes at a time; one or two bytes left are two or three characters
    // (the '=' padding is there).
    let (bytes, out) = (&bytes[words * 6..], &mut out[words * 8..]);
    for (chunk, quad) in bytes.chunks(3).zip(out.chunks_exact_mut(4)) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0, |n, (i, b)| n | u64::from(*b) << (16 - 8 * i));
        let characters = (pair(n >> 12) | pair(n) << 16).to_le_bytes();
        let written = chunk.len() + 1;
        quad[..written].copy_from_slice(&characters[..written]);
    }
}

/// Appends `text` as a JSON string: copied as it is unless it holds what JSON escapes.
fn write_json_string(out: &mut Vec<u8>, text: &str) {
    if text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        write_json(out, text);
    } else {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// Appends `value` as JSON (strings escaped).
fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("strings and lists of strings serialize");
}

/// An AdmissionReview as the webhooks read it: strings borrowed from the body, the objects
/// left as JSON for the rules to read. What kube's `AdmissionReview` requires is required
/// here too (so the pinned bad requests stay bad requests); what is inside `userInfo`, which
/// no decision reads, is not checked.
///
/// `O` is how the object is read: as JSON ([`ObjectJson`], the general path), or straight
/// into the rules' view in the same pass ([`review_in_one_pass`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "O: Deserialize<'de>"))]
struct ReviewView<'a, O> {
    #[serde(borrow)]
    api_version: Str<'a>,
    #[serde(borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    request: Option<RequestView<'a, O>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "O: Deserialize<'de>"))]
struct RequestView<'a, O> {
    #[serde(borrow)]
    uid: Str<'a>,
    #[serde(borrow)]
    kind: KindView<'a>,
    #[allow(dead_code)] // required, as kube requires it; not read
    #[serde(borrow)]
    resource: ResourceView<'a>,
    #[serde(borrow, default)]
    name: Str<'a>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
    operation: Operation,
    #[allow(dead_code)]
    user_info: IgnoredAny,
    #[serde(default)]
    object: Option<O>,
    #[serde(borrow, default)]
    old_object: Option<ObjectJson<'a>>,
    #[allow(dead_code)]
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
struct KindView<'a> {
    #[serde(borrow)]
    group: Str<'a>,
    #[serde(borrow)]
    version: Str<'a>,
    #[serde(borrow)]
    kind: Str<'a>,
}

#[derive(Deserialize)]
#[allow(dead_code)] // required, as kube requires them; not read
struct ResourceView<'a> {
    #[serde(borrow)]
    group: Str<'a>,
    #[serde(borrow)]
    version: Str<'a>,
    #[serde(borrow)]
    resource: Str<'a>,
}

/// A JSON object, unparsed.
struct ObjectJson<'a>(&'a RawValue);

impl<'de: 'a, 'a> Deserialize<'de> for ObjectJson<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <&'a RawValue>::deserialize(deserializer)?;
        if raw.get().starts_with('{') {
            Ok(Self(raw))
        } else {
            Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Other(raw.get()),
                &"an object",
            ))
        }
    }
}

/// `T` read only from a JSON object, as [`ObjectJson`] requires (serde also reads a struct
/// from an array).
struct MapOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for MapVisitor<T> {
            type Value = MapOnly<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(MapOnly)
            }
        }
        deserializer.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

/// What the webhooks know of the cluster beyond the object under review.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cluster<'a> {
    /// The PodGroup CRDs the cluster serves: an allowed object whose gang scheduler's CRD
    /// is missing is warned about.
    pub crds: PodGroupCrds,
    /// The analysis endpoints the operator is configured with (`None`: not known, as in
    /// `squall lint`): a metric naming another is denied.
    pub endpoints: Option<&'a [ConfiguredEndpoint]>,
}

/// Answers one AdmissionReview body for `hook`, knowing nothing of the cluster.
pub fn review(hook: Hook, body: &[u8]) -> Result<Answer, BadRequest> {
    review_knowing(hook, body, Cluster::default())
}

/// Answers one AdmissionReview body for `hook`, knowing what `cluster` says.
pub fn review_knowing(hook: Hook, body: &[u8], cluster: Cluster<'_>) -> Result<Answer, BadRequest> {
    review_scanned(hook, body, cluster)
        .or_else(|| review_in_one_pass(hook, body, cluster))
        .map_or_else(|| review_in_general(hook, body, cluster), Ok)
}

/// Whether the fast readings of `body` — the scanner's and serde's one pass — answer exactly
/// as the general path does wherever they answer. For the fuzz target, which holds them to it
/// on any body.
#[doc(hidden)]
pub fn fast_paths_agree(hook: Hook, body: &[u8]) -> bool {
    let cluster = Cluster::default();
    let general = review_in_general(hook, body, cluster);
    let fast = [
        review_scanned(hook, body, cluster),
        review_in_one_pass(hook, body, cluster),
    ];
    fast.into_iter().flatten().all(
        |answer| matches!(&general, Ok(g) if g.json == answer.json && g.verdict == answer.verdict),
    )
}

/// [`review`] of any body: the review read first with its objects as JSON, which are then
/// read for the rules.
fn review_in_general(hook: Hook, body: &[u8], cluster: Cluster<'_>) -> Result<Answer, BadRequest> {
    let review: ReviewView<'_, ObjectJson<'_>> =
        serde_json::from_slice(body).map_err(|e| BadRequest::NotAdmissionReview(e.to_string()))?;
    if review.kind != "AdmissionReview" || review.api_version != "admission.k8s.io/v1" {
        return Err(BadRequest::NotAdmissionReview(format!(
            "apiVersion {:?} kind {:?}; expected admission.k8s.io/v1 AdmissionReview",
            review.api_version, review.kind
        )));
    }
    let request = review.request.ok_or(BadRequest::NoRequest)?;
    // The general path is the one that logs (odd kinds, unreadable objects): every line
    // names the object. (The one-pass path logs nothing but an oversized patch, which names
    // it too; a span on every ordinary review would cost each `kubectl apply`.)
    let span = tracing::info_span!(
        "admission",
        webhook = hook.name(),
        kind = %request.kind.kind,
        namespace = request.namespace.as_deref().unwrap_or_default(),
        name = %request.name,
    );
    let decision = span.in_scope(|| decide(hook, &request, cluster));
    Ok(answer(hook, body.len(), decision, request.names()))
}

/// The review of an ordinary create or update of the webhook's kind, read in one pass: the
/// object straight into the rules' view, never held as JSON first. `None` for anything else
/// — another kind or operation, an object the view cannot read or over the list bounds, the
/// runtime-sidecar annotation — which the general path of [`review`] answers; where this
/// answers, it answers as that path would (the pinned admission answers and a property test
/// hold both to it).
fn review_in_one_pass(hook: Hook, body: &[u8], cluster: Cluster<'_>) -> Option<Answer> {
    use crate::admission::view::{ObjectView, RoleSetView, StormServiceView};
    // Checked once here, so that no string the view borrows is checked again.
    let body = std::str::from_utf8(body).ok()?;
    let kind = hook.owned_kind();
    if hook.is_mutating() {
        // Sidecar injection reads the object whole.
        if kind == OwnedKind::StormService && SIDECAR.find(body.as_bytes()).is_some() {
            return None;
        }
    } else if names_stored_object(body.as_bytes()) {
        // An update: the rules compare the spec's JSON with the stored object's.
        return in_one_pass(hook, body, cluster, |o: MapOnly<ObjectView<'_>>| {
            View::of_object(kind, o.0)
        });
    }
    match kind {
        OwnedKind::StormService => {
            in_one_pass(hook, body, cluster, |o: MapOnly<StormServiceView<'_>>| {
                View::of_stormservice(o.0)
            })
        }
        OwnedKind::RoleSet => in_one_pass(hook, body, cluster, |o: MapOnly<RoleSetView<'_>>| {
            View::of_roleset(o.0)
        }),
        OwnedKind::PodSet => None,
    }
}

/// [`review_in_one_pass`] with the object read as `O` and made a view by `view`.
fn in_one_pass<'a, O: Deserialize<'a>>(
    hook: Hook,
    body: &'a str,
    cluster: Cluster<'_>,
    view: impl FnOnce(O) -> Option<View<'a>>,
) -> Option<Answer> {
    let review: ReviewView<'a, O> = serde_json::from_str(body).ok()?;
    if review.kind != "AdmissionReview" || review.api_version != "admission.k8s.io/v1" {
        return None;
    }
    let mut request = review.request?;
    if !matches!(request.operation, Operation::Create | Operation::Update)
        || request.kind.group != GROUP
        || request.kind.kind != hook.kind()
    {
        return None;
    }
    let view = view(request.object.take()?)?;
    let old = request.old_object.as_ref().map(|o| o.0.get());
    let decision = decide_view(hook, body.len(), &view, old, cluster)?;
    Some(answer(hook, body.len(), decision, request.names()))
}

/// The decision on the `view` of a review's object of `body_bytes` (an update of `old`), for
/// both one-pass readings; `None` where the general path must decide.
fn decide_view(
    hook: Hook,
    body_bytes: usize,
    view: &View<'_>,
    old: Option<&str>,
    cluster: Cluster<'_>,
) -> Option<Decision> {
    if hook.is_mutating() {
        let mut patch = PatchWriter::with_capacity(body_bytes);
        let warnings = write_view_defaults(view, &mut patch).ok()?;
        Some(Decision::from(Mutation::of(patch, warnings)))
    } else {
        if old.is_some() && view.object.spec.is_none() {
            return None; // read without the spec's JSON, which an update compares
        }
        let mut decision = Decision::from(validate_view(hook.owned_kind(), view, old));
        decision.check_cluster(hook.owned_kind(), view, old, cluster);
        Some(decision)
    }
}

/// The review of an ordinary create of the webhook's kind (or an update, for a mutating
/// webhook, which does not read the stored object), read by [`crate::admission::scan`]: a strict
/// reader of the common shape that gives up on anything else, which [`review_in_one_pass`]
/// then reads with serde. Where it answers, it answers as serde's readings would (a property
/// test holds it to that).
fn review_scanned(hook: Hook, body: &[u8], cluster: Cluster<'_>) -> Option<Answer> {
    let body = std::str::from_utf8(body).ok()?;
    let kind = hook.owned_kind();
    if hook.is_mutating() {
        if kind == OwnedKind::StormService && SIDECAR.find(body.as_bytes()).is_some() {
            return None; // sidecar injection reads the object whole
        }
    } else if names_stored_object(body.as_bytes()) {
        // An update compares with the stored object, which serde reads: found before the
        // object is scanned for nothing.
        return None;
    }
    let scanned = scan::review(hook, body)?;
    let names = Names {
        uid: scanned.uid,
        kind: scanned.kind,
        namespace: scanned.namespace,
        name: scanned.name,
    };
    let decision = decide_view(hook, body.len(), &scanned.view, None, cluster)?;
    Some(answer(hook, body.len(), decision, names))
}

/// What an answer and its log lines name of the request.
#[derive(Clone, Copy)]
struct Names<'a> {
    uid: &'a str,
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
}

impl<O> RequestView<'_, O> {
    fn names(&self) -> Names<'_> {
        Names {
            uid: &self.uid,
            kind: &self.kind.kind,
            namespace: self.namespace.as_deref().unwrap_or_default(),
            name: &self.name,
        }
    }
}

/// Whether the body has an `oldObject` that is a JSON object: which one-pass reading to try
/// for validation (a wrong guess only sends the review down the general path).
fn names_stored_object(body: &[u8]) -> bool {
    const KEY: &str = r#""oldObject""#;
    static FINDER: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(KEY));
    FINDER.find_iter(body).any(|at| {
        let mut rest = body[at + KEY.len()..].trim_ascii_start();
        if rest.first() != Some(&b':') {
            return false;
        }
        rest = rest[1..].trim_ascii_start();
        rest.first() == Some(&b'{')
    })
}

/// The answer to a decided review of `request_bytes`, to the request `names`.
fn answer(hook: Hook, request_bytes: usize, mut decision: Decision, request: Names<'_>) -> Answer {
    let patch_bytes = decision.patch.as_ref().map_or(0, Vec::len);
    if patch_bytes > request_bytes + PATCH_HEADROOM {
        // Defaulting adds a few fields per role and the bounded lists keep it small; this
        // is the backstop that keeps a response from outgrowing its request.
        tracing::warn!(
            webhook = hook.name(),
            kind = request.kind,
            namespace = request.namespace,
            name = request.name,
            patch_bytes,
            request_bytes,
            "patch too large; denied"
        );
        decision = Decision {
            denial: Some(Denial {
                message: format!(
                    "the defaults for this object make a patch of {patch_bytes} bytes, more than \
                     the request's {request_bytes} bytes plus {} KiB",
                    PATCH_HEADROOM >> 10
                ),
                invalid: false,
            }),
            ..Decision::default()
        };
    }
    Answer {
        json: decision.render(request.uid),
        verdict: decision.verdict(),
    }
}

/// How much larger than its request a mutating webhook's patch may be: the runtime sidecar
/// and the defaults of a full role list fit with room to spare.
pub const PATCH_HEADROOM: usize = 64 << 10;

fn decide(hook: Hook, req: &RequestView<'_, ObjectJson<'_>>, cluster: Cluster<'_>) -> Decision {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Decision::default();
    }
    if req.kind.group != GROUP || req.kind.kind != hook.kind() {
        let warning = format!(
            "squall's {} webhook does not handle {}/{} {}; allowed unchecked",
            hook.name(),
            req.kind.group,
            req.kind.version,
            req.kind.kind
        );
        tracing::warn!(webhook = hook.name(), kind = %req.kind.kind, "unexpected kind");
        return Decision::allowed(vec![warning]);
    }
    let Some(object) = &req.object else {
        let warning = format!(
            "{}: the request has no object; allowed unchecked",
            hook.name()
        );
        return Decision::allowed(vec![warning]);
    };
    let kind = hook.owned_kind();
    if hook.is_mutating() {
        match mutate(kind, object.0.get()) {
            Ok(mutation) => Decision::from(mutation),
            Err(error) => {
                // The API server's schema validation reports the real problem.
                tracing::info!(webhook = hook.name(), %error, "object does not parse; allowed without defaults");
                Decision::default()
            }
        }
    } else {
        let old = req.old_object.as_ref().map(|o| o.0.get());
        let json = object.0.get();
        let mut decision = Decision::from(validate_json(kind, json, old));
        // The view is read again only when the cluster has something to say about it.
        let concerned = cluster.crds.lacks_any() && json.contains("SchedulingStrategy")
            || cluster.endpoints.is_some() && json.contains("analysis");
        if concerned && let Some(view) = View::parse_once(kind, json) {
            decision.check_cluster(kind, &view, old, cluster);
        }
        decision
    }
}

impl From<Mutation> for Decision {
    fn from(mutation: Mutation) -> Self {
        Decision {
            patch: (mutation.operations > 0).then_some(mutation.patch),
            ..Decision::allowed(mutation.warnings)
        }
    }
}

impl From<Report> for Decision {
    fn from(report: Report) -> Self {
        let denial = (!report.is_valid()).then(|| Denial {
            message: report.error_message(),
            invalid: true,
        });
        Decision {
            denial,
            ..Decision::allowed(report.warnings)
        }
    }
}

/// What the mutating webhook does to an object: a JSON patch of `add` operations.
#[derive(Debug)]
pub struct Mutation {
    /// The JSON patch (`[]` when there is nothing to add).
    pub patch: Vec<u8>,
    /// How many operations it holds.
    pub operations: usize,
    /// Warnings for the user.
    pub warnings: Vec<String>,
}

/// The mutating webhook's patch and warnings for the JSON of a StormService or a RoleSet:
/// the defaults of docs/admission.md#defaults, then (StormService) the runtime sidecar — decided on
/// the object as sent, which is never copied or compared. An object that does not parse gets an
/// error (and so no patch).
pub fn mutate(kind: OwnedKind, json: &str) -> Result<Mutation, FieldError> {
    let mut patch = PatchWriter::with_capacity(json.len());
    let mut warnings = write_defaults(kind, json, &mut patch)?;
    // The annotation's name without its '/', which JSON may write escaped.
    if kind == OwnedKind::StormService && json.contains("sidecar-injection") {
        // Opted in (or misspelled) by annotation: the rare case reads the object whole.
        let object: Value = serde_json::from_str(json).expect("a parsed view is JSON");
        let (additions, warning) = sidecar::injection(&object);
        for addition in &additions {
            patch.push(addition);
        }
        warnings.extend(warning);
    }
    Ok(Mutation::of(patch, warnings))
}

impl Mutation {
    fn of(patch: PatchWriter, warnings: Vec<String>) -> Self {
        Mutation {
            operations: patch.operations(),
            patch: patch.into_bytes(),
            warnings,
        }
    }
}

/// [`mutate`] of a raw object of an owned kind (its `apiVersion` and `kind` say which).
pub fn mutation(object: &Value) -> Result<Mutation, FieldError> {
    let kind = OwnedKind::of(object).unwrap_or(OwnedKind::PodSet);
    mutate(kind, &object.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VERSION;
    use crate::api::tenancy::Tenancy;
    use crate::webhook::sidecar::ANNOTATION_SIDECAR_INJECTION;
    use serde_json::json;

    fn review_body(hook: Hook, operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        let kind = hook.kind();
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": GROUP, "version": VERSION, "kind": kind},
                "resource": {"group": GROUP, "version": VERSION, "resource": hook.resource()},
                "name": "x", "namespace": "default",
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": object,
                "oldObject": old,
                "dryRun": false
            }
        }))
        .unwrap()
    }

    fn roleset(roles: Value) -> Value {
        json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
               "metadata": {"name": "x", "namespace": "default"}, "spec": {"roles": roles}})
    }

    /// The answer's `response`, its patch decoded, and the verdict.
    fn response(hook: Hook, body: &[u8]) -> (Value, Option<json_patch::Patch>, Verdict) {
        use base64::Engine;
        let answer = review(hook, body).unwrap();
        let mut review: Value = serde_json::from_slice(&answer.json).unwrap();
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        let response = review["response"].take();
        let patch = response["patch"].as_str().map(|text| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        });
        (response, patch, answer.verdict)
    }

    /// serde reads `-0` as a float, so an integer field written `-0` is refused by the
    /// general path; the scanner must not read it as 0.
    #[test]
    fn a_negative_zero_integer_is_answered_as_the_general_path_answers_it() {
        let seeds = [
            (
                Hook::ValidateStormService,
                include_str!("../../fuzz/seeds/review/stormservice-create.json"),
            ),
            (
                Hook::MutateStormService,
                include_str!("../../fuzz/seeds/review/stormservice-create.json"),
            ),
            (
                Hook::ValidateRoleSet,
                include_str!("../../fuzz/seeds/review/roleset-create.json"),
            ),
            (
                Hook::MutateRoleSet,
                include_str!("../../fuzz/seeds/review/roleset-create.json"),
            ),
        ];
        let mut checked = 0;
        for (hook, seed) in seeds {
            for field in [
                "\"replicas\": ",
                "\"upgradeOrder\": ",
                "\"setWeight\": ",
                "\"podGroupSize\": ",
                "\"minMember\": ",
                "\"partition\": ",
            ] {
                let Some(at) = seed.find(field) else { continue };
                let start = at + field.len();
                let end = start + seed[start..].find(|c: char| !c.is_ascii_digit()).unwrap();
                let body = format!("{}-0{}", &seed[..start], &seed[end..]);
                assert!(
                    fast_paths_agree(hook, body.as_bytes()),
                    "{hook:?}: {field}-0"
                );
                checked += 1;
            }
        }
        assert!(checked >= 6, "only {checked} fields");
    }

    #[test]
    fn mutate_answers_with_a_json_patch_and_echoes_the_uid() {
        let body = review_body(
            Hook::MutateRoleSet,
            "CREATE",
            roleset(json!([{"name": "a"}])),
            None,
        );
        let (resp, patch, verdict) = response(Hook::MutateRoleSet, &body);
        assert_eq!(verdict, Verdict::Patched);
        assert_eq!(resp["allowed"], true);
        assert_eq!(resp["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(resp["patchType"], "JSONPatch");
        let patch = patch.unwrap();
        let mut object = roleset(json!([{"name": "a"}]));
        json_patch::patch(&mut object, &patch).unwrap();
        assert_eq!(object["spec"]["roles"][0]["upgradeOrder"], 0);
        // Replaying the stored object gives an empty patch.
        assert_eq!(mutation(&object).unwrap().operations, 0);
    }

    #[test]
    fn the_sidecar_annotation_is_found_however_its_slash_is_written() {
        let json = |key: &str| {
            format!(
                r#"{{"metadata": {{"name": "s", "annotations": {{"{key}": "true"}}}},
                    "spec": {{"selector": {{"matchLabels": {{"a": "b"}}}},
                             "template": {{"spec": {{"roles": [{{"name": "r",
                                 "template": {{"spec": {{"containers": [{{"name": "e", "image": "vllm"}}]}}}}}}]}}}}}}}}"#
            )
        };
        let plain = mutate(
            OwnedKind::StormService,
            &json("model.aibrix.ai/sidecar-injection"),
        )
        .unwrap();
        let escaped = mutate(
            OwnedKind::StormService,
            &json(r"model.aibrix.ai\/sidecar-injection"),
        )
        .unwrap();
        assert!(
            String::from_utf8_lossy(&plain.patch).contains(sidecar::SIDECAR_NAME),
            "injected"
        );
        assert_eq!(plain.patch, escaped.patch);
    }

    #[test]
    fn unparsable_objects_are_allowed_without_a_patch() {
        let body = review_body(
            Hook::MutateRoleSet,
            "CREATE",
            roleset(json!("not a list")),
            None,
        );
        let (resp, patch, verdict) = response(Hook::MutateRoleSet, &body);
        assert_eq!(verdict, Verdict::Allowed);
        assert!(resp["allowed"] == true && patch.is_none());
        assert!(resp.get("patchType").is_none());
    }

    #[test]
    fn validate_denies_with_field_paths_and_returns_warnings() {
        let body = review_body(
            Hook::ValidateRoleSet,
            "CREATE",
            roleset(json!([{"name": "Bad_Name", "disruptionTolerance": {}}])),
            None,
        );
        let (resp, _, verdict) = response(Hook::ValidateRoleSet, &body);
        assert_eq!(verdict, Verdict::Denied);
        assert_eq!(resp["allowed"], false);
        let message = resp["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("spec.roles[0].name: Invalid value"),
            "{message}"
        );
        assert_eq!(resp["status"]["code"], 422);
        assert_eq!(resp["status"]["reason"], "Invalid");
        assert!(
            resp["warnings"][0]
                .as_str()
                .unwrap()
                .contains("disruptionTolerance")
        );
    }

    #[test]
    fn validate_ratchets_on_update() {
        let old = roleset(json!([{"name": "Bad_Name", "replicas": 1}]));
        let new = roleset(json!([{"name": "Bad_Name", "replicas": 2}]));
        let body = review_body(Hook::ValidateRoleSet, "UPDATE", new, Some(old));
        assert_eq!(response(Hook::ValidateRoleSet, &body).2, Verdict::Allowed);
    }

    #[test]
    fn a_gang_scheduler_without_its_crd_is_warned_about_where_known() {
        use crate::api::podgroup::Scheduler;
        let object = roleset(json!([
            {"name": "a", "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
             "podGroupSize": 2, "schedulingStrategy": {"volcanoSchedulingStrategy": {}}},
            {"name": "b", "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
             "schedulingStrategy": {"godelSchedulingStrategy": {}}}
        ]));
        let warnings = |operation: &str, crds: PodGroupCrds| {
            let old = (operation == "UPDATE").then(|| object.clone());
            let body = review_body(Hook::ValidateRoleSet, operation, object.clone(), old);
            let cluster = Cluster {
                crds,
                endpoints: None,
            };
            let answer = review_knowing(Hook::ValidateRoleSet, &body, cluster).unwrap();
            assert_eq!(answer.verdict, Verdict::Allowed);
            let review: Value = serde_json::from_slice(&answer.json).unwrap();
            review["response"]["warnings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        // Both readings of a review (a create in one pass, an update through the JSON).
        for operation in ["CREATE", "UPDATE"] {
            let said = warnings(operation, PodGroupCrds::known([Scheduler::Godel]));
            assert_eq!(said.len(), 1, "{operation}: {said:?}");
            let said = said[0].as_str().unwrap();
            assert!(
                said.starts_with("spec.roles[0].schedulingStrategy.volcanoSchedulingStrategy: ")
                    && said.contains("podgroups.scheduling.volcano.sh")
                    && said.contains("without the gang guarantee"),
                "{operation}: {said}"
            );
            assert_eq!(warnings(operation, PodGroupCrds::known([])).len(), 2);
            assert!(warnings(operation, PodGroupCrds::known(Scheduler::ALL)).is_empty());
            // Nothing looked up (squall lint, a refused lookup): nothing said.
            assert!(warnings(operation, PodGroupCrds::Unknown).is_empty());
        }
        // Only the validating webhook says it (once per apply).
        let body = review_body(Hook::MutateRoleSet, "CREATE", object.clone(), None);
        let cluster = Cluster {
            crds: PodGroupCrds::known([]),
            endpoints: None,
        };
        let answer = review_knowing(Hook::MutateRoleSet, &body, cluster).unwrap();
        let review: Value = serde_json::from_slice(&answer.json).unwrap();
        assert!(review["response"]["warnings"].is_null(), "{review}");
    }

    #[test]
    fn other_kinds_are_allowed_with_a_warning() {
        let mut body: Value = serde_json::from_slice(&review_body(
            Hook::ValidateStormService,
            "CREATE",
            roleset(json!([])),
            None,
        ))
        .unwrap();
        body["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let (resp, _, verdict) = response(
            Hook::ValidateStormService,
            &serde_json::to_vec(&body).unwrap(),
        );
        assert_eq!(verdict, Verdict::Allowed);
        assert!(
            resp["warnings"][0]
                .as_str()
                .unwrap()
                .contains("does not handle apps/v1 Deployment")
        );
    }

    #[test]
    fn an_object_contradicting_the_request_kind_does_not_panic() {
        // Fuzzer finding: object.apiVersion "orchestration.aibrix.ai/v0alpha1" in a RoleSet review.
        let mut object = roleset(json!([{"name": "a"}]));
        object["apiVersion"] = json!("orchestration.aibrix.ai/v0alpha1");
        for hook in [Hook::ValidateRoleSet, Hook::MutateRoleSet] {
            let body = review_body(hook, "CREATE", object.clone(), None);
            assert_eq!(response(hook, &body).0["allowed"], true);
        }
    }

    #[test]
    fn deletes_are_allowed() {
        let body = review_body(
            Hook::ValidateRoleSet,
            "DELETE",
            Value::Null,
            Some(roleset(json!([{"name": "Bad_Name"}]))),
        );
        assert_eq!(response(Hook::ValidateRoleSet, &body).2, Verdict::Allowed);
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        for body in [
            &b"not json"[..],
            b"{}",
            b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}",
            b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}",
            b"\xff\xfe\x00",
            &[b'['; 10_000],
        ] {
            assert!(
                review(Hook::MutateStormService, body).is_err(),
                "{:?}",
                String::from_utf8_lossy(&body[..body.len().min(40)])
            );
        }
    }

    fn stormservice(annotations: Value) -> Value {
        json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
               "metadata": {"name": "s", "annotations": annotations},
               "spec": {"selector": {"matchLabels": {"app": "a"}},
                        "template": {"metadata": {"labels": {"app": "a"}},
                                     "spec": {"roles": [{"name": "prefill"}]}}}})
    }

    /// A metric naming an endpoint the operator is not configured with is denied with its
    /// field path, on both readings of a review; an update may keep what the stored object
    /// already named (ratcheting); lint (endpoints unknown) says nothing.
    #[test]
    fn an_analysis_endpoint_must_be_configured() {
        let plain = stormservice(json!({}));
        let mut object = plain.clone();
        object["spec"]["updateStrategy"] = json!({"canary": {"steps": [
            {"setWeight": 50},
            {"analysis": {"metrics": [
                {"name": "errors", "provider": {"prometheus": {"query": "up"}},
                 "successCondition": "result < 1"},
                {"name": "ttft", "provider": {"prometheus": {"endpoint": "staging", "query": "up"}},
                 "successCondition": "result < 1"}
            ]}}
        ]}});
        let verdict = |old: Option<&Value>, endpoints: Option<&[ConfiguredEndpoint]>| {
            let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
            let body = review_body(
                Hook::ValidateStormService,
                operation,
                object.clone(),
                old.cloned(),
            );
            let cluster = Cluster {
                endpoints,
                ..Cluster::default()
            };
            let answer = review_knowing(Hook::ValidateStormService, &body, cluster).unwrap();
            let review: Value = serde_json::from_slice(&answer.json).unwrap();
            (
                answer.verdict,
                review["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        let scoped = |name: &str| ConfiguredEndpoint {
            name: name.into(),
            tenancy: Tenancy::default(),
        };
        let both = [scoped("default"), scoped("staging")];
        let default_only = &both[..1];
        // A create (one pass) and an update adding the analysis (through the JSON).
        for old in [None, Some(&plain)] {
            assert_eq!(verdict(old, None).0, Verdict::Allowed, "{old:?}");
            assert_eq!(verdict(old, Some(&both)).0, Verdict::Allowed, "{old:?}");
            let (denied, message) = verdict(old, Some(default_only));
            assert_eq!(denied, Verdict::Denied, "{old:?}");
            assert!(
                message.starts_with(
                    "spec.updateStrategy.canary.steps[1].analysis.metrics[1].provider.prometheus.endpoint: \
                     Invalid value: \"staging\": no such Prometheus endpoint is configured (configured: default;"
                ),
                "{old:?}: {message}"
            );
        }
        // Stored before the admin removed `staging`: a metadata change (a finalizer's
        // removal) still goes through.
        let mut stored = object.clone();
        stored["metadata"]["finalizers"] =
            json!(["orchestration.aibrix.ai/stormservice-finalizer"]);
        assert_eq!(
            verdict(Some(&stored), Some(default_only)).0,
            Verdict::Allowed
        );
    }

    /// A query its endpoint cannot scope to the object's namespace is denied with the
    /// query's field path, on both readings; the same query to an endpoint with
    /// `tenancy: none` is allowed, and a query naming its own namespace is.
    #[test]
    fn a_query_its_endpoint_cannot_scope_is_denied() {
        let verdict = |query: &str, tenancy: Tenancy, old: Option<Value>| {
            let mut object = stormservice(json!({}));
            object["metadata"]["namespace"] = json!("team-a");
            let plain = object.clone();
            object["spec"]["updateStrategy"] = json!({"canary": {"steps": [
                {"analysis": {"metrics": [
                    {"name": "errors", "provider": {"prometheus": {"query": query}},
                     "successCondition": "result < 1"}]}}]}});
            let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
            let old = old.map(|_| plain);
            let body = review_body(Hook::ValidateStormService, operation, object, old);
            let endpoints = [ConfiguredEndpoint {
                name: "default".into(),
                tenancy,
            }];
            let cluster = Cluster {
                endpoints: Some(&endpoints),
                ..Cluster::default()
            };
            let answer = review_knowing(Hook::ValidateStormService, &body, cluster).unwrap();
            let review: Value = serde_json::from_slice(&answer.json).unwrap();
            let message = review["response"]["status"]["message"].as_str();
            (answer.verdict, message.unwrap_or_default().to_string())
        };
        for old in [None, Some(json!({}))] {
            let (denied, message) = verdict(
                r#"sum(up{namespace="team-b"})"#,
                Tenancy::default(),
                old.clone(),
            );
            assert_eq!(denied, Verdict::Denied);
            assert!(
                message.starts_with(
                    "spec.updateStrategy.canary.steps[0].analysis.metrics[0].provider.prometheus.query: \
                     Invalid value: (as written): endpoint \"default\" (tenancy: namespace): the \
                     query selects on `namespace` itself (namespace=\"team-b\")"
                ),
                "{message}"
            );
            let (denied, message) = verdict("sum(", Tenancy::default(), old.clone());
            assert_eq!(denied, Verdict::Denied);
            assert!(message.contains("the query is not PromQL"), "{message}");
            for (query, tenancy) in [
                (r#"sum(up{namespace="team-b"})"#, Tenancy::AsWritten),
                (r#"sum(up{namespace="{{namespace}}"})"#, Tenancy::default()),
                (r#"sum(up{namespace="team-a"})"#, Tenancy::default()),
                ("sum(up)", Tenancy::default()),
            ] {
                assert_eq!(
                    verdict(query, tenancy, old.clone()).0,
                    Verdict::Allowed,
                    "{query}"
                );
            }
        }
    }

    /// Which ordinary reviews the one-pass reading answers (and so which ones the property
    /// test in `oracle` compares with the general path), and which it leaves to that path.
    #[test]
    fn ordinary_creates_and_updates_are_read_in_one_pass() {
        let plain = stormservice(json!({}));
        let rs = roleset(json!([{"name": "prefill"}]));
        let one_pass = [
            (Hook::MutateStormService, "CREATE", &plain, None),
            (Hook::ValidateStormService, "CREATE", &plain, None),
            (
                Hook::MutateStormService,
                "UPDATE",
                &plain,
                Some(plain.clone()),
            ),
            (
                Hook::ValidateStormService,
                "UPDATE",
                &plain,
                Some(plain.clone()),
            ),
            (Hook::MutateRoleSet, "CREATE", &rs, None),
            (Hook::ValidateRoleSet, "UPDATE", &rs, Some(rs.clone())),
        ];
        for (hook, operation, object, old) in one_pass {
            let body = review_body(hook, operation, object.clone(), old);
            let answer =
                review_in_one_pass(hook, &body, Cluster::default()).expect("read in one pass");
            let general = review_in_general(hook, &body, Cluster::default()).unwrap();
            assert_eq!(answer.json, general.json, "{hook:?} {operation}");
        }
        let sidecar = stormservice(json!({ANNOTATION_SIDECAR_INJECTION: "true"}));
        let general = [
            (Hook::MutateStormService, "CREATE", sidecar, None),
            (Hook::MutateStormService, "CREATE", rs.clone(), None), // another kind
            (
                Hook::ValidateRoleSet,
                "DELETE",
                Value::Null,
                Some(rs.clone()),
            ),
            (Hook::ValidateRoleSet, "CREATE", json!([{"spec": {}}]), None), // not an object
            (Hook::MutateRoleSet, "CREATE", roleset(json!(7)), None),       // no view
        ];
        for (hook, operation, object, old) in general {
            let body = review_body(hook, operation, object, old);
            assert!(
                review_in_one_pass(hook, &body, Cluster::default()).is_none(),
                "{hook:?} {operation}"
            );
        }
    }

    /// Which reviews the scanner reads (the property tests in `oracle` hold its answers to
    /// serde's), and which it leaves to serde: an escape, an analysis, a stored object to
    /// compare with.
    #[test]
    fn the_common_shape_is_scanned_and_the_rest_left_to_serde() {
        let plain = stormservice(json!({}));
        let rs = roleset(json!([{"name": "prefill"}]));
        let pretty = |hook: Hook, object: &Value| {
            let review: Value =
                serde_json::from_slice(&review_body(hook, "CREATE", object.clone(), None)).unwrap();
            serde_json::to_vec_pretty(&review).unwrap()
        };
        let scanned = [
            (
                Hook::MutateStormService,
                review_body(Hook::MutateStormService, "CREATE", plain.clone(), None),
            ),
            (
                Hook::ValidateStormService,
                review_body(Hook::ValidateStormService, "CREATE", plain.clone(), None),
            ),
            (
                Hook::ValidateStormService,
                pretty(Hook::ValidateStormService, &plain),
            ),
            (
                Hook::MutateStormService,
                review_body(
                    Hook::MutateStormService,
                    "UPDATE",
                    plain.clone(),
                    Some(plain.clone()),
                ),
            ),
            (
                Hook::ValidateRoleSet,
                review_body(Hook::ValidateRoleSet, "CREATE", rs.clone(), None),
            ),
        ];
        for (hook, body) in scanned {
            let answer = review_scanned(hook, &body, Cluster::default()).expect("scanned");
            let general = review_in_general(hook, &body, Cluster::default()).unwrap();
            assert_eq!(answer.json, general.json, "{hook:?}");
        }
        let mut escaped = plain.clone();
        escaped["metadata"]["name"] = json!("a\"b");
        let mut analysed = plain.clone();
        analysed["spec"]["updateStrategy"] = json!({"canary": {"steps": [{"analysis": {}}]}});
        let mut expressions = plain.clone();
        expressions["spec"]["selector"] = json!({"matchExpressions": []});
        let left = [
            (
                Hook::ValidateStormService,
                review_body(
                    Hook::ValidateStormService,
                    "UPDATE",
                    plain.clone(),
                    Some(plain.clone()),
                ),
            ),
            (
                Hook::ValidateStormService,
                review_body(Hook::ValidateStormService, "CREATE", escaped, None),
            ),
            (
                Hook::ValidateStormService,
                review_body(Hook::ValidateStormService, "CREATE", analysed, None),
            ),
            (
                Hook::ValidateStormService,
                review_body(
                    Hook::ValidateStormService,
                    "DELETE",
                    Value::Null,
                    Some(plain.clone()),
                ),
            ),
            (
                Hook::MutateStormService,
                review_body(Hook::MutateStormService, "CREATE", expressions, None),
            ),
        ];
        for (hook, body) in left {
            assert!(
                review_scanned(hook, &body, Cluster::default()).is_none(),
                "{hook:?}: {}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    #[test]
    fn a_stored_object_is_told_from_a_null_one() {
        for (body, stored) in [
            (&br#"{"oldObject":{"a":1}}"#[..], true),
            (br#"{"oldObject" :  {}}"#, true),
            (br#"{"oldObject":null,"x":"oldObject"}"#, false),
            (br#"{"object":{"oldObject":1}}"#, false),
            (br#"{"oldObject""#, false),
        ] {
            assert_eq!(
                names_stored_object(body),
                stored,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    proptest::proptest! {
        /// A uid is written as serde_json writes a string, whatever it holds.
        #[test]
        fn strings_are_written_as_serde_json_writes_them(text in ".{0,40}") {
            let mut out = Vec::new();
            write_json_string(&mut out, &text);
            proptest::prop_assert_eq!(out, serde_json::to_vec(&text).unwrap());
        }

        /// The patch's encoding is the standard one, padding included.
        #[test]
        fn base64_is_the_standard_encoding(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            use base64::Engine;
            let mut out = b"prefix".to_vec();
            write_base64(&mut out, &bytes);
            let expected = base64::engine::general_purpose::STANDARD.encode(&bytes);
            proptest::prop_assert_eq!(&out[6..], expected.as_bytes());
        }
    }
}
